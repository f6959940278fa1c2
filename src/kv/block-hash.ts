/**
 * The router's local block hash: xxh3-64 over the little-endian u32 token ids of one full block,
 * seeded with 1337 (Dynamo's XXH3_SEED). Only complete blocks are hashed; a partial tail is ignored.
 * Position independence is intended: prefix structure comes from the radix index, not the hash.
 */
import { xxh3_64 } from "../util/hash.ts";

export const LOCAL_HASH_SEED = 1337n;

/**
 * A request's local block hashes as the index takes them: a plain array, or a BigUint64Array (what
 * the edge sends over the route RPC: it serializes as one buffer, not thousands of BigInts).
 */
export type LocalHashes = readonly bigint[] | BigUint64Array;

/** Hashes every full block of `tokens`. Requires initHashing(). */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number): bigint[] {
  return localBlockHashesOfParts([tokens], blockSize);
}

let blockBuf = new Uint8Array(64);

/**
 * localBlockHashes of the parts' concatenation, without building it (the prompt-prefix cache hashes
 * a reused tail, the middle and the new text as one run). Requires initHashing().
 */
export function localBlockHashesOfParts(parts: readonly ArrayLike<number>[], blockSize: number): bigint[] {
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
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
