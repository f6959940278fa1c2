/**
 * Hash primitives over hash-wasm. Call `initHashing()` once (async: wasm instantiation); after that
 * every function here is synchronous, so hot paths (block hashing) need no awaits.
 * In workerd the wasm comes from precompiled modules (functions/wasm-shim.ts); in Node hash-wasm
 * compiles its embedded copy.
 */
import { createBLAKE3, createSHA256, createXXHash3, type IHasher } from "hash-wasm";

interface Hashers {
  xxh3Seeded: Map<bigint, IHasher>;
  sha256: IHasher;
  blake3: IHasher;
}

let hashers: Hashers | null = null;
let initPromise: Promise<void> | null = null;

export function initHashing(): Promise<void> {
  if (hashers) return Promise.resolve();
  initPromise ??= (async () => {
    const [x0, x1337, sha, b3] = await Promise.all([
      createXXHash3(0, 0),
      createXXHash3(1337, 0),
      createSHA256(),
      createBLAKE3(256),
    ]);
    hashers = {
      xxh3Seeded: new Map([
        [0n, x0],
        [1337n, x1337],
      ]),
      sha256: sha,
      blake3: b3,
    };
  })();
  return initPromise;
}

function ready(): Hashers {
  if (!hashers) throw new Error("initHashing() must complete before hashing");
  return hashers;
}

function xxh3Hasher(seed: bigint): IHasher {
  const h = ready().xxh3Seeded.get(seed);
  if (!h) throw new Error(`xxh3 seed ${seed} is not one of the preloaded seeds (initHashing)`);
  return h;
}

/** xxh3-64 of `bytes` as an unsigned 64-bit BigInt. */
export function xxh3_64(bytes: Uint8Array, seed: bigint = 0n): bigint {
  const h = xxh3Hasher(seed);
  h.init();
  h.update(bytes);
  const d = h.digest("binary");
  return new DataView(d.buffer, d.byteOffset, 8).getBigUint64(0, false);
}


/** A streaming xxh3-64 (for media bytes arriving in chunks). Not re-entrant across awaits: owns a fresh hasher. */
export async function createStreamingXxh3(seed: bigint = 0n): Promise<IHasher> {
  const lo = Number(seed & 0xffffffffn);
  const hi = Number((seed >> 32n) & 0xffffffffn);
  const h = await createXXHash3(lo, hi);
  h.init();
  return h;
}

/** A streaming SHA-256 (media content digests). Owns a fresh hasher, like createStreamingXxh3. */
export async function createStreamingSha256(): Promise<IHasher> {
  const h = await createSHA256();
  h.init();
  return h;
}

export function sha256(bytes: Uint8Array): Uint8Array {
  const h = ready().sha256;
  h.init();
  h.update(bytes);
  return h.digest("binary");
}

export function blake3Hex(bytes: Uint8Array | string): string {
  const h = ready().blake3;
  h.init();
  h.update(bytes);
  return h.digest("hex");
}
