/**
 * Token-bucket arithmetic (pure): a bucket holds up to `burst` units (requests, or prompt/output
 * tokens for token quotas) and refills at requestsPerMinute / 60 per second. The rate limiter
 * Durable Object keeps one per key.
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
  /** Milliseconds until the bucket is full again (OpenAI's x-ratelimit-reset-*). */
  resetMs: number;
}

/**
 * Refills `state` up to `now` and takes `amount` units (default one request) if they are there.
 * An amount above `burst` needs a full bucket and empties it (a prompt larger than a minute's token
 * quota is served once the bucket is full, not refused for ever). Mutates and returns the verdict.
 */
export function takeToken(state: BucketState, cfg: BucketRate, now: number, amount = 1): TakeResult {
  const perMs = cfg.requestsPerMinute / 60_000;
  const elapsed = Math.max(0, now - state.at);
  state.tokens = Math.min(cfg.burst, state.tokens + elapsed * perMs);
  state.at = Math.max(state.at, now);
  const need = Math.min(Math.max(0, amount), cfg.burst);
  if (state.tokens >= need) {
    state.tokens -= need;
    return { allowed: true, remaining: Math.floor(state.tokens), retryAfterSeconds: 0, resetMs: fullAgainAt(state, cfg) - state.at };
  }
  const retryAfterSeconds = Math.max(1, Math.ceil((need - state.tokens) / perMs / 1000));
  return { allowed: false, remaining: Math.floor(state.tokens), retryAfterSeconds, resetMs: fullAgainAt(state, cfg) - state.at };
}

export function fullBucket(cfg: BucketRate, now: number): BucketState {
  return { tokens: cfg.burst, at: now };
}

/** When the bucket is full again: from then on its stored state says nothing a fresh one would not. */
export function fullAgainAt(state: BucketState, cfg: BucketRate): number {
  const perMs = cfg.requestsPerMinute / 60_000;
  return state.at + Math.ceil(Math.max(0, cfg.burst - state.tokens) / perMs);
}
