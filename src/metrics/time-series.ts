/**
 * Per-interval totals of settled requests (default 10 s × 180 = the last 30 minutes), for the
 * dashboard's hit-rate and receipt charts. Bounded memory; plain JSON snapshot.
 */

export interface SeriesPoint {
  /** Interval start, ms since epoch. */
  t: number;
  requests: number;
  errors: number;
  promptTokens: number;
  predictedCachedTokens: number;
  actualCachedTokens: number;
}

/** Points one series keeps (10 s × 180 = 30 minutes by default). */
export const SERIES_CAPACITY = 180;

export class ReceiptSeries {
  readonly intervalMs: number;
  readonly capacity: number;
  readonly #points: SeriesPoint[] = [];

  constructor(intervalMs = 10_000, capacity = SERIES_CAPACITY) {
    this.intervalMs = intervalMs;
    this.capacity = capacity;
  }

  add(now: number, r: { ok: boolean; promptTokens: number; predictedCachedTokens: number; actualCachedTokens: number }): void {
    const t = now - (now % this.intervalMs);
    let p = this.#points[this.#points.length - 1];
    // A clock step backwards folds into the latest interval rather than reordering history.
    if (!p || p.t < t) {
      p = { t, requests: 0, errors: 0, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 };
      this.#points.push(p);
      if (this.#points.length > this.capacity) this.#points.shift();
    }
    p.requests++;
    if (!r.ok) p.errors++;
    p.promptTokens += r.promptTokens;
    p.predictedCachedTokens += r.predictedCachedTokens;
    p.actualCachedTokens += r.actualCachedTokens;
  }

  snapshot(): SeriesPoint[] {
    return this.#points.map((p) => ({ ...p }));
  }
}
