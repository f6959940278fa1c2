/**
 * Media item identity → pad value, as SGLang's scheduler computes it (sgl-project/sglang
 * python/sglang/srt/managers/schedule_batch.py @9d147fd L129, L144-146):
 * `pad = 1_000_000 + hash % 2^30`, where `hash` is the caller's `mm_hashes` entry parsed with
 * Python `int(s, 16)`, or else SGLang's own `hash_feature`: the first 8 bytes (big-endian) of a
 * SHA-256. SGLang hashes the processed pixel tensor; the simulator has no pixels and hashes the
 * media bytes instead, which keeps the property that matters (same bytes → same pad value, other
 * bytes → another) but is not bit-equal to a real worker's value (nobody outside can compute that).
 */
import { padValueFromHash, padValueFromMmHash, isPyError } from "../../src/layout/index.ts";
import { sha256 } from "../../src/util/hash.ts";

/** SGLang `hash_feature` stand-in: int.from_bytes(sha256(bytes)[:8], "big"). */
export function contentHash(bytes: Uint8Array): bigint {
  const d = sha256(bytes);
  let h = 0n;
  for (let i = 0; i < 8; i++) h = (h << 8n) | BigInt(d[i]!);
  return h;
}

export function contentPadValue(bytes: Uint8Array): number {
  return padValueFromHash(contentHash(bytes));
}

/**
 * Pad value from one caller `mm_hashes` entry; null when SGLang would fall back to its own hash for
 * this item (the entry is not a string, or Python's `int(s, 16)` raises ValueError).
 */
export function callerPadValue(entry: unknown): number | null {
  if (typeof entry !== "string") return null;
  try {
    return padValueFromMmHash(entry);
  } catch (e) {
    if (isPyError(e)) return null;
    throw e;
  }
}
