/**
 * Admission to one pool (one routing-index object): a request is routed at once while some worker
 * is under its load bound and nobody is waiting; otherwise it waits in the pool's bounded queue
 * (admission-queue.ts) as one pending promise, with no polling, until a worker has room, and is
 * refused (429 with a Retry-After from the drain rate, drain-rate.ts) past the queue bound or its
 * deadline. A worker that frees capacity (a settle, a finished prefill) takes the request the
 * queue's order gives it, routed to that worker. Runtime-free: the pool and the timer are injected.
 */
import { AdmissionQueue, type QueuedEntry } from "./admission-queue.ts";
import { BAND_COUNT, BAND_NAMES, bandWaitMs, type BandWaits } from "./bands.ts";
import { MAX_TENANTS_SHOWN, type AdmissionSnapshot } from "../metrics/admission-snapshot.ts";
import { DrainRate } from "./drain-rate.ts";
import { TenantLedger } from "./tenant-ledger.ts";
import { AdmissionStats, type RefusalReason } from "./admission-stats.ts";

export type { RefusalReason } from "./admission-stats.ts";

/** The pool's admission settings (src/config/config.ts AdmissionConfigSchema gives them and their defaults). */
export interface AdmissionLimits {
  /** Off: every request is routed at once, whatever the load. */
  enabled: boolean;
  /** Requests waiting at most; past it the newcomer (or a lower band's newest) gets 429. */
  maxQueue: number;
  /** Longest a request waits before it gets 429: for every band, or per band. */
  maxWaitMs: BandWaits;
  /** Every this long of waiting moves a request one band up. */
  agingMs: number;
}

/** What the edge sends with a request's first pick (its retries are routed at once). */
export interface AdmissionTicket {
  /** Unique per request (the edge's request id): the handle to leave the queue by. */
  ticket: string;
  band: number;
  /** The client's label (src/edge/client-label.ts), "anonymous" when the edge cannot tell clients apart. */
  tenant: string;
  /** Output tokens the request may produce (its max_tokens, or the edge's cap). */
  decodeBudget: number;
  /** The longest this request may wait (ms), below the pool's maxWaitMs for its band. */
  maxWaitMs?: number;
}

export type AdmitOutcome<D> =
  /**
   * `waited`: it was queued before it was routed (however short the wait: workerd's clock reads
   * the same ms through an event, so a time difference cannot tell). `crowded`: after its pick requests wait or no worker
   * is under its load bound, so the next request queues: the room its settlement frees is wanted
   * now (the edge sends it at once, src/edge/chat/settle.ts).
   */
  | { kind: "routed"; decision: D; waited: boolean; crowded: boolean }
  /** No worker is up (the edge answers 503, as without admission). */
  | { kind: "none" }
  | { kind: "refused"; reason: RefusalReason; retryAfterSeconds: number }
  /** The client left the queue (leave()). */
  | { kind: "left" };

/** The pool as admission sees it (RoutingCore supplies it). */
export interface AdmissionPool<R, D> {
  /** Routable workers now (up, not quarantined) and whether each is at its load bound. */
  room(): { workerId: string; full: boolean }[];
  /** Routes the request, to one of `onlyWorkers` when given; null when none can take it. */
  route(req: R, onlyWorkers: readonly string[] | null): D | null;
  /** The request's cached blocks on a worker. */
  overlapOn(req: R, workerId: string): number;
  /** The request's predicted uncached prefill tokens on its best worker (a preview: asked only of requests that wait). */
  uncachedTokens(req: R): number;
  /** Its uncached prefill tokens on the worker a decision chose. */
  uncachedTokensOf(req: R, d: D): number;
  receiptOf(d: D): string;
}

export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

interface Waiting<R, D> {
  req: R;
  resolve: (o: AdmitOutcome<D>) => void;
}

/** Tickets admitted lately, kept so a client that left after its admission can still be settled. */
const RECENT_ADMITTED = 4096;

export class AdmissionGate<R, D> {
  readonly #cfg: AdmissionLimits;
  readonly #pool: AdmissionPool<R, D>;
  readonly #now: () => number;
  readonly #timers: Timers;
  readonly #queue: AdmissionQueue<Waiting<R, D>>;
  readonly #ledger = new TenantLedger();
  readonly #drain = new DrainRate();
  readonly #recentAdmitted = new Map<string, string>();
  readonly #stats = new AdmissionStats(BAND_NAMES);
  #timer: unknown = null;
  #timerAt: number | null = null;

  constructor(cfg: AdmissionLimits, pool: AdmissionPool<R, D>, now: () => number, timers: Timers) {
    this.#cfg = cfg;
    this.#pool = pool;
    this.#now = now;
    this.#timers = timers;
    this.#queue = new AdmissionQueue(cfg.maxQueue, cfg.agingMs);
  }

  get queued(): number {
    return this.#queue.size;
  }

