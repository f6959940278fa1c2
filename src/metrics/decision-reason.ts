/**
 * One line on why the index picked a worker, for the dashboard, `kvedge explain` and logs.
 * Derived from the candidates' overlaps and costs exactly as selection saw them.
 */

export interface ReasonCandidate {
  workerId: string;
  overlapBlocks: number;
  cost: number;
}

export function choiceReason(chosenId: string, candidates: readonly ReasonCandidate[], totalBlocks: number): string {
  const chosen = candidates.find((c) => c.workerId === chosenId);
  if (!chosen) return "unknown worker";
  if (candidates.length === 1) return `only candidate (overlap ${chosen.overlapBlocks}/${totalBlocks} blocks)`;
  let best = chosen;
  for (const c of candidates) if (c.overlapBlocks > best.overlapBlocks) best = c;
  if (totalBlocks === 0) return "prompt shorter than one block; lowest load";
  if (best.overlapBlocks === 0) return `no cached prefix on any worker (0/${totalBlocks}); lowest load`;
  if (best === chosen) {
    const tied = candidates.filter((c) => c !== chosen && c.overlapBlocks === chosen.overlapBlocks).length;
    return tied > 0
      ? `longest cached prefix ${chosen.overlapBlocks}/${totalBlocks} blocks, tied with ${tied} other(s); lower load`
      : `longest cached prefix ${chosen.overlapBlocks}/${totalBlocks} blocks`;
  }
  return `load outweighed prefix: ${best.workerId} held ${best.overlapBlocks}/${totalBlocks} blocks (cost ${round2(best.cost)} vs ${round2(chosen.cost)})`;
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}
