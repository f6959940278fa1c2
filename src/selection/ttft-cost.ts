/**
 * Cost "ttft": the estimated time to first token as the client at this edge sees it, in ms
 * (lower wins),
 *
 *   ttft(w) = round trip from the edge to w (regions.ts; 0 without a regions table)
 *           + (w's active prefill tokens + uncached tokens of this request) / w's prefill rate
 *           + load-back of the request's blocks in w's host memory or shared storage (tier-cost.ts)
 *           + decodeMsPerBlock × (w's active decode blocks + this request's new blocks)
 *
 * where uncached = max(0, ISL − (GPU overlap + host blocks) × block size). A host-memory hit saves
 * its prefill and costs its load-back, so a worker with the prefix in host memory beats one that
 * must prefill it whenever loading is faster than prefilling, and loses to one holding it on the GPU. Cache overlap is worth exactly the prefill
 * time it saves, so it is traded against queueing (and round trips) in the same unit: a long cached
 * prefix wins until the worker's queue, or the extra round trip to it, costs more than the prefill
 * it saves.
 */
import type { Candidate, Scored } from "./selection.ts";
import { DEFAULT_TIER_COST, hostLoadBackMs, storageLoadMs, type TierCostParams } from "./tier-cost.ts";

/** The estimate's tunables (`KVEDGE_REGIONS` may set both; regions.ts). */
export interface TtftParams {
  /** Prefill throughput assumed for workers that report none (tokens/s). */
  defaultPrefillTokensPerSec: number;
  /** Time-to-first-token cost of one active decode block on a worker (batch interference), ms. */
  decodeMsPerBlock: number;
}

export const DEFAULT_TTFT_PARAMS: Readonly<TtftParams> = { defaultPrefillTokensPerSec: 10_000, decodeMsPerBlock: 0.01 };

/** How far a candidate is from the edge and how fast it prefills (the rate it is priced at: src/routing-index/prefill-rates.ts). */
export interface Placement {
  rttMs: number;
  prefillTokensPerSec: number;
}

export interface TtftBreakdown {
  rttMs: number;
  queueMs: number;
  prefillMs: number;
  /** Loading the request's host-memory and shared-storage blocks to the GPU. */
  loadBackMs: number;
  decodeLoadMs: number;
  totalMs: number;
}

export function estimateTtft(params: TtftParams, c: Candidate, p: Placement, isl: number, blockSize: number, tiers: TierCostParams = DEFAULT_TIER_COST): TtftBreakdown {
  const rate = p.prefillTokensPerSec;
  const hostBlocks = c.hostBlocks ?? 0;
  const storageBlocks = c.storageBlocks ?? 0;
  const uncached = Math.max(0, isl - (c.overlapBlocks + hostBlocks + storageBlocks) * blockSize);
  const loadBackMs = hostLoadBackMs(tiers, hostBlocks, blockSize) + storageLoadMs(tiers, storageBlocks, blockSize);
  const queueMs = (Math.max(0, c.activePrefillTokens) / rate) * 1000;
  const prefill = (uncached / rate) * 1000;
  // New decode blocks: the request's, minus a leading run the worker's active requests already hold.
  const requestBlocks = Math.max(0, Math.ceil(isl / blockSize) - (c.sharedActiveBlocks ?? 0));
  const decodeLoadMs = params.decodeMsPerBlock * (c.activeDecodeBlocks + requestBlocks);
  return { rttMs: p.rttMs, queueMs, prefillMs: prefill, loadBackMs, decodeLoadMs, totalMs: p.rttMs + queueMs + prefill + loadBackMs + decodeLoadMs };
}

/** Scores candidates by estimated TTFT in ms; `placements[i]` is candidate i's. */
export function scoreByTtft(input: { candidates: readonly Candidate[]; placements: readonly Placement[]; isl: number; blockSize: number; params: TtftParams; tiers?: TierCostParams }): Scored[] {
  return input.candidates.map((c, i) => ({
    slot: c.slot,
    cost: estimateTtft(input.params, c, input.placements[i]!, input.isl, input.blockSize, input.tiers).totalMs,
    overlapBlocks: c.overlapBlocks,
    ...(c.hostBlocks ? { hostBlocks: c.hostBlocks } : {}),
    ...(c.storageBlocks ? { storageBlocks: c.storageBlocks } : {}),
  }));
}
