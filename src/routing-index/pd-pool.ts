/**
 * Prefill/decode disaggregated pools (SGLang `--disaggregation-mode prefill|decode`): which workers
 * take the prefill pick (by exact overlap: the prefix lives in the prefill workers' radix caches,
 * whose KV events feed the index) and which take the decode side (by load), and what makes a pool
 * unservable. A decode worker publishes no KV events by default: SGLang forces it onto a ChunkCache
 * (python/sglang/srt/arg_groups/pd_disaggregation_hook.py L29-58 @9d147fd).
 */
import type { DisaggregationMode } from "../relay-wire/relay-protocol.ts";

type Role = { disaggregationMode?: DisaggregationMode };
type Named = Role & { workerId: string; status: string };

export function isDecodeWorker(w: Role): boolean {
  return w.disaggregationMode === "decode";
}

export function isPrefillWorker(w: Role): boolean {
  return w.disaggregationMode === "prefill";
}

/** The receipt id under which a PD request's decode-side load is held (released with the request's). */
export function decodeLoadId(receiptId: string): string {
  return `${receiptId}/decode`;
}

/**
 * Why the pool cannot serve a PD request, naming the worker: a decode worker with no prefill peer
 * up, or a prefill worker with no decode peer up; null when the pool is servable (or unified).
 */
export function pdPoolProblem(workers: Iterable<Named>): string | null {
  const up = [...workers].filter((w) => w.status === "up");
  const decode = up.filter(isDecodeWorker);
  const prefill = up.filter(isPrefillWorker);
  const unified = up.length - decode.length - prefill.length;
  if (decode.length > 0 && prefill.length === 0 && unified === 0)
    return `decode worker ${decode[0]!.workerId} has no prefill peer up: start SGLang prefill workers (--disaggregation-mode prefill) in this pool`;
  if (prefill.length > 0 && decode.length === 0 && unified === 0)
    return `prefill worker ${prefill[0]!.workerId} has no decode peer up: start SGLang decode workers (--disaggregation-mode decode) in this pool`;
  return null;
}

/**
 * The decode worker for a PD request: one in the prefill's region when there is one (the KV crosses
 * no region boundary), then the least loaded (decode blocks in flight); ties by registration order.
 */
export function pickDecode<W extends { slot: number; region?: string | null }>(
  decoders: readonly W[],
  decodeBlocks: (slot: number) => number,
  prefillRegion: string | null = null,
): W | null {
  const near = prefillRegion === null ? [] : decoders.filter((w) => (w.region ?? null) === prefillRegion);
  const pool = near.length > 0 ? near : decoders;
  let best: W | null = null;
  let bestLoad = Infinity;
  for (const w of pool) {
    const load = decodeBlocks(w.slot);
    if (load < bestLoad) {
      best = w;
      bestLoad = load;
    }
  }
  return best;
}
