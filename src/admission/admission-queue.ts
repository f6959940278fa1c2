/**
 * The bounded queue of requests waiting for a pool's capacity, and the order they leave it in:
 *  1. band, aged: every `agingMs` of waiting moves a request one band up, without floor, so a lower
 *     band is never starved for ever and an old request of a band goes before newer ones of it;
 *  2. tenant: within the best aged band, the tenant with the least in-flight cost
 *     (tenant-ledger.ts) goes first (ties: the tenant whose request waited longest);
 *  3. overlap: among that tenant's requests in that aged band, the one with the most cached blocks
 *     on the worker that has room; ties go to the oldest. Only the tenant's `overlapScan` oldest
 *     requests of that band are asked (each ask is a lookup per prompt block).
 * A full queue takes a newcomer only by evicting the newest request of a band below it.
 *
 * Indexed so a pick never scans the queue: each band keeps its requests in arrival order, and per
 * tenant too. Arrival order is age order (stamps are kept non-decreasing), so a band's oldest
 * request has its best aged band, and the requests of a band (or of a band and tenant) in a given
 * aged band are a prefix of its list. A pick costs O(bands × waiting tenants + overlapScan); a
 * deadline is kept in a heap (O(log n) to add, remove or expire).
 */
import { ArrivalList, type ArrivalNode } from "./arrival-list.ts";
import { DeadlineHeap } from "./deadline-heap.ts";

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

/** The overlap step's reach: a tenant's oldest requests of the chosen aged band asked for overlap. */
export const DEFAULT_OVERLAP_SCAN = 64;

interface Slot<T> {
  readonly entry: QueuedEntry<T>;
  readonly seq: number;
  readonly deadline: number;
  heapAt: number;
  bandNode: ArrivalNode<Slot<T>> | null;
  tenantNode: ArrivalNode<Slot<T>> | null;
}

interface BandLists<T> {
  readonly all: ArrivalList<Slot<T>>;
  readonly byTenant: Map<string, ArrivalList<Slot<T>>>;
}

export class AdmissionQueue<T> {
  readonly #slots = new Map<string, Slot<T>>();
  /** Band number → its lists; bands are few (bands.ts). */
  readonly #bands = new Map<number, BandLists<T>>();
  readonly #deadlines = new DeadlineHeap<Slot<T>>();
  readonly #tenantDepth = new Map<string, number>();
  readonly #maxSize: number;
  readonly #agingMs: number;
  readonly #overlapScan: number;
  #seq = 0;
  #lastStamp = -Infinity;

  constructor(maxSize: number, agingMs: number, overlapScan = DEFAULT_OVERLAP_SCAN) {
    this.#maxSize = maxSize;
    this.#agingMs = agingMs;
    this.#overlapScan = Math.max(1, overlapScan);
  }

  get size(): number {
    return this.#slots.size;
  }

