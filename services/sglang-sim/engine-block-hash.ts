/**
 * SGLang's own KV-event block hash (mem_cache hash_binding.cpp): a SHA-256 chain over pages,
 *   d_0 = SHA256(le_u32(page_0)), d_k = SHA256(d_{k-1} || le_u32(page_k)),
 * published as the signed big-endian int64 of the first 8 digest bytes. The router treats these as
 * opaque ids; the simulator must publish exactly these. Requires initHashing().
 */
import { sha256 } from "../../src/util/hash.ts";

export interface EngineBlockHashes {
  digests: Uint8Array[];
  hashes: bigint[];
}

/** Hashes every page of `tokens` (a trailing partial page too, as the golden cases do). */
export function engineBlockHashes(
  tokens: ArrayLike<number>,
  pageSize: number,
  priorDigest: Uint8Array | null = null,
): EngineBlockHashes {
  const digests: Uint8Array[] = [];
  const hashes: bigint[] = [];
  let prev = priorDigest;
  for (let start = 0; start < tokens.length; start += pageSize) {
    const end = Math.min(start + pageSize, tokens.length);
    const prefix = prev ? prev.length : 0;
    const buf = new Uint8Array(prefix + (end - start) * 4);
    if (prev) buf.set(prev, 0);
    const view = new DataView(buf.buffer);
    for (let i = start; i < end; i++) view.setUint32(prefix + (i - start) * 4, tokens[i]! >>> 0, true);
    const d = sha256(buf);
    digests.push(d);
    hashes.push(new DataView(d.buffer, d.byteOffset, 8).getBigInt64(0, false));
    prev = d;
  }
  return { digests, hashes };
}
