/**
 * Each worker's effective prefill rate (tokens/s), learned from its own prefills: a request routed
 * to a worker whose counted prefill was empty (or small) starts prefilling at once, so the time from
 * its route to its prefill-done signal, less the parts of it that are not prefill, measures the
 * worker's rate on that request's tokens, under whatever decode batch it was running.
 *
 * Robust by construction: a sample needs enough tokens that the prefill dominates the fixed
 * latencies left in it; each sample's rate is clamped to a sane range; the estimate is the median of
 * the worker's last `window` samples (a request that also waited for KV room or a long decode step
 * is an outlier the median ignores) and counts only from `minSamples` on. O(window) per sample with
 * a constant window, O(1) per read; reset with the worker's life (a new epoch, down, removed).
 */

export interface PrefillRateLearning {
  /** Fewest tokens (uncached + counted ahead) a sample must measure. */
  minTokens: number;
  /** Counted prefill ahead of the request at route time, at most this share of its own tokens. */
  maxAheadShare: number;
  /** Samples the median is taken over (the latest). */
  window: number;
  /** Samples before the learned rate counts. */
  minSamples: number;
  /** Range a sample's rate is clamped to (tokens/s). */
  minRate: number;
  maxRate: number;
}

/**
 * 1 024 tokens take ~28 ms on a calibrated H200 7B worker at its fastest (37k tok/s,
 * services/sglang-sim/timing.ts), against the few ms of unmodelled latency a sample may keep.
 */
export const DEFAULT_PREFILL_RATE_LEARNING: Readonly<PrefillRateLearning> = {
  minTokens: 1024,
  maxAheadShare: 0.125,
  window: 15,
  minSamples: 5,
  minRate: 1_000,
  maxRate: 1_000_000,
};

export class PrefillRateLearner {
  readonly #p: PrefillRateLearning;
  /** Per slot: the last `window` sample rates (a ring), how many were taken, and the median of the kept ones. */
  #ring: (number[] | undefined)[] = [];
  #taken: number[] = [];
  #median: (number | null)[] = [];
  /** Per slot: bumped by reset, so a sample routed to an earlier life is dropped. */
  #life: number[] = [];

  constructor(params: PrefillRateLearning = DEFAULT_PREFILL_RATE_LEARNING) {
    this.#p = params;
  }

  /** Whether a request routed with `tokens` uncached and `countedAhead` of the worker's counted prefill measures its rate. */
  qualifies(tokens: number, countedAhead: number): boolean {
    return countedAhead <= this.#p.maxAheadShare * tokens && tokens + countedAhead >= this.#p.minTokens;
  }

  /** The slot's life: a sample taken in another is dropped. */
  life(slot: number): number {
    return this.#life[slot] ?? 0;
  }

  /** `tokens` prefilled in `ms` on the slot, routed in life `life`. */
  sample(slot: number, life: number, tokens: number, ms: number): void {
    if (life !== this.life(slot) || !(ms > 0) || tokens < this.#p.minTokens) return;
    const rate = Math.min(this.#p.maxRate, Math.max(this.#p.minRate, (tokens / ms) * 1000));
    const ring = (this.#ring[slot] ??= []);
    const taken = this.#taken[slot] ?? 0;
    ring[taken % this.#p.window] = rate;
    this.#taken[slot] = taken + 1;
    this.#median[slot] = taken + 1 >= this.#p.minSamples ? median(ring) : null;
  }

  /** The learned rate (tokens/s); null before `minSamples` samples of the slot's current life. */
  rate(slot: number): number | null {
    return this.#median[slot] ?? null;
  }

  /** A new worker life (or none): its samples and those still on their way are void. */
  reset(slot: number): void {
    this.#life[slot] = this.life(slot) + 1;
    this.#ring[slot] = undefined;
    this.#taken[slot] = 0;
    this.#median[slot] = null;
  }
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}