  /** The band a request competes in after waiting until `now`. */
  agedBand(e: Pick<QueuedEntry<T>, "band" | "enqueuedAt">, now: number): number {
    return e.band - Math.floor(Math.max(0, now - e.enqueuedAt) / this.#agingMs);
  }

  /**
   * Queues a request. Its `enqueuedAt` is raised to the previous request's when the clock stepped
   * back, so arrival order stays age order.
   */
  add(e: QueuedEntry<T>): EnqueueOutcome<T> {
    if (this.#slots.has(e.ticket)) return { ok: false };
    let evicted: QueuedEntry<T> | null = null;
    if (this.#slots.size >= this.#maxSize) {
      // The newest request of the lowest band, if that band is below the newcomer's.
      let lowest: BandLists<T> | null = null;
      let lowestBand = e.band;
      for (const [band, lists] of this.#bands) if (band > lowestBand && lists.all.size > 0) [lowest, lowestBand] = [lists, band];
      if (lowest === null) return { ok: false };
      evicted = this.#unlink(lowest.all.last!.value);
    }
    if (e.enqueuedAt < this.#lastStamp) e.enqueuedAt = this.#lastStamp;
    this.#lastStamp = e.enqueuedAt;
    const slot: Slot<T> = { entry: e, seq: this.#seq++, deadline: e.deadline, heapAt: -1, bandNode: null, tenantNode: null };
    let lists = this.#bands.get(e.band);
    if (!lists) this.#bands.set(e.band, (lists = { all: new ArrivalList(), byTenant: new Map() }));
    let mine = lists.byTenant.get(e.tenant);
    if (!mine) lists.byTenant.set(e.tenant, (mine = new ArrivalList()));
    slot.bandNode = lists.all.push(slot);
    slot.tenantNode = mine.push(slot);
    this.#deadlines.push(slot);
    this.#slots.set(e.ticket, slot);
    this.#tenantDepth.set(e.tenant, (this.#tenantDepth.get(e.tenant) ?? 0) + 1);
    return { ok: true, evicted };
  }

  remove(ticket: string): QueuedEntry<T> | undefined {
    const slot = this.#slots.get(ticket);
    return slot ? this.#unlink(slot) : undefined;
  }

  /** Removes and returns the requests whose deadline has passed, in arrival order. */
  takeExpired(now: number): QueuedEntry<T>[] {
    const out: Slot<T>[] = [];
    for (let top = this.#deadlines.peek(); top !== undefined && top.deadline <= now; top = this.#deadlines.peek()) {
      this.#unlink(top);
      out.push(top);
    }
    return out.sort((a, b) => a.seq - b.seq).map((s) => s.entry);
  }

  earliestDeadline(): number | null {
    return this.#deadlines.peek()?.deadline ?? null;
  }

  /** How many requests wait in each band (as asked, not aged). */
  depthByBand(bands: number): number[] {
    const out = new Array<number>(bands).fill(0);
    for (const [band, lists] of this.#bands) if (band >= 0 && band < bands) out[band] = lists.all.size;
    return out;
  }

  /** How many requests each tenant has waiting. */
  depthByTenant(): Map<string, number> {
    return new Map(this.#tenantDepth);
  }

  /**
   * Removes and returns the request that goes next (the order above). `usage` is a tenant's
   * in-flight cost; `overlap` the request's cached blocks on the worker that has room, asked only
   * of the chosen tenant's oldest requests in the chosen band.
   */
  takeNext(now: number, usage: (tenant: string) => number, overlap: (e: QueuedEntry<T>) => number): QueuedEntry<T> | undefined {
    // 1. The best aged band: each band's oldest request holds its band's best.
    let best = Infinity;
    for (const lists of this.#bands.values()) if (lists.all.first) best = Math.min(best, this.agedBand(lists.all.first.value.entry, now));
    if (best === Infinity) return undefined;
    // 2. Tenants with a request in it, each with its oldest such request's arrival.
    const oldestOf = new Map<string, number>();
    for (const lists of this.#bands.values()) {
      const head = lists.all.first;
      if (!head || this.agedBand(head.value.entry, now) !== best) continue;
      for (const [tenant, list] of lists.byTenant) {
        const first = list.first!.value;
        if (this.agedBand(first.entry, now) !== best) continue;
        const seen = oldestOf.get(tenant);
        if (seen === undefined || first.seq < seen) oldestOf.set(tenant, first.seq);
      }
    }
    let tenant: string | null = null;
    let tenantUsage = Infinity;
    let tenantSeq = Infinity;
    for (const [t, seq] of oldestOf) {
      const u = usage(t);
      if (u < tenantUsage || (u === tenantUsage && tenant !== null && seq < tenantSeq)) [tenant, tenantUsage, tenantSeq] = [t, u, seq];
    }
    if (tenant === null) return undefined;
    // 3. Most overlap among that tenant's oldest requests in the band (merged in arrival order).
    const cursors: ArrivalNode<Slot<T>>[] = [];
    for (const lists of this.#bands.values()) {
      const node = lists.byTenant.get(tenant)?.first;
      if (node && this.agedBand(node.value.entry, now) === best) cursors.push(node);
    }
    let pick: Slot<T> | null = null;
    let pickOverlap = -1;
    for (let asked = 0; asked < this.#overlapScan && cursors.length > 0; asked++) {
      let k = 0;
      for (let j = 1; j < cursors.length; j++) if (cursors[j]!.value.seq < cursors[k]!.value.seq) k = j;
      const slot = cursors[k]!.value;
      const o = overlap(slot.entry);
      if (o > pickOverlap) [pick, pickOverlap] = [slot, o];
      const next = cursors[k]!.next;
      if (next && this.agedBand(next.value.entry, now) === best) cursors[k] = next;
      else cursors.splice(k, 1);
    }
    return pick ? this.#unlink(pick) : undefined;
  }

  #unlink(slot: Slot<T>): QueuedEntry<T> {
    const e = slot.entry;
    this.#slots.delete(e.ticket);
    this.#deadlines.remove(slot);
    const lists = this.#bands.get(e.band)!;
    lists.all.remove(slot.bandNode!);
    const mine = lists.byTenant.get(e.tenant)!;
    mine.remove(slot.tenantNode!);
    if (mine.size === 0) lists.byTenant.delete(e.tenant);
    const depth = (this.#tenantDepth.get(e.tenant) ?? 1) - 1;
    if (depth > 0) this.#tenantDepth.set(e.tenant, depth);
    else this.#tenantDepth.delete(e.tenant);
    slot.bandNode = slot.tenantNode = null;
    return e;
  }
}
