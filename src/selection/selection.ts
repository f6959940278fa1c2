/**
 * Worker selection: every live worker gets a cost, the lowest wins. Two costs, one per file:
 *  - "ttft" (ttft-cost.ts, the default): estimated time to first token in ms. With a regions table
 *    (regions.ts) and the edge's region known it includes each worker's round trip from the edge;
 *    otherwise every worker is scored with no round trip. The router adds each worker's recurring
 *    load (recurring-load.ts): the turns its conversations keep bringing back; and, on a worker whose
 *    cache is full, the prefill of tokens another worker holds (duplicate-cost.ts): the copy evicts.
 *  - "blocks" (block-cost.ts): Dynamo's block count. With a regions table and the edge's region
 *    known, estimated TTFT is used instead, since only it can weigh round trips.
 * Ties are broken uniformly at random (reservoir sampling); with temperature T > 0 costs are
 * min–max normalised and sampled from a softmax instead.
 */

/** What every cost reads of one worker for one request. */
export interface Candidate {
  slot: number;
  overlapBlocks: number;
  activePrefillTokens: number;
  activeDecodeBlocks: number;
  /** Leading request blocks already held by the worker's active requests (not new decode load). */
  sharedActiveBlocks?: number;
  /** Blocks right after the GPU overlap held in the worker's host memory (HiCache): loaded back, not prefilled. */
  hostBlocks?: number;
  /** Blocks after those assumed in a storage backend the worker shares (approximate; HiCache L3). */
  storageBlocks?: number;
  /** The worker's cache is full (it has evicted): a block it stores displaces a cached one (duplicate-cost.ts). */
  cacheFull?: boolean;
  /** A GPU eviction on the worker keeps the block in host memory (HiCache with room there): a displaced block costs its load-back (duplicate-cost.ts). */
  demotesToHost?: boolean;
}

export interface Scored {
  slot: number;
  cost: number;
  overlapBlocks: number;
  /** Host-memory blocks the cost credited past `overlapBlocks` (0 or absent: none). */
  hostBlocks?: number;
  /** Shared-storage blocks credited past those (approximate; 0 or absent: none). */
  storageBlocks?: number;
  /** Cost "ttft": the duplication term included in `cost`, ms (duplicate-cost.ts; 0 or absent: none). */
  duplicateMs?: number;
}

export const SELECTION_COSTS = ["ttft", "blocks"] as const;
export type SelectionCost = (typeof SELECTION_COSTS)[number];
/** The cost a pool uses unless configured otherwise (`KVEDGE_ROUTING.cost`). */
export const DEFAULT_SELECTION_COST: SelectionCost = "ttft";

/** Returns the index into `scored` of the chosen worker, or -1 when empty. */
export function pickIndex(scored: readonly Scored[], temperature = 0, random: () => number = Math.random): number {
  if (scored.length === 0) return -1;
  if (temperature > 0) return softmaxSample(scored, temperature, random);
  let best = -1;
  let ties = 0;
  for (let i = 0; i < scored.length; i++) {
    const c = scored[i]!.cost;
    if (best < 0 || c < scored[best]!.cost) {
      best = i;
      ties = 1;
    } else if (c === scored[best]!.cost) {
      ties++;
      if (random() * ties < 1) best = i;
    }
  }
  return best;
}

function softmaxSample(scored: readonly Scored[], t: number, random: () => number): number {
  let min = Infinity;
  let max = -Infinity;
  for (const s of scored) {
    min = Math.min(min, s.cost);
    max = Math.max(max, s.cost);
  }
  if (max === min) return Math.min(scored.length - 1, Math.floor(random() * scored.length));
  const w = scored.map((s) => Math.exp(-(s.cost - min) / ((max - min) * t)));
  const total = w.reduce((a, b) => a + b, 0);
  let r = random() * total;
  for (let i = 0; i < w.length; i++) {
    r -= w[i]!;
    if (r <= 0) return i;
  }
  return w.length - 1;
}
