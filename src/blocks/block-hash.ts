/**
 * The router's local block hash: xxh3-64 over the little-endian u32 token ids of one full block,
 * seeded with 1337 (Dynamo's XXH3_SEED). Only complete blocks are hashed; a partial tail is ignored.
 * Position independence is intended: prefix structure comes from the radix index, not the hash.
 *
 * Cache namespaces (SGLang's `cache_salt`; docs/relay.md §Tenant isolation): a namespaced block's
 * local hash is xxh3-64(namespace tag (8 bytes) || its plain local hash (u64 LE)), so a salted block
 * and an unsalted (or differently salted) block with the same tokens never share a local hash, and
 * an unsalted block's local hash is its plain one. The edge maps a request's hashes with the salt it sends
 * (after the prompt-prefix cache, whatever path produced them); the relay maps a stored block's
 * with the salt SGLang reports in BlockStoredWithMetadata.
 */
import { xxh3_64 } from "../util/hash.ts";
import { bytesToHex } from "../util/hex.ts";
import { XXH3_WORDS_MAX, XXH3_WORDS_MIN, xxh3Flips16, xxh3Keys, xxh3Of16Bytes, xxh3Words } from "./xxh3-words.ts";

export const LOCAL_HASH_SEED = 1337n;

/**
 * A request's local block hashes as the index takes them: a plain array, or a BigUint64Array (what
 * the edge sends over the route RPC: it serializes as one buffer, not thousands of BigInts).
 */
export type LocalHashes = readonly bigint[] | BigUint64Array;

/**
 * The first `count` hashes as little-endian u32 pairs (lo at 2i, hi at 2i + 1): a view of a
 * BigUint64Array (the route RPC's form, no copy), a converted copy of a bigint array.
 */
export function localHashWords(hashes: LocalHashes, count = hashes.length): Uint32Array {
  const big = hashes instanceof BigUint64Array ? hashes : BigUint64Array.from(hashes.slice(0, count));
  return new Uint32Array(big.buffer, big.byteOffset, 2 * count);
}

/** 8 bytes identifying a cache namespace inside local hashes; null = no namespace. */
export type NamespaceTag = Uint8Array | null;

const nsEncoder = new TextEncoder();

/** The tag of cache namespace `namespace` (null/absent: none). Requires initHashing(). */
export function namespaceTag(namespace: string | null | undefined): NamespaceTag {
  if (namespace === null || namespace === undefined) return null;
  const h = xxh3_64(nsEncoder.encode("kvedge-cache-namespace-v1\0" + namespace), LOCAL_HASH_SEED);
  const tag = new Uint8Array(8);
  new DataView(tag.buffer).setBigUint64(0, h, true);
  return tag;
}

/** A tag as text, for keys of per-namespace memos: its hex, "" for no namespace. */
export function namespaceTagHex(tag: NamespaceTag): string {
  return tag === null ? "" : bytesToHex(tag);
}

/** Hashes every full block of `tokens`. Requires initHashing(). */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number): bigint[] {
  return localBlockHashesOfParts([tokens], blockSize);
}

let blockBuf = new Uint8Array(64);
let blockWords = new Uint32Array(16);
const hashOut = new Uint32Array(2);
const hashBytes = new DataView(new ArrayBuffer(8));

/**
 * localBlockHashes of the parts' concatenation, without building it (the prompt-prefix cache hashes
 * a reused tail, the middle and the new text as one run). Blocks of 5–32 tokens (17–128 bytes) are
 * hashed by xxh3Words, the same XXH3-64 without hash-wasm's per-call cost. Requires initHashing().
 */
export function localBlockHashesOfParts(parts: readonly ArrayLike<number>[], blockSize: number): bigint[] {
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
  if (blockSize < XXH3_WORDS_MIN || blockSize > XXH3_WORDS_MAX) return hashBlocksThroughBytes(parts, blockSize);
  if (blockWords.length < blockSize) blockWords = new Uint32Array(blockSize);
  const words = blockWords;
  const keys = xxh3Keys(LOCAL_HASH_SEED);
  const out: bigint[] = [];
  let fill = 0;
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      words[fill] = part[i]!;
      if (++fill === blockSize) {
        xxh3Words(words, 0, blockSize, keys, hashOut, 0);
        hashBytes.setUint32(0, hashOut[0]!, true);
        hashBytes.setUint32(4, hashOut[1]!, true);
        out.push(hashBytes.getBigUint64(0, true));
        fill = 0;
      }
    }
  }
  return out;
}

