/**
 * The indexed admission queue against a plain scan of the whole queue (the oracle below: the order
 * the queue is defined by, written the simplest way). Random queues of three bands and a few
 * tenants, with adds past the bound (evictions), departures, deadlines, aging and pick after pick
 * under random tenant usage and overlap (ties common): every outcome must match, step by step.
 */
import { describe, expect, it } from "vitest";
import { AdmissionQueue, type EnqueueOutcome, type QueuedEntry } from "../../../src/admission/admission-queue.ts";
import { rng } from "../../../bench/lib/stats.mjs";

type Entry = QueuedEntry<null>;

/** The order by scanning every waiting request in arrival order; `overlapScan` as the queue's. */
class ScanQueue {
  readonly entries = new Map<string, Entry>();
  constructor(
    readonly maxSize: number,
    readonly agingMs: number,
    readonly overlapScan = Infinity,
  ) {}

  aged(e: Entry, now: number): number {
    return e.band - Math.floor(Math.max(0, now - e.enqueuedAt) / this.agingMs);
  }

  add(e: Entry): EnqueueOutcome<null> {
    if (this.entries.has(e.ticket)) return { ok: false };
    let evicted: Entry | null = null;
    if (this.entries.size >= this.maxSize) {
      for (const q of this.entries.values()) if (q.band > e.band && (evicted === null || q.band >= evicted.band)) evicted = q;
      if (evicted === null) return { ok: false };
      this.entries.delete(evicted.ticket);
    }
    this.entries.set(e.ticket, e);
    return { ok: true, evicted };
  }

  takeExpired(now: number): Entry[] {
    const out = [...this.entries.values()].filter((e) => e.deadline <= now);
    for (const e of out) this.entries.delete(e.ticket);
    return out;
  }

  earliestDeadline(): number | null {
    let min: number | null = null;
    for (const e of this.entries.values()) if (min === null || e.deadline < min) min = e.deadline;
    return min;
  }

  takeNext(now: number, usage: (t: string) => number, overlap: (e: Entry) => number): Entry | undefined {
    let best = Infinity;
    for (const e of this.entries.values()) best = Math.min(best, this.aged(e, now));
    let tenant: string | null = null;
    let tenantUsage = Infinity;
    for (const e of this.entries.values()) {
      if (this.aged(e, now) !== best || e.tenant === tenant) continue;
      const u = usage(e.tenant);
      if (u < tenantUsage) [tenant, tenantUsage] = [e.tenant, u];
    }
    let pick: Entry | undefined;
    let pickOverlap = -1;
    let asked = 0;
    for (const e of this.entries.values()) {
      if (e.tenant !== tenant || this.aged(e, now) !== best) continue;
      if (asked++ >= this.overlapScan) break;
      const o = overlap(e);
      if (o > pickOverlap) [pick, pickOverlap] = [e, o];
    }
    if (pick) this.entries.delete(pick.ticket);
    return pick;
  }
}

const tickets = (es: readonly Entry[]) => es.map((e) => e.ticket);
const outcome = (o: EnqueueOutcome<null>) => (o.ok ? { ok: true, evicted: o.evicted?.ticket ?? null } : { ok: false });