  /** What waits now (per band, and for the tenants with most waiting) and the counters since start. */
  snapshot(): AdmissionSnapshot {
    const tenants = [...this.#queue.depthByTenant()].sort((a, b) => b[1] - a[1]).slice(0, MAX_TENANTS_SHOWN);
    return { bands: this.#stats.snapshot(this.#queue.depthByBand(BAND_COUNT)), queuedByTenant: Object.fromEntries(tenants) };
  }

  admit(req: R, t: AdmissionTicket): Promise<AdmitOutcome<D>> | AdmitOutcome<D> {
    const now = this.#now();
    const band = Math.min(BAND_COUNT - 1, Math.max(0, Math.trunc(t.band)));
    const rooms = this.#pool.room();
    if (rooms.length === 0) return { kind: "none" };
    const roomy = rooms.filter((w) => !w.full).map((w) => w.workerId);
    if (!this.#cfg.enabled || (this.#queue.size === 0 && roomy.length > 0)) {
      // Under the bound: today's routing, among the workers with room when some are full (and
      // among all if none of those can take this request).
      const all = !this.#cfg.enabled || roomy.length === rooms.length;
      const d = this.#pool.route(req, all ? null : roomy) ?? (all ? null : this.#pool.route(req, null));
      if (d === null) return { kind: "none" };
      this.#admitted(t, d, this.#pool.uncachedTokensOf(req, d) + Math.max(0, t.decodeBudget), band, 0, false);
      return { kind: "routed", decision: d, waited: false, crowded: this.#cfg.enabled && !this.#hasRoom() };
    }
    const cost = this.#pool.uncachedTokens(req) + Math.max(0, t.decodeBudget);
    const wait = Math.min(bandWaitMs(this.#cfg.maxWaitMs, band), t.maxWaitMs ?? Infinity);
    if (wait <= 0) return this.#refuse(band, "queue_full", now);
    return new Promise<AdmitOutcome<D>>((resolve) => {
      const added = this.#queue.add({ ticket: t.ticket, band, tenant: t.tenant, cost, enqueuedAt: now, deadline: now + wait, payload: { req, resolve } });
      if (!added.ok) {
        resolve(this.#refuse(band, "queue_full", now));
        return;
      }
      this.#stats.queued(band);
      if (added.evicted) added.evicted.payload.resolve(this.#refuse(added.evicted.band, "evicted", now));
      this.pump(null);
    });
  }

  /**
   * The client left. A waiting request leaves the queue without a trace; one admitted lately returns
   * its receipt, for the caller to settle as cancelled. null when the ticket is unknown.
   */
  leave(ticket: string): { left: "queue" } | { left: "admitted"; receiptId: string } | null {
    const e = this.#queue.remove(ticket);
    if (e) {
      e.payload.resolve({ kind: "left" });
      this.#stats.left(e.band);
      this.#armTimer();
      return { left: "queue" };
    }
    const receiptId = this.#recentAdmitted.get(ticket);
    if (receiptId === undefined) return null;
    this.#recentAdmitted.delete(ticket);
    return { left: "admitted", receiptId };
  }

  /**
   * A request's settlement arrived: its tenant's charge ends, its worker has room. `finished`: the
   * index still held the request (not a settlement sent again), so the drain rate counts it once.
   */
  settled(receiptId: string, workerId: string | null, finished: boolean): void {
    this.#ledger.release(receiptId);
    if (finished) this.#drain.record(this.#now());
    this.pump(workerId);
  }

  /** Routes waiting requests while workers have room; `freed` (a worker that just freed capacity) first. */
  pump(freed: string | null): void {
    const now = this.#now();
    for (const e of this.#queue.takeExpired(now)) e.payload.resolve(this.#refuse(e.band, "deadline", now));
    while (this.#queue.size > 0) {
      const roomy = this.#pool
        .room()
        .filter((w) => !w.full)
        .map((w) => w.workerId);
      if (roomy.length === 0) break;
      const worker = freed !== null && roomy.includes(freed) ? freed : roomy[0]!;
      const e = this.#queue.takeNext(
        now,
        (tenant) => this.#ledger.usage(tenant),
        (q) => this.#pool.overlapOn(q.payload.req, worker),
      )!;
      const d = this.#pool.route(e.payload.req, [worker]) ?? this.#pool.route(e.payload.req, roomy);
      if (d === null) {
        e.payload.resolve({ kind: "none" });
        continue;
      }
      this.#admitted(e, d, e.cost, e.band, now - e.enqueuedAt, true);
      e.payload.resolve({ kind: "routed", decision: d, waited: true, crowded: this.#queue.size > 0 || !this.#hasRoom() });
    }
    this.#armTimer();
  }

  /** Some routable worker is under its load bound. */
  #hasRoom(): boolean {
    return this.#pool.room().some((w) => !w.full);
  }

  #admitted(t: Pick<AdmissionTicket, "ticket" | "tenant">, d: D, cost: number, band: number, waitedMs: number, waited: boolean): void {
    const receiptId = this.#pool.receiptOf(d);
    this.#ledger.charge(receiptId, t.tenant, cost);
    this.#recentAdmitted.set(t.ticket, receiptId);
    if (this.#recentAdmitted.size > RECENT_ADMITTED) this.#recentAdmitted.delete(this.#recentAdmitted.keys().next().value!);
    this.#stats.admitted(band, waited, waitedMs);
  }

  #refuse(band: number, reason: RefusalReason, now: number): AdmitOutcome<D> {
    this.#stats.refused(band, reason);
    const retryAfterSeconds = this.#drain.retryAfterSeconds(now, this.#queue.size, Math.ceil(bandWaitMs(this.#cfg.maxWaitMs, band) / 1000));
    return { kind: "refused", reason, retryAfterSeconds };
  }

  /** One timer, at the earliest deadline of the queue. */
  #armTimer(): void {
    const at = this.#queue.earliestDeadline();
    if (at === this.#timerAt) return;
    if (this.#timer !== null) this.#timers.clear(this.#timer);
    this.#timer = null;
    this.#timerAt = at;
    if (at === null) return;
    this.#timer = this.#timers.set(() => {
      this.#timer = null;
      this.#timerAt = null;
      this.pump(null);
    }, Math.max(0, at - this.#now()));
  }
}