/** Block sizes outside xxh3Words' range: the bytes through hash-wasm. */
function hashBlocksThroughBytes(parts: readonly ArrayLike<number>[], blockSize: number): bigint[] {
  if (blockBuf.length < blockSize * 4) blockBuf = new Uint8Array(blockSize * 4);
  const buf = blockBuf.subarray(0, blockSize * 4);
  const view = new DataView(buf.buffer, 0, blockSize * 4);
  const out: bigint[] = [];
  let fill = 0;
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      view.setUint32(fill * 4, part[i]! >>> 0, true);
      if (++fill === blockSize) {
        out.push(xxh3_64(buf, LOCAL_HASH_SEED));
        fill = 0;
      }
    }
  }
  return out;
}

/** Local hash of exactly one block's tokens (relays recompute these from event token ids). */
export function localBlockHash(blockTokens: ArrayLike<number>): bigint {
  const buf = new Uint8Array(blockTokens.length * 4);
  const view = new DataView(buf.buffer);
  for (let i = 0; i < blockTokens.length; i++) view.setUint32(i * 4, blockTokens[i]! >>> 0, true);
  return xxh3_64(buf, LOCAL_HASH_SEED);
}

const nsView = new DataView(new ArrayBuffer(16));
const nsOut = new Uint32Array(2);

/**
 * A plain local hash moved into namespace `ns` (unchanged for null): XXH3-64 of the 16 bytes by
 * xxh3Of16Bytes (hash-wasm's per-call cost was most of a cold 32k request's namespacing).
 */
export function namespacedLocalHash(plain: bigint, ns: NamespaceTag): bigint {
  if (ns === null) return plain;
  const v = nsView;
  for (let i = 0; i < 8; i++) v.setUint8(i, ns[i]!);
  v.setBigUint64(8, plain, true);
  xxh3Of16Bytes(v.getUint32(0, true), v.getUint32(4, true), v.getUint32(8, true), v.getUint32(12, true), xxh3Flips16(LOCAL_HASH_SEED), nsOut, 0);
  v.setUint32(0, nsOut[0]!, true);
  v.setUint32(4, nsOut[1]!, true);
  return v.getBigUint64(0, true);
}

export function namespacedLocalHashes(plain: readonly bigint[], ns: NamespaceTag): bigint[] {
  return ns === null ? plain.slice() : plain.map((h) => namespacedLocalHash(h, ns));
}

/**
 * namespacedLocalHashes (the plain hashes for null) as one BigUint64Array, written word by word:
 * no BigInt is made for a namespaced hash, and arrays of several pieces join by copying.
 */
export function namespacedLocalHashWords(plain: readonly bigint[], ns: NamespaceTag): BigUint64Array {
  const out = new BigUint64Array(plain.length);
  for (let i = 0; i < plain.length; i++) out[i] = plain[i]!;
  if (ns === null) return out;
  const words = new Uint32Array(out.buffer);
  const tag = new DataView(ns.buffer, ns.byteOffset, 8);
  const t0 = tag.getUint32(0, true);
  const t1 = tag.getUint32(4, true);
  const flips = xxh3Flips16(LOCAL_HASH_SEED);
  for (let i = 0; i < plain.length; i++) xxh3Of16Bytes(t0, t1, words[2 * i]!, words[2 * i + 1]!, flips, words, 2 * i);
  return out;
}

/**
 * Estimated bytes of the routed copy edge/cache-salt.ts keeps for a cached piece of `hashes` block
 * hashes (its namespacedLocalHashWords array and buffer, the entry holding it, the WeakMap slot):
 * 8 B a hash plus 384 B. Measured in Node 22 (heap after GC plus array buffers), beyond 8 B a hash:
 * 222–251 B a piece for 20k pieces that all stay, 337–366 B in a prompt-prefix cache fed past its
 * budget (the WeakMap's table stays sized for pieces since evicted). None for a piece without hashes
 * (no copy is kept). The caches owning the pieces count it whether or not the copy exists yet. The
 * copies share buffers that may keep up to 4 × the words counted here reachable (cache-salt.ts
 * routedHashes): the budgets bound the copies' words to 32 B a counted hash, not 8 B.
 */
export function routedCopyBytes(hashes: number): number {
  return hashes === 0 ? 0 : 8 * hashes + 384;
}
