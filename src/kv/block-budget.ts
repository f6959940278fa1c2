/**
 * The most blocks one index object holds. A Durable Object has 128 MB; the radix index costs about
 * `BYTES_PER_BLOCK` per (worker, block) at scale (bench/scale measures it), so the default budget
 * keeps the block index near half of that and leaves room for the isolate, load tracking, receipts
 * and approximate mode. A pool whose workers cache more than one object's budget needs more shards
 * (docs/scale.md §4). When full, the object refuses further stored blocks instead of growing: each
 * refusal is counted (`block_budget` drop reason) and the worker whose blocks were refused is marked
 * approximate until a dump of it fits again.
 */
export const BYTES_PER_BLOCK = 74;
export const DEFAULT_BLOCK_BUDGET = 800_000;

export class BlockBudget {
  readonly limit: number;
  /** Blocks refused since start (metrics). */
  refused = 0;

  constructor(limit: number = DEFAULT_BLOCK_BUDGET) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`bad block budget ${limit}`);
    this.limit = limit;
  }

  /** How many of `wanted` more blocks fit next to `held`; the rest are counted as refused. */
  admit(held: number, wanted: number): number {
    const room = Math.max(0, this.limit - held);
    const ok = Math.min(room, wanted);
    this.refused += wanted - ok;
    return ok;
  }
}
