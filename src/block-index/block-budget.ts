/**
 * The most (worker, block) entries one index object holds, exact and approximate-mode entries
 * together. A Durable Object has 128 MB. The radix index costs `bytesPerEntry(workers)` per entry,
 * growth slack included: each node carries one bit per worker slot, so the cost rises with the
 * workers one object serves (bench/scale/index-bytes.mjs: 77 B at 32 workers, 85 B at 256, 179 B at
 * 1 024). The budget is the smaller of an entry count and what fits in `DEFAULT_INDEX_BYTES`
 * (46 MiB: a capacity doubling still fits, with room for the isolate, load tracking, receipts and
 * the approximate-mode index). A pool whose workers cache more than one object's budget needs more shards
 * (docs/scale.md §4). Each worker gets a share of the budget (src/routing-index/block-shares.ts);
 * blocks past it are refused instead of stored: each refusal is counted (`block_budget` drop
 * reason) and the worker whose blocks were refused is marked approximate until a dump of it fits.
 */
export const DEFAULT_BLOCK_BUDGET = 600_000;
export const DEFAULT_INDEX_BYTES = 46 * 1024 * 1024;

/** Bytes per (worker, block) entry for `workers` slots: a fit of the measurements above (conservative between them). */
export function bytesPerEntry(workers: number): number {
  return 74 + 0.103 * Math.max(1, workers);
}

export class BlockBudget {
  /** Configured entry limit (the effective one may be lower: limitFor). */
  readonly limit: number;
  readonly maxBytes: number;
  /** Blocks refused since start (metrics). */
  refused = 0;

  constructor(limit: number = DEFAULT_BLOCK_BUDGET, maxBytes: number = DEFAULT_INDEX_BYTES) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`bad block budget ${limit}`);
    this.limit = limit;
    this.maxBytes = maxBytes;
  }

  /** Entries allowed with `workers` worker slots. */
  limitFor(workers: number): number {
    return Math.min(this.limit, Math.floor(this.maxBytes / bytesPerEntry(workers)));
  }

  /** Counts blocks refused (past the object's limit or the worker's share: routing-index/block-shares.ts). */
  countRefused(n: number): void {
    this.refused += n;
  }
}
