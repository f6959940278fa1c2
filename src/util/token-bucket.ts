/**
 * Token-bucket arithmetic (pure): a bucket holds up to `burst` requests and refills at
 * requestsPerMinute / 60 per second. The rate limiter Durable Object keeps one per key.
 */

/** The two numbers a bucket needs (src/config/config.ts BucketConfig has them). */
export interface BucketRate {
  requestsPerMinute: number;
  burst: number;
}

export interface BucketState {
  tokens: number;
  /** Time of the last refill, ms. */
  at: number;
}

export interface TakeResult {
  allowed: boolean;
  /** Whole requests left in the bucket after this one. */
  remaining: number;
  /** Seconds until one request fits again (0 when allowed). */
  retryAfterSeconds: number;
}

/** Refills `state` up to `now` and takes one request if there is one. Mutates and returns the verdict. */
export function takeToken(state: BucketState, cfg: BucketRate, now: number): TakeResult {
  const perMs = cfg.requestsPerMinute / 60_000;
  const elapsed = Math.max(0, now - state.at);
  state.tokens = Math.min(cfg.burst, state.tokens + elapsed * perMs);
  state.at = Math.max(state.at, now);
  if (state.tokens >= 1) {
    state.tokens -= 1;
    return { allowed: true, remaining: Math.floor(state.tokens), retryAfterSeconds: 0 };
  }
  return { allowed: false, remaining: 0, retryAfterSeconds: Math.max(1, Math.ceil((1 - state.tokens) / perMs / 1000)) };
}

export function fullBucket(cfg: BucketRate, now: number): BucketState {
  return { tokens: cfg.burst, at: now };
}

/** When the bucket is full again: from then on its stored state says nothing a fresh one would not. */
export function fullAgainAt(state: BucketState, cfg: BucketRate): number {
  const perMs = cfg.requestsPerMinute / 60_000;
  return state.at + Math.ceil(Math.max(0, cfg.burst - state.tokens) / perMs);
}
