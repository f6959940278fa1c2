/**
 * The most (worker, block) entries one index object holds, exact and approximate-mode entries
 * together. A Durable Object has 128 MB; the radix index costs about `BYTES_PER_BLOCK` per entry at
 * scale, growth slack included (bench/scale/index-bytes.mjs: 77–82 B), so the default budget keeps
 * the block index near 46 MB: a capacity doubling still fits, with room for the isolate, load
 * tracking, receipts and approximate mode. A pool whose workers cache more than one object's budget needs more shards
 * (docs/scale.md §4). When full, the object refuses further stored blocks instead of growing: each
 * refusal is counted (`block_budget` drop reason) and the worker whose blocks were refused is marked
 * approximate until a dump of it fits again.
 */
export const BYTES_PER_BLOCK = 77;
export const DEFAULT_BLOCK_BUDGET = 600_000;

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
