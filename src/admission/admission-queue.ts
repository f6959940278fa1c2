/**
 * The bounded queue of requests waiting for a pool's capacity, and the order they leave it in:
 *  1. band, aged: every `agingMs` of waiting moves a request one band up, without floor, so a lower
 *     band is never starved for ever and an old request of a band goes before newer ones of it;
 *  2. tenant: within the best aged band, the tenant with the least in-flight cost
 *     (tenant-ledger.ts) goes first (ties: the tenant whose request waited longest);
 *  3. overlap: among that tenant's requests, the one with the most cached blocks on the worker
 *     that has room; ties go to the oldest.
 * A full queue takes a newcomer only by evicting the newest request of a band below it.
 */
export interface QueuedEntry<T> {
  ticket: string;
  band: number;
  tenant: string;
  /** Predicted cost in tokens: uncached prefill plus decode budget. */
  cost: number;
  enqueuedAt: number;
  /** When the request stops waiting and is refused (ms). */
  deadline: number;
  payload: T;
}

export type EnqueueOutcome<T> = { ok: true; evicted: QueuedEntry<T> | null } | { ok: false };

export class AdmissionQueue<T> {
  /** In arrival order (Map keeps insertion order). */
  readonly #entries = new Map<string, QueuedEntry<T>>();
  readonly #maxSize: number;
  readonly #agingMs: number;

  constructor(maxSize: number, agingMs: number) {
    this.#maxSize = maxSize;
    this.#agingMs = agingMs;
  }

  get size(): number {
    return this.#entries.size;
  }

  has(ticket: string): boolean {
    return this.#entries.has(ticket);
  }

  entries(): IterableIterator<QueuedEntry<T>> {
    return this.#entries.values();
  }

  /** The band a request competes in after waiting until `now`. */
  agedBand(e: Pick<QueuedEntry<T>, "band" | "enqueuedAt">, now: number): number {
    return e.band - Math.floor(Math.max(0, now - e.enqueuedAt) / this.#agingMs);
  }

  add(e: QueuedEntry<T>): EnqueueOutcome<T> {
    if (this.#entries.has(e.ticket)) return { ok: false };
    let evicted: QueuedEntry<T> | null = null;
    if (this.#entries.size >= this.#maxSize) {
      // The newest request of the lowest band, if that band is below the newcomer's.
      for (const q of this.#entries.values()) if (q.band > e.band && (evicted === null || q.band >= evicted.band)) evicted = q;
      if (evicted === null) return { ok: false };
      this.#entries.delete(evicted.ticket);
    }
    this.#entries.set(e.ticket, e);
    return { ok: true, evicted };
  }

  remove(ticket: string): QueuedEntry<T> | undefined {
    const e = this.#entries.get(ticket);
    if (e) this.#entries.delete(ticket);
    return e;
  }

  /** Removes and returns the requests whose deadline has passed. */
  takeExpired(now: number): QueuedEntry<T>[] {
    const out: QueuedEntry<T>[] = [];
    for (const e of this.#entries.values()) if (e.deadline <= now) out.push(e);
    for (const e of out) this.#entries.delete(e.ticket);
    return out;
  }

  earliestDeadline(): number | null {
    let min: number | null = null;
    for (const e of this.#entries.values()) if (min === null || e.deadline < min) min = e.deadline;
    return min;
  }

  /** How many requests wait in each band (as asked, not aged). */
  depthByBand(bands: number): number[] {
    const out = new Array<number>(bands).fill(0);
    for (const e of this.#entries.values()) if (e.band >= 0 && e.band < bands) out[e.band]!++;
    return out;
  }

  /** How many requests each tenant has waiting. */
  depthByTenant(): Map<string, number> {
    const out = new Map<string, number>();
    for (const e of this.#entries.values()) out.set(e.tenant, (out.get(e.tenant) ?? 0) + 1);
    return out;
  }

  /**
   * Removes and returns the request that goes next (the order above). `usage` is a tenant's
   * in-flight cost; `overlap` the request's cached blocks on the worker that has room, asked only
   * of the chosen tenant's requests in the chosen band.
   */
  takeNext(now: number, usage: (tenant: string) => number, overlap: (e: QueuedEntry<T>) => number): QueuedEntry<T> | undefined {
    let best = Infinity;
    for (const e of this.#entries.values()) best = Math.min(best, this.agedBand(e, now));
    if (best === Infinity) return undefined;
    // Tenants of the best band, in order of their oldest request there (arrival order).
    let tenant: string | null = null;
    let tenantUsage = Infinity;
    for (const e of this.#entries.values()) {
      if (this.agedBand(e, now) !== best || e.tenant === tenant) continue;
      const u = usage(e.tenant);
      if (u < tenantUsage) [tenant, tenantUsage] = [e.tenant, u];
    }
    let pick: QueuedEntry<T> | undefined;
    let pickOverlap = -1;
    for (const e of this.#entries.values()) {
      if (e.tenant !== tenant || this.agedBand(e, now) !== best) continue;
      const o = overlap(e);
      if (o > pickOverlap) [pick, pickOverlap] = [e, o];
    }
    if (pick) this.#entries.delete(pick.ticket);
    return pick;
  }
}
