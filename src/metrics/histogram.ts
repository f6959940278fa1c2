/**
 * Fixed-bucket histogram whose snapshot is plain JSON (it crosses the Durable Object RPC boundary).
 * `counts[i]` counts observations ≤ bounds[i] and > bounds[i-1] (not cumulative); values above the
 * last bound only show in `count`, as the +Inf bucket.
 */

export interface HistogramSnapshot {
  bounds: number[];
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram {
  readonly bounds: readonly number[];
  readonly #counts: number[];
  #sum = 0;
  #count = 0;

  constructor(bounds: readonly number[]) {
    for (let i = 1; i < bounds.length; i++) if (!(bounds[i]! > bounds[i - 1]!)) throw new RangeError("bucket bounds must increase");
    this.bounds = bounds;
    this.#counts = new Array<number>(bounds.length).fill(0);
  }

  observe(v: number): void {
    if (!Number.isFinite(v)) return;
    this.#sum += v;
    this.#count++;
    // Few buckets: a linear scan beats a binary search here.
    for (let i = 0; i < this.bounds.length; i++) {
      if (v <= this.bounds[i]!) {
        this.#counts[i]!++;
        return;
      }
    }
  }

  snapshot(): HistogramSnapshot {
    return { bounds: [...this.bounds], counts: [...this.#counts], sum: this.#sum, count: this.#count };
  }
}

/** Block-count buckets: powers of two (a 16-token block: 16 tokens … 32k tokens). */
export const BLOCK_BUCKETS: readonly number[] = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];
export const RATIO_BUCKETS: readonly number[] = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1];
/** Edge overhead (validate → tokenize → hash → index round trip), seconds. */
export const OVERHEAD_BUCKETS: readonly number[] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
