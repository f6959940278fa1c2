/**
 * SGLang's KV-event wire format (disaggregation/kv_events.py, msgspec array_like structs):
 *   frames  [topic utf-8, seq u64 big-endian, payload]
 *   payload [ts float64, events, attn_dp_rank]
 *   ["BlockStored", [h], parent|nil, token_ids, block_size, nil (lora_id), "GPU"]
 *   ["BlockStored", [h], parent|nil, token_ids, block_size, nil, "GPU", {"cache_salt": salt}]
 *     (BlockStoredWithMetadata, only for salted blocks; kw_only `metadata` goes last)
 *   token_ids are [a, b] pairs for EAGLE bigram pages (mem_cache/events.py _record_store_event)
 *   ["BlockRemoved", [h…], "GPU"]
 *   medium "CPU_PINNED" instead of "GPU" for HiCache's host tier (hicache.ts)
 *   ["AllBlocksCleared"]
 * msgspec writes integers in their most compact msgpack form; @msgpack/msgpack does the same for
 * JS numbers, and for BigInt it writes uint64 (>= 0) / int64 (< 0), which is what msgspec picks for
 * values beyond 32 bits. So hashes go out as numbers when they fit 32 bits and as BigInt otherwise.
 * `ts` is always a float64 (a whole-second time.time() is still a Python float).
 */
import { encode } from "@msgpack/msgpack";
import type { KvEvent } from "./radix-cache.ts";
import { GPU_MEDIUM } from "../../src/engine-events/event-decode.ts";

function wireInt(h: bigint): number | bigint {
  return h >= -0x8000_0000n && h <= 0xffff_ffffn ? Number(h) : h;
}

function eventToWire(e: KvEvent): unknown[] {
  switch (e.type) {
    case "BlockStored":
    {
      const stored = ["BlockStored", [wireInt(e.hash)], e.parent === null ? null : wireInt(e.parent), e.pairs ?? e.tokens, e.blockSize, null, e.medium ?? GPU_MEDIUM];
      return e.cacheSalt === null || e.cacheSalt === undefined ? stored : [...stored, { cache_salt: e.cacheSalt }];
    }
    case "BlockRemoved":
      return ["BlockRemoved", e.hashes.map(wireInt), e.medium ?? GPU_MEDIUM];
    case "AllBlocksCleared":
      return ["AllBlocksCleared"];
  }
}

/** msgpack of `[ts, events, dpRank]` with `ts` forced to float64. */
export function encodeEventBatch(ts: number, events: readonly KvEvent[], dpRank: number): Uint8Array {
  const rest = encode([events.map(eventToWire), dpRank], { useBigInt64: true });
  // `rest` is a fixarray(2) header followed by the two elements; prepend ts as float64 instead.
  if (rest[0] !== 0x92) throw new Error("unexpected msgpack array header");
  const out = new Uint8Array(1 + 9 + rest.length - 1);
  out[0] = 0x93;
  out[1] = 0xcb;
  new DataView(out.buffer).setFloat64(2, ts, false);
  out.set(rest.subarray(1), 10);
  return out;
}

export function encodeSeq(seq: bigint): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, seq, false);
  return b;
}

/** The replay end marker's seq frame: -1 as a signed 8-byte big-endian integer. */
export const REPLAY_END_SEQ: Uint8Array = (() => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigInt64(0, -1n, false);
  return b;
})();