/** One random run; returns how many picks were compared. */
function run(seed: number, opts: { maxSize: number; tenants: number; overlapScan?: number }): number {
  const random = rng(seed);
  const agingMs = 1000;
  const queue = new AdmissionQueue<null>(opts.maxSize, agingMs, opts.overlapScan);
  const oracle = new ScanQueue(opts.maxSize, agingMs, opts.overlapScan);
  const pick = <X>(xs: readonly X[]): X => xs[Math.floor(random() * xs.length)]!;
  let now = 0;
  let id = 0;
  let picks = 0;
  for (let step = 0; step < 1500; step++) {
    // Time moves by small steps (many requests share a stamp) and now and then past an aging step.
    now += random() < 0.3 ? 0 : random() < 0.9 ? Math.floor(random() * 120) : Math.floor(random() * 2500);
    const u = random();
    if (u < 0.5) {
      const mk = (): Entry => ({
        ticket: random() < 0.02 && id > 0 ? `t${Math.floor(random() * id)}` : `t${id++}`,
        band: pick([0, 1, 1, 2]),
        tenant: `k${Math.floor(random() * opts.tenants)}`,
        cost: 1,
        enqueuedAt: now,
        deadline: now + pick([500, 1000, 2000, 5000, 30_000]),
        payload: null,
      });
      const e = mk();
      expect(outcome(queue.add({ ...e })), `add ${e.ticket}`).toEqual(outcome(oracle.add(e)));
    } else if (u < 0.6 && oracle.entries.size > 0) {
      const t = pick([...oracle.entries.keys(), "unknown"]);
      expect(queue.remove(t)?.ticket).toBe(oracle.entries.get(t)?.ticket);
      oracle.entries.delete(t);
    } else if (u < 0.7) {
      expect(tickets(queue.takeExpired(now))).toEqual(tickets(oracle.takeExpired(now)));
    } else {
      // Usage and overlap drawn per pick from few values, so ties are frequent.
      const usage = new Map<string, number>();
      const usageOf = (t: string) => usage.get(t) ?? usage.set(t, Math.floor(random() * 3) * 100).get(t)!;
      for (let k = 0; k < opts.tenants; k++) usageOf(`k${k}`);
      const overlaps = new Map<string, number>();
      for (const t of oracle.entries.keys()) overlaps.set(t, Math.floor(random() * 3));
      const a = queue.takeNext(now, usageOf, (e) => overlaps.get(e.ticket)!);
      const b = oracle.takeNext(now, usageOf, (e) => overlaps.get(e.ticket)!);
      expect(a?.ticket, `pick ${picks} at ${now}`).toBe(b?.ticket);
      picks++;
    }
    expect(queue.size).toBe(oracle.entries.size);
    expect(queue.earliestDeadline()).toBe(oracle.earliestDeadline());
  }
  const byBand = [0, 1, 2].map((b) => [...oracle.entries.values()].filter((e) => e.band === b).length);
  expect(queue.depthByBand(3)).toEqual(byBand);
  const byTenant = new Map<string, number>();
  for (const e of oracle.entries.values()) byTenant.set(e.tenant, (byTenant.get(e.tenant) ?? 0) + 1);
  expect(new Map([...queue.depthByTenant()].sort())).toEqual(new Map([...byTenant].sort()));
  return picks;
}

describe("admission queue order: indexed pick = scan of the whole queue", () => {
  it("on random queues with evictions, departures, deadlines and aging (every tenant's band asked for overlap)", () => {
    let picks = 0;
    for (let seed = 1; seed <= 40; seed++) picks += run(seed, { maxSize: seed % 2 ? 24 : 200, tenants: 1 + (seed % 6), overlapScan: 100_000 });
    expect(picks).toBeGreaterThan(10_000);
  });

  it("with the overlap step bounded to a tenant's oldest requests of the band", () => {
    for (let seed = 100; seed <= 120; seed++) run(seed, { maxSize: 300, tenants: 2, overlapScan: 1 + (seed % 5) });
  });

  it("a pick's work does not grow with the queue: overlap asked of at most overlapScan requests, usage of each waiting tenant once", () => {
    const queue = new AdmissionQueue<null>(100_000, 600_000, 64);
    for (let i = 0; i < 50_000; i++)
      queue.add({ ticket: `t${i}`, band: i % 3, tenant: `k${i % 4}`, cost: 1, enqueuedAt: i, deadline: 1e9, payload: null });
    let overlapAsks = 0;
    let usageAsks = 0;
    const e = queue.takeNext(
      60_000,
      () => (usageAsks++, 0),
      () => (overlapAsks++, 0),
    );
    expect(e?.ticket).toBe("t0");
    expect(overlapAsks).toBe(64);
    expect(usageAsks).toBe(4);
  });

  it("a clock that steps back keeps arrival order as age order: the later request is stamped no earlier", () => {
    const queue = new AdmissionQueue<null>(10, 1000);
    const at = (ticket: string, band: number, enqueuedAt: number): Entry => ({ ticket, band, tenant: "k", cost: 1, enqueuedAt, deadline: 1e9, payload: null });
    queue.add(at("a", 1, 5000));
    const late = at("b", 2, 3000);
    queue.add(late);
    expect(late.enqueuedAt).toBe(5000);
    // At 6 000 "b" (flex) has aged one band by its own stamp (3 000) but not by the kept one: "a" goes first.
    expect(queue.takeNext(6000, () => 0, () => 0)?.ticket).toBe("a");
  });
});
