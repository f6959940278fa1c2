/**
 * How fast a pool finishes requests (settles per second over the last `windowMs`), and from it the
 * `Retry-After` of a refused request: the time the queue ahead of it takes to drain.
 */
const BUCKET_MS = 1_000;

export const MIN_RETRY_AFTER_S = 1;
export const MAX_RETRY_AFTER_S = 60;

export class DrainRate {
  readonly #buckets: number[];
  #bucketStart = 0;
  #head = 0;

  constructor(windowMs = 10_000) {
    this.#buckets = new Array<number>(Math.max(1, Math.round(windowMs / BUCKET_MS))).fill(0);
  }

  record(now: number): void {
    this.#advance(now);
    this.#buckets[this.#head]!++;
  }

  /** Requests finished per second over the window. */
  perSecond(now: number): number {
    this.#advance(now);
    let n = 0;
    for (const b of this.#buckets) n += b;
    return n / ((this.#buckets.length * BUCKET_MS) / 1000);
  }

  /** Seconds until `ahead` requests have drained at the current rate; `fallbackS` when nothing drains. */
  retryAfterSeconds(now: number, ahead: number, fallbackS: number): number {
    const rate = this.perSecond(now);
    const s = rate > 0 ? Math.ceil(Math.max(1, ahead) / rate) : fallbackS;
    return Math.min(MAX_RETRY_AFTER_S, Math.max(MIN_RETRY_AFTER_S, Math.ceil(s)));
  }

  #advance(now: number): void {
    const slot = Math.floor(now / BUCKET_MS);
    if (this.#bucketStart === 0) this.#bucketStart = slot;
    const steps = Math.min(this.#buckets.length, Math.max(0, slot - this.#bucketStart));
    for (let i = 0; i < steps; i++) {
      this.#head = (this.#head + 1) % this.#buckets.length;
      this.#buckets[this.#head] = 0;
    }
    if (slot > this.#bucketStart) this.#bucketStart = slot;
  }
}
