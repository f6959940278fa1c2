/**
 * Cost "blocks", Dynamo's (lower wins), in blocks of the pool's block size B:
 *   max(0, (active prefill tokens + ISL) / B − overlap) + decodeWeight × (active decode blocks + request blocks)
 */
import type { Candidate, Scored } from "./selection.ts";

export interface BlockCostInput {
  candidates: readonly Candidate[];
  isl: number;
  blockSize: number;
  overlapWeight?: number;
  /** Weight of the decode-load terms (Dynamo's default 1; 0 = prefill only). */
  decodeWeight?: number;
}

export function blockCost(c: Candidate, isl: number, blockSize: number, overlapWeight = 1, decodeWeight = 1): number {
  // Blocks the request adds to the worker's decode load: all of them, minus a leading run that
  // active requests on that worker already hold (counted once, like Dynamo's unique blocks).
  const requestBlocks = Math.ceil(isl / blockSize) - (c.sharedActiveBlocks ?? 0);
  const prefill = Math.max(0, (c.activePrefillTokens + isl) / blockSize - overlapWeight * c.overlapBlocks);
  return prefill + decodeWeight * (c.activeDecodeBlocks + requestBlocks);
}

export function scoreByBlocks(input: BlockCostInput): Scored[] {
  return input.candidates.map((c) => ({
    slot: c.slot,
    cost: blockCost(c, input.isl, input.blockSize, input.overlapWeight ?? 1, input.decodeWeight ?? 1),
    overlapBlocks: c.overlapBlocks,
  }));
}
