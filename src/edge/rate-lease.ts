/**
 * Token leases: an isolate takes a busy client's requests from its rate-limit bucket a few at a
 * time, so most of them cost no call to the bucket's RateLimiter object. The object deducts a whole
 * lease at once and counts it held until settled or expired (src/util/token-bucket.ts takeLease),
 * so the tokens every isolate holds plus those left in the bucket never exceed `burst`: leases move
 * tokens, they never create them. A client seen once leases one token (one call per request, as without leases); each
 * lease spent before it expires doubles the next, one that expires unspent shrinks the next to what
 * was used, a refusal resets it to one. Unspent tokens go back to the object with this isolate's
 * next call for that bucket (which also settles the lease); those of a lease evicted from this book
 * or of an isolate that vanishes stay held at the object until the lease expires there (at most
 * maxLease tokens for about 3 s: the client is served less, never more).
 */
import { maxLease, RATE_LEASE_TTL_MS, type BucketRate, type LeaseBack, type LeaseResult, type TakeResult } from "../util/token-bucket.ts";

/** Leases one isolate keeps (least recently used first out; an evicted lease's tokens are never spent). */
export const MAX_RATE_LEASES = 1024;
/** Longest bucket name kept in the book (names are `<kind>:key:<digest>` or `<kind>:net:<network>`, under 90 chars); a longer one is taken per request. */
export const MAX_RATE_LEASE_NAME_CHARS = 128;

/** The bucket's object as the lease book calls it (durable-objects/rate-limiter.ts RateLimiter.lease). */
export interface LeaseSource {
  lease(cfg: BucketRate, want: number, back?: LeaseBack): Promise<LeaseResult>;
}

interface Lease {
  requestsPerMinute: number;
  burst: number;
  /** Tokens this isolate holds and may spend until expiresAt. */
  left: number;
  expiresAt: number;
  /** The last grant's size (0 after a refusal): the next lease asks for twice it (spent) or for what was used (expired). */
  size: number;
  /** The last grant's tokens the object still counts as held (0 once the next call settles them). */
  unsettled: number;
  /** The object's level after the last grant, and when (the grant's identity when settling it): with `left`, what the headers report. */
  level: number;
  at: number;
}

export class RateLeases {
  readonly #leases = new Map<string, Lease>();
  constructor(
    readonly capacity = MAX_RATE_LEASES,
    readonly now: () => number = Date.now,
  ) {}

  /** Leases held now (tests see the bound). */
  get size(): number {
    return this.#leases.size;
  }

  /**
   * Takes one request from bucket `name`: from this isolate's lease while it holds an unexpired
   * token, else by one call to `source(name)` that also returns the previous lease's leftover.
   * `remaining` / `resetMs` describe the bucket as if nothing were leased: the object's level
   * refilled to now plus what this isolate holds (other isolates' leases are not seen).
   */
  async take(name: string, cfg: BucketRate, source: (name: string) => LeaseSource): Promise<TakeResult> {
    const t = this.now();
    let held = this.#leases.get(name);
    if (held && (held.requestsPerMinute !== cfg.requestsPerMinute || held.burst !== cfg.burst)) {
      this.#leases.delete(name); // granted under another config: forfeit, never spent under this one
      held = undefined;
    }
    if (held && held.left >= 1 && t < held.expiresAt) {
      held.left -= 1;
      this.#touch(name, held);
      return view(held, cfg, t);
    }
    let want = 1;
    let back: LeaseBack | undefined;
    if (held) {
      want = held.left >= 1 ? Math.max(1, held.size - held.left) : Math.max(1, Math.min(maxLease(cfg), held.size * 2));
      if (held.unsettled > 0) back = { returned: held.left, settled: held.unsettled, at: held.at };
      // The call carries them back: a concurrent request must not return or settle them too.
      held.left = 0;
      held.unsettled = 0;
    }
    const r = await source(name).lease(cfg, want, back);
    const cur = this.#leases.get(name);
    const lease = cur && cur.requestsPerMinute === cfg.requestsPerMinute && cur.burst === cfg.burst ? cur : undefined;
    if (!r.allowed) {
      if (lease) lease.size = 0; // the next call asks for one token
      return r;
    }
    if (name.length > MAX_RATE_LEASE_NAME_CHARS) return r;
    // Concurrent misses may each bring a grant: what is held never exceeds one lease (the excess is forfeit).
    const next: Lease = lease ?? { requestsPerMinute: cfg.requestsPerMinute, burst: cfg.burst, left: 0, expiresAt: 0, size: 1, unsettled: 0, level: 0, at: 0 };
    next.left = Math.min(maxLease(cfg), next.left + r.granted - 1);
    next.size = r.granted;
    next.unsettled = r.granted - 1; // what the object counts held; a concurrent grant's earlier one stays held there until it expires
    // Counted from before the call: the object counts the lease held for longer (LEASE_CLOCK_SLACK_MS).
    next.expiresAt = t + RATE_LEASE_TTL_MS;
    next.level = r.level;
    next.at = r.at;
    this.#touch(name, next);
    return view(next, cfg, this.now());
  }

  #touch(name: string, lease: Lease): void {
    this.#leases.delete(name);
    if (this.#leases.size >= this.capacity) this.#leases.delete(this.#leases.keys().next().value!);
    this.#leases.set(name, lease);
  }
}

/** An allowed take's headers under a lease: the bucket's level as if unleased (object level refilled, plus this isolate's tokens). */
function view(lease: Lease, cfg: BucketRate, t: number): TakeResult {
  const perMs = cfg.requestsPerMinute / 60_000;
  const level = Math.min(cfg.burst, lease.level + Math.max(0, t - lease.at) * perMs + lease.left);
  return { allowed: true, remaining: Math.floor(level), retryAfterSeconds: 0, resetMs: Math.ceil((cfg.burst - level) / perMs) };
}
