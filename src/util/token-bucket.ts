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
  /** Leases outstanding (takeLease): granted in lease window `leaseWindow` and the one before. */
  leaseWindow?: number;
  leased?: [number, number];
  /** The config (requestsPerMinute, burst) those counts were made under, and their generation (one per config change). */
  leaseRate?: [number, number];
  leaseEpoch?: number;
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
  refill(state, cfg, now);
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

/**
 * When the bucket is full again: from then on its stored state says nothing a fresh one would not
 * (not before its outstanding leases have expired: a fresh bucket would not count them).
 */
export function fullAgainAt(state: BucketState, cfg: BucketRate): number {
  const perMs = cfg.requestsPerMinute / 60_000;
  const refilled = state.at + Math.ceil(Math.max(0, cfg.burst - state.tokens) / perMs);
  return heldByLeases(state) > 0 ? Math.max(refilled, (state.leaseWindow! + 2) * LEASE_WINDOW_MS) : refilled;
}

/**
 * Leases (src/edge/rate-lease.ts): an isolate takes several requests at once and spends them
 * locally for RATE_LEASE_TTL_MS. The bucket deducts a lease when it grants it and counts it (less
 * the calling request's own token) as held until it is settled (the isolate's next call says it is spent or returns what is left) or
 * has expired: the bucket refills only up to `burst` less what leases hold, so tokens in the
 * bucket plus tokens held by every isolate never exceed `burst` -- leases move tokens, they never
 * add any. Held leases are summed per LEASE_WINDOW_MS window, the current one and the one before
 * (a lease granted in window w has expired by the end of w + 1), so the state stays two numbers.
 *
 * A lease's size: never more than LEASE_LEVEL_SHARE of what the bucket holds, so isolates asking in
 * turn each still find tokens while it has any (one token is always grantable), and never more than
 * burst / LEASE_BURST_DIVISOR, so one isolate holds (and, should it vanish, keeps from the bucket
 * until the lease expires) at most an eighth of the burst: 15 requests at the default burst 120.
 * Under a burst of 16 every lease is one token (the take without leases).
 */
export const LEASE_LEVEL_SHARE = 0.25;
export const LEASE_BURST_DIVISOR = 8;
/** A lease's lifetime in the isolate, counted from before its call: tokens unspent by then go back with the isolate's next call for the bucket. */
export const RATE_LEASE_TTL_MS = 2_000;
/** Margin for the isolate's and the object's clocks: the bucket counts a lease held this much longer than the isolate may spend it. */
export const LEASE_CLOCK_SLACK_MS = 1_000;
const LEASE_WINDOW_MS = RATE_LEASE_TTL_MS + LEASE_CLOCK_SLACK_MS;

export interface LeaseResult extends TakeResult {
  /** Tokens deducted for the caller (0 when refused): the request's own one plus what it may spend locally. */
  granted: number;
  /** The bucket's exact level after the grant (leased tokens are gone from it), and when (the object's clock; with `epoch`, the lease's identity for settling it). */
  level: number;
  at: number;
  /** The most the bucket refills to while the leases it counts now are held (burst less them): what a header may report of it. */
  room: number;
  /** The generation of the counts the grant joined (a config change starts a new one). */
  epoch: number;
}

/** What the caller's previous lease came to: `returned` unspent tokens of the `settled` tokens it held from the lease granted at `at` in `epoch`. */
export interface LeaseBack {
  returned: number;
  settled: number;
  at: number;
  epoch: number;
}

/** The most tokens one lease (or one isolate's unspent leftover) may hold under `cfg`. */
export function maxLease(cfg: BucketRate): number {
  return Math.max(1, Math.floor(cfg.burst / LEASE_BURST_DIVISOR));
}

/** The largest lease a bucket holding `level` tokens may give: at least one token when it has one. */
export function leaseCap(level: number, cfg: BucketRate): number {
  if (level < 1) return 0;
  return Math.max(1, Math.min(Math.floor(level * LEASE_LEVEL_SHARE), maxLease(cfg)));
}

function heldByLeases(state: BucketState): number {
  return state.leased ? state.leased[0] + state.leased[1] : 0;
}

/**
 * Moves the held sums on to `now`'s window (leases of two windows ago have expired) and forgets
 * them when `cfg` is not the config they were counted under. Counts are tokens of one config:
 * under a smaller burst, another config's leases could hold more than the whole bucket and refuse
 * every take until they expired. Those leases are bounded by their own config (each isolate holds
 * at most one, for RATE_LEASE_TTL_MS), the bucket's level carries over (capped by the new burst), and
 * a settlement of a forgotten lease is ignored (takeLease: its epoch is gone). So while isolates
 * under two configs call one bucket (a rolling deploy), each call is judged under its own config and
 * the client may also spend the leases granted under the other in the last RATE_LEASE_TTL_MS.
 */
