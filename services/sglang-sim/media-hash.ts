/**
 * Media item identity → pad value, as SGLang's scheduler computes it (sgl-project/sglang
 * python/sglang/srt/managers/schedule_batch.py @9d147fd L129, L144-146):
 * `pad = 1_000_000 + hash % 2^30`, where `hash` is the caller's `mm_hashes` entry parsed with
 * Python `int(s, 16)`, or else SGLang's own `hash_feature`: the first 8 bytes (big-endian) of a
 * SHA-256. SGLang hashes the processed pixel tensor; the simulator has no pixels and hashes the
 * media bytes instead, which keeps the property that matters (same bytes → same pad value, other
 * bytes → another) but is not bit-equal to a real worker's value (nobody outside can compute that).
 *
 * SGLang hashes every item of every request again (its Qwen-VL processor loads and processes each
 * `image_data` item per request: python/sglang/srt/multimodal/processors/base_processor.py
 * @0001380b `fast_load_mm_data` / `_load_single_item`), in native code. So does the simulator, with
 * Node's native SHA-256 rather than the edge's wasm one (src/util/hash.ts): a vision chat re-sends
 * every earlier image, and the worker's CPU is taken from the two cores the edge bench measures on.
 */
import { createHash } from "node:crypto";
import { padValueFromHash, padValueFromMmHash, isPyError } from "../../src/layout/index.ts";

/** SHA-256 digests of the items loaded, by their bytes object: the loader's record and the pad value hash them once. */
const digests = new WeakMap<Uint8Array, Buffer>();

/** The SHA-256 of an item's bytes (computed once per bytes object; the bytes must not change after). */
export function sha256Of(bytes: Uint8Array): Buffer {
  let d = digests.get(bytes);
  if (!d) digests.set(bytes, (d = createHash("sha256").update(bytes).digest()));
  return d;
}

/** SGLang `hash_feature` stand-in: int.from_bytes(sha256(bytes)[:8], "big"). */
export function contentHash(bytes: Uint8Array): bigint {
  const d = sha256Of(bytes);
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
