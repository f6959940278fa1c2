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
 * maxLease tokens, 3 to 6 s after the grant: the client is served less, never more). A lease is
 * spent only under the config it was granted under; a take under another settles it first, and the
 * object forgets counts made under another config than the call's (token-bucket.ts rollLeases).
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
  /** The config the lease was granted under: a take under another settles it and starts afresh. */
  requestsPerMinute: number;
  burst: number;
  /** Tokens this isolate holds and may spend until expiresAt. */
  left: number;
  expiresAt: number;
  /** The last grant's size (0 after a refusal): the next lease asks for twice it (spent) or for what was used (expired). */
  size: number;
  /** The last grant's tokens the object still counts as held (0 once the next call settles them). */
  unsettled: number;
  /** The last grant's identity at the object (its time there and count generation), for settling it. */
  at: number;
  epoch: number;
  /** The object's level after the last grant, the most it refills to while that grant's leases are held, and when this isolate saw it (its own clock): with `left`, what the headers report. */
  level: number;
  room: number;
  seenAt: number;
  /** A call for this bucket is out: other requests meanwhile take one token each and leave the record to it. */
  pending: boolean;
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
   * token, else by one call to `source(name)` that also settles the previous lease (returning its
   * leftover). `remaining` / `resetMs` describe the bucket as if nothing were leased: the object's
   * level refilled to now plus what this isolate holds (other isolates' leases are not seen).
   */
  async take(name: string, cfg: BucketRate, source: (name: string) => LeaseSource): Promise<TakeResult> {
    if (name.length > MAX_RATE_LEASE_NAME_CHARS) return source(name).lease(cfg, 1);
    const t = this.now();
    const held = this.#leases.get(name);
    const same = held !== undefined && held.requestsPerMinute === cfg.requestsPerMinute && held.burst === cfg.burst;
    if (same && held.left >= 1 && t < held.expiresAt) {
      held.left -= 1;
      this.#touch(name, held);
      return view(held, cfg, t);
    }
    // Concurrent misses: one call leases, the others take one token each (a one-token grant holds
    // nothing), so no grant is made only to be forfeit and no settlement is sent twice.
    if (held?.pending) return source(name).lease(cfg, 1);
    let want = 1;
    let back: LeaseBack | undefined;
    if (held) {
      if (same) want = held.left >= 1 ? Math.max(1, held.size - held.left) : Math.max(1, Math.min(maxLease(cfg), held.size * 2));
      // Settled even under another config: the object ignores it if it has forgotten those counts since.
      if (held.unsettled > 0) back = { returned: held.left, settled: held.unsettled, at: held.at, epoch: held.epoch };
    }
    const lease: Lease = same ? held : { requestsPerMinute: cfg.requestsPerMinute, burst: cfg.burst, left: 0, expiresAt: 0, size: 1, unsettled: 0, at: 0, epoch: 0, level: 0, room: 0, seenAt: 0, pending: false };
    lease.left = 0;
    lease.unsettled = 0;
    lease.pending = true;
    this.#touch(name, lease);
    let r: LeaseResult;
    try {
      r = await source(name).lease(cfg, want, back);
    } finally {
      lease.pending = false;
    }
    if (!r.allowed) {
      lease.size = 0; // the next call asks for one token
      return r;
    }
    lease.left = r.granted - 1;
    lease.size = r.granted;
    lease.unsettled = r.granted - 1; // what the object counts held
    // Counted from before the call: the object counts the lease held for longer (LEASE_CLOCK_SLACK_MS).
    lease.expiresAt = t + RATE_LEASE_TTL_MS;
    lease.at = r.at;
    lease.epoch = r.epoch;
    lease.level = r.level;
    lease.room = r.room;
    lease.seenAt = this.now();
    // Evicted during the call: kept again (its grant is this record's); replaced (a take under another config): left to that one.
    if (!this.#leases.has(name)) this.#touch(name, lease);
    return view(lease, cfg, lease.seenAt);
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
  // Refilled by this isolate's clock since it saw the level (the object's clock may differ from it), but
  // only up to what the object refills to while leases are held: other isolates' held tokens may be spent.
  const level = Math.min(cfg.burst, Math.min(lease.room, lease.level + Math.max(0, t - lease.seenAt) * perMs) + lease.left);
  return { allowed: true, remaining: Math.floor(level), retryAfterSeconds: 0, resetMs: Math.ceil((cfg.burst - level) / perMs) };
}