function rollLeases(state: BucketState, cfg: BucketRate, now: number): [number, number] {
  const w = Math.floor(now / LEASE_WINDOW_MS);
  const leased = (state.leased ??= [0, 0]);
  const from = state.leaseWindow ?? w;
  if (w > from) {
    leased[1] = w - from === 1 ? leased[0] : 0;
    leased[0] = 0;
  }
  state.leaseWindow = Math.max(from, w);
  const rate = state.leaseRate;
  if (!rate || rate[0] !== cfg.requestsPerMinute || rate[1] !== cfg.burst) {
    leased[0] = leased[1] = 0;
    state.leaseRate = [cfg.requestsPerMinute, cfg.burst];
    state.leaseEpoch = (state.leaseEpoch ?? 0) + 1;
  }
  return leased;
}

/**
 * Refills `state` to `now` at `cfg`'s rate, up to `burst` less what leases of this config held at
 * each moment (a bucket that never leased skips the counts). Returns the cap now (never below zero).
 */
function refill(state: BucketState, cfg: BucketRate, now: number): number {
  // Window by window first: a count that expired since the last call held the bucket down until its
  // window ended, so the time before that refills under its cap, not under the whole burst.
  const rate = state.leaseRate;
  if (state.leased && state.leaseWindow !== undefined && rate && rate[0] === cfg.requestsPerMinute && rate[1] === cfg.burst) {
    for (let end = (state.leaseWindow + 1) * LEASE_WINDOW_MS; end <= now && heldByLeases(state) > 0; end += LEASE_WINDOW_MS) {
      const held = Math.max(0, cfg.burst - heldByLeases(state));
      state.tokens = Math.min(held, state.tokens + Math.max(0, end - state.at) * (cfg.requestsPerMinute / 60_000));
      state.at = Math.max(state.at, end);
      rollLeases(state, cfg, end);
    }
  }
  if (state.leased) rollLeases(state, cfg, now);
  const cap = Math.max(0, cfg.burst - heldByLeases(state));
  state.tokens = Math.min(cap, state.tokens + Math.max(0, now - state.at) * (cfg.requestsPerMinute / 60_000));
  state.at = Math.max(state.at, now);
  return cap;
}

/**
 * Refills to now up to `burst` less what leases hold, settles the caller's previous lease (`back`:
 * no longer held; its unspent tokens back in the bucket, never above the cap nor more than the
 * settlement released -- nothing once the object has stopped counting that lease), then deducts a lease of up to `want` tokens within leaseCap. Refused
 * (granted 0) only when not one token is there, with the wait until one is.
 */
export function takeLease(state: BucketState, cfg: BucketRate, now: number, want: number, back?: LeaseBack): LeaseResult {
  const perMs = cfg.requestsPerMinute / 60_000;
  // Refilled before the counts move on and before the settlement: until now the leases were held, and
  // the bucket filled only up to burst less them (refill steps over the windows that expired meanwhile).
  refill(state, cfg, now);
  const leased = rollLeases(state, cfg, now);
  // A lease of forgotten counts (another config's) is neither settled nor returned: its count is gone already.
  // Only while the object still counts the lease held (its window or the next) is there anything to
  // settle or take back: once the count has expired the bucket has refilled over those tokens, and
  // crediting a late leftover would create them a second time.
  let released = 0;
  if (back !== undefined && back.epoch === state.leaseEpoch && back.settled > 0) {
    const slot = state.leaseWindow! - Math.floor(back.at / LEASE_WINDOW_MS);
    if (slot === 0 || slot === 1) {
      released = Math.min(leased[slot], Math.floor(back.settled));
      leased[slot] -= released;
    }
  }
  const cap = Math.max(0, cfg.burst - heldByLeases(state));
  // A return is part of what was just released, never more (a caller's bug cannot mint tokens past it).
  const credit = back === undefined ? 0 : Math.min(Math.max(0, Math.floor(back.returned)), released);
  if (credit > 0) state.tokens = Math.min(cap, state.tokens + credit);
  const size = Math.min(Number.isFinite(want) ? Math.max(1, Math.floor(want)) : 1, leaseCap(state.tokens, cfg));
  if (size >= 1) {
    state.tokens -= size;
    leased[0] += size - 1; // the caller's own request is spent now: only the rest is held (a one-token lease is a plain take)
  }
  const remaining = Math.max(0, Math.floor(state.tokens));
  const resetMs = fullAgainAt(state, cfg) - state.at;
  const epoch = state.leaseEpoch!;
  const room = Math.max(0, cfg.burst - heldByLeases(state));
  if (size >= 1) return { allowed: true, granted: size, remaining, retryAfterSeconds: 0, resetMs, level: state.tokens, at: state.at, room, epoch };
  // Short of one token: it refills in (1 - tokens) / rate, unless leases hold so much that the cap is under one -- then not before the older window's leases expire.
  const freeAt = (cfg.burst - leased[0] >= 1 ? state.leaseWindow! + 1 : state.leaseWindow! + 2) * LEASE_WINDOW_MS;
  const until = cap >= 1 ? (1 - state.tokens) / perMs : freeAt - now + 1 / perMs;
  return { allowed: false, granted: 0, remaining, retryAfterSeconds: Math.max(1, Math.ceil(until / 1000)), resetMs, level: state.tokens, at: state.at, room, epoch };
}
