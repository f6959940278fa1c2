/**
 * Worker selection. Cost per worker (lower wins):
 *   max(0, (active prefill tokens + ISL) / B − overlap) + active decode blocks + request blocks
 * Ties are broken uniformly at random (reservoir sampling); with temperature T > 0 costs are
 * min–max normalised and sampled from a softmax instead.
 */

export interface Candidate {
  slot: number;
  overlapBlocks: number;
  activePrefillTokens: number;
  activeDecodeBlocks: number;
  /** Leading request blocks already held by the worker's active requests (not new decode load). */
  sharedActiveBlocks?: number;
}

export interface SelectionInput {
  candidates: readonly Candidate[];
  isl: number;
  blockSize: number;
  temperature?: number;
  overlapWeight?: number;
  /** Weight of the decode-load terms (Dynamo's default 1; 0 = prefill/TTFT only). */
  decodeWeight?: number;
  random?: () => number;
}

export interface Scored {
  slot: number;
  cost: number;
  overlapBlocks: number;
}

export function workerCost(c: Candidate, isl: number, blockSize: number, overlapWeight = 1, decodeWeight = 1): number {
  // Blocks the request adds to the worker's decode load: all of them, minus a leading run that
  // active requests on that worker already hold (counted once, like Dynamo's unique blocks).
  const requestBlocks = Math.ceil(isl / blockSize) - (c.sharedActiveBlocks ?? 0);
  const prefill = Math.max(0, (c.activePrefillTokens + isl) / blockSize - overlapWeight * c.overlapBlocks);
  return prefill + decodeWeight * (c.activeDecodeBlocks + requestBlocks);
}

export function scoreCandidates(input: SelectionInput): Scored[] {
  return input.candidates.map((c) => ({
    slot: c.slot,
    cost: workerCost(c, input.isl, input.blockSize, input.overlapWeight ?? 1, input.decodeWeight ?? 1),
    overlapBlocks: c.overlapBlocks,
  }));
}

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
