/**
 * The router's local block hash: xxh3-64 over the little-endian u32 token ids of one full block,
 * seeded with 1337 (Dynamo's XXH3_SEED). Only complete blocks are hashed; a partial tail is ignored.
 * Position independence is intended: prefix structure comes from the radix index, not the hash.
 */
import { xxh3_64 } from "../util/hash.ts";

export const LOCAL_HASH_SEED = 1337n;

/** Hashes every full block of `tokens`. Requires initHashing(). */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number): bigint[] {
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
  const n = Math.floor(tokens.length / blockSize);
  const out = new Array<bigint>(n);
  const buf = new Uint8Array(blockSize * 4);
  const view = new DataView(buf.buffer);
  for (let b = 0; b < n; b++) {
    const base = b * blockSize;
    for (let i = 0; i < blockSize; i++) view.setUint32(i * 4, tokens[base + i]! >>> 0, true);
    out[b] = xxh3_64(buf, LOCAL_HASH_SEED);
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
