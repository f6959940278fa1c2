/**
 * Seeded differentials for the approximate index (src/block-index/approx-index.ts): random records
 * of prefix-sharing chains on several workers, matches, clock steps past the TTL and clears.
 * Without pruning it must answer as the earlier implementation (approx-index-oracle.ts); with a
 * tiny maxBlocks as a plain model of its documented prune rule (below).
 */
import { describe, expect, it } from "vitest";
import { ApproxIndex } from "../../../src/block-index/approx-index.ts";
import { OracleApproxIndex } from "./approx-index-oracle.ts";
import { mulberry32 } from "../support/tokenizer-fuzz.ts";

/**
 * The documented rule in plain form: each (worker, block) keeps the expiry and sequence number of
 * the latest record covering it (the clock never goes back); a record that leaves more than
 * maxBlocks starts a prune; each record while it runs drops up to (its new blocks + step) entries,
 * earliest record first, deepest block first, until floor(maxBlocks × ratio) remain.
 */
class ModelApprox {
  readonly held = new Map<number, Map<string, { at: number; seq: number; depth: number }>>();
  #now = -Infinity;
  #seq = 0;
  #target = -1;
  count = 0;
  expired = 0;
  pruned = 0;
  lastAdded = 0;
  #scores = new Map<number, number>();

  constructor(readonly ttl: number, readonly maxBlocks: number, readonly ratio: number, readonly step: number) {}

  record(slot: number, chain: readonly bigint[], now: number): void {
    if (chain.length === 0) return;
    this.#now = Math.max(this.#now, now);
    const at = this.#now + this.ttl;
    const seq = ++this.#seq;
    const m = this.held.get(slot) ?? new Map();
    this.held.set(slot, m);
    let added = 0;
    keys(chain).forEach((k, depth) => {
      if (!m.has(k)) added++;
      m.set(k, { at, seq, depth });
    });
    this.count += added;
    this.lastAdded = added;
    if (this.#target < 0 && this.count > this.maxBlocks) this.#target = Math.floor(this.maxBlocks * this.ratio);
    if (this.#target < 0) return;
    const all = [...this.held].flatMap(([s, mm]) => [...mm].map(([k, e]) => ({ s, k, ...e })));
    all.sort((a, b) => a.seq - b.seq || b.depth - a.depth);
    let budget = added + this.step;
    for (const e of all) {
      if (this.count <= this.#target || budget === 0) break;
      this.held.get(e.s)!.delete(e.k);
      this.count--;
      this.pruned++;
      budget--;
    }
    if (this.count <= this.#target) this.#target = -1;
  }

  expire(now: number): number {
    let n = 0;
    for (const m of this.held.values())
      for (const [k, e] of m)
        if (e.at <= now) {
          m.delete(k);
          n++;
        }
    this.count -= n;
    this.expired += n;
    return n;
  }

  match(chain: readonly bigint[], now: number): void {
    this.expire(now);
    const ks = keys(chain);
    this.#scores = new Map();
    for (const [s, m] of this.held) {
      let d = 0;
      while (d < ks.length && m.has(ks[d]!)) d++;
      this.#scores.set(s, d);
    }
  }

  overlapOf(slot: number): number {
    return this.#scores.get(slot) ?? 0;
  }

  clear(slot: number): void {
    this.count -= this.held.get(slot)?.size ?? 0;
    this.held.delete(slot);
    this.#scores.delete(slot);
  }
}

function keys(chain: readonly bigint[]): string[] {
  let k = "";
  return chain.map((h) => (k += `/${h}`));
}

const SLOTS = [0, 1, 2, 3, 37];

/**
 * Random chains sharing prefixes: extensions and forks of earlier ones, from a small hash alphabet
 * (blocks repeat across positions); each adds up to `maxNew` blocks.
 */
function chainMaker(rand: () => number, maxNew: number) {
  const made: bigint[][] = [];
  const h = () => BigInt(1 + Math.floor(rand() * 24)) * 0x9e3779b97f4a7c15n % 2n ** 64n;
  return (): bigint[] => {
    const base = made.length > 0 && rand() < 0.8 ? made[Math.floor(rand() * made.length)]! : [];
    const keep = Math.floor(rand() * (base.length + 1));
    const extra = rand() < 0.3 ? 0 : 1 + Math.floor(rand() * maxNew);
    const c = base.slice(0, keep).concat(Array.from({ length: extra }, h));
    if (c.length > 0 && made.length < 64) made.push(c);
    return c.length > 0 ? c : [h()];
  };
}

type Op = { kind: "record"; slot: number; chain: bigint[] } | { kind: "match"; chain: bigint[] } | { kind: "expire" } | { kind: "clear"; slot: number } | { kind: "tick"; ms: number };

function ops(seed: number, count: number, ttl: number, maxNew = 12): Op[] {
  const rand = mulberry32(seed);
  const chain = chainMaker(rand, maxNew);
  const slot = () => SLOTS[Math.floor(rand() * SLOTS.length)]!;
  return Array.from({ length: count }, (): Op => {
    const r = rand();
    if (r < 0.45) return { kind: "record", slot: slot(), chain: chain() };
    if (r < 0.8) return { kind: "match", chain: chain() };
    if (r < 0.85) return { kind: "expire" };
    if (r < 0.88) return { kind: "clear", slot: slot() };
    return { kind: "tick", ms: rand() < 0.2 ? ttl + Math.floor(rand() * ttl) : Math.floor(rand() * (ttl / 4)) };
  });
}

/**
 * Bursts, the shape that makes expiry rebuild: many routes at about one time sharing prefixes on
 * few workers, a few later ones (some re-tipping an interior block: a prefix of an earlier route;
 * some through a cleared worker's old tip), then the clock at (or just past) the burst's first
 * route + ttl, so the burst expires and the later ones stay; then matches, records and clears.
 */
function burstOps(seed: number, count: number, ttl: number): Op[] {
  const rand = mulberry32(seed);
  const alphabet = 2 + Math.floor(rand() * 30);
  const h = () => BigInt(1 + Math.floor(rand() * alphabet)) * 0x9e3779b97f4a7c15n % 2n ** 64n;
  const pick = <T>(a: readonly T[]) => a[Math.floor(rand() * a.length)]!;
  const bases: bigint[][] = [];
  const chain = (): bigint[] => {
    const r = rand();
    if (bases.length > 0 && r < 0.25) {
      const b = pick(bases);
      return b.slice(0, 1 + Math.floor(rand() * b.length));
    }
    const base = bases.length > 0 && r < 0.85 ? pick(bases) : [];
    const extra = rand() < 0.1 ? 0 : rand() < 0.05 ? 100 + Math.floor(rand() * 300) : 1 + Math.floor(rand() * 15);
    const c = base.slice(0, Math.floor(rand() * (base.length + 1))).concat(Array.from({ length: extra }, h));
    return c.length > 0 ? c : [h()];
  };
  const some = () => (rand() < 0.5 || bases.length === 0 ? chain() : pick(bases));
  const slots = SLOTS.slice(0, 1 + Math.floor(rand() * 5));
  const out: Op[] = [];
  let now = 0;
  const at = (t: number) => {
    if (t !== now) out.push({ kind: "tick", ms: t - now });
    now = t;
  };
  while (out.length < count) {
    const first = now;
    for (let i = 3 + Math.floor(rand() * 40); i > 0; i--) {
      const c = chain();
      if (bases.length < 30) bases.push(c);
      else bases[Math.floor(rand() * 30)] = c;
      out.push({ kind: "record", slot: pick(slots), chain: c });
      if (rand() < 0.2) at(now + Math.floor(rand() * 3));
    }
    if (rand() < 0.1) out.push({ kind: "clear", slot: pick(slots) });
    at(now + 1 + Math.floor(rand() * (ttl / 2)));
    const later = now;
    for (let i = Math.floor(rand() * 4); i > 0; i--) out.push({ kind: "record", slot: pick(slots), chain: some() });
    if (rand() < 0.3) {
      // A route, its worker cleared, then a longer or shorter route through its old tip.
      const slot = pick(slots);
      const c = some();
      out.push({ kind: "record", slot, chain: c }, { kind: "clear", slot });
      const next = rand() < 0.7 ? c.concat(Array.from({ length: 1 + Math.floor(rand() * 4) }, h)) : c.slice(0, Math.max(1, c.length - 1));
      out.push({ kind: "record", slot, chain: next });
      if (rand() < 0.5) out.push({ kind: "record", slot, chain: c });
    }
    if (rand() < 0.4) {
      // A route, then a moment later a prefix of it on the same worker: its tip is the earlier one's
      // interior block, copied first by a rebuild, and outlives the earlier one.
      const slot = pick(slots);
      const c = some();
      out.push({ kind: "record", slot, chain: c });
      at(now + 1 + Math.floor(rand() * 20));
      out.push({ kind: "record", slot, chain: c.slice(0, 1 + Math.floor(rand() * c.length)) });
    }
    if (rand() < 0.15) out.push({ kind: "clear", slot: pick(slots) });
    at(rand() < 0.1 ? Math.max(now, first + ttl - 1) : Math.max(now, first + ttl + Math.floor(rand() * 3)));
    out.push(rand() < 0.5 ? { kind: "match", chain: some() } : { kind: "expire" });
    if (rand() < 0.5) {
      // The first later routes expire; the ones a moment later stay.
      at(Math.max(now, later + ttl));
      out.push(rand() < 0.5 ? { kind: "match", chain: some() } : { kind: "expire" });
    }
    for (let i = Math.floor(rand() * 6); i > 0; i--) {
      const r = rand();
      if (r < 0.35) out.push({ kind: "record", slot: pick(slots), chain: some() });
      else if (r < 0.75) out.push({ kind: "match", chain: some() });
      else if (r < 0.85) out.push({ kind: "clear", slot: pick(slots) });
      else at(now + Math.floor((rand() * ttl) / 3));
    }
  }
  return out;
}

/** The route RPC's form (BigUint64Array) for some calls, a bigint array for others. */
const asHashes = (c: bigint[], i: number) => (i % 2 === 0 ? BigUint64Array.from(c) : c);

/** Runs `list` on `ax` and the earlier implementation, comparing every answer. */
function againstOracle(ax: ApproxIndex, ttl: number, list: Op[]): void {
  const oracle = new OracleApproxIndex({ ttlMs: ttl });
  let now = 0;
  list.forEach((op, i) => {
    switch (op.kind) {
      case "record":
        ax.record(op.slot, asHashes(op.chain, i), now);
        oracle.record(op.slot, op.chain, now);
        break;
      case "match":
        ax.match(asHashes(op.chain, i), now);
        oracle.match(op.chain, now);
        expect(SLOTS.map((s) => ax.overlapOf(s)), `op ${i}`).toEqual(SLOTS.map((s) => oracle.overlapOf(s)));
        break;
      case "expire":
        expect(ax.expire(now), `op ${i}`).toBe(oracle.expire(now));
        break;
      case "clear":
        ax.clear(op.slot);
        oracle.clear(op.slot);
        break;
      case "tick":
        now += op.ms;
    }
    expect(ax.size, `op ${i}`).toBe(oracle.size);
    expect(SLOTS.map((s) => ax.workerBlockCount(s)), `op ${i}`).toEqual(SLOTS.map((s) => oracle.workerBlockCount(s)));
  });
  expect(ax.expired).toBe(oracle.expired);
  expect(oracle.pruned).toBe(0);
  expect(ax.resets).toBe(0);
}

// Even seeds rebuild from the alive entries wherever that is cheaper (rebuildMin 0), odd ones only
// where at least APPROX_REBUILD_MIN blocks expire (never here, but when all did). Chains of up to 300
// new blocks pass WALK_MEMO_MIN_BLOCKS, so the approximate tree's walk memo keeps and resumes walks.
describe("ApproxIndex against the earlier implementation (no prune)", () => {
  for (const [seed, count, maxNew] of [[1, 4000, 12], [2, 4000, 12], [3, 4000, 12], [4, 4000, 12], [5, 1500, 300], [6, 1500, 300]] as const) {
    it(`seed ${seed}: same overlaps, sizes and expiry counts (chains grow by up to ${maxNew} blocks)`, () => {
      const ttl = 100;
      const ax = new ApproxIndex({ ttlMs: ttl }, seed % 2 === 0 ? { rebuildMin: 0 } : {});
      againstOracle(ax, ttl, ops(seed, count, ttl, maxNew));
      expect(ax.expired).toBeGreaterThan(100);
    });
  }
  // Bursts rebuild at most expiries (rebuildMin 0): the copy's joins and tips found already copied.
  for (const seed of [21, 22, 23, 24]) {
    it(`seed ${seed}: bursts of routes expiring together, rebuilt from the later ones`, () => {
      const ttl = 100;
      const ax = new ApproxIndex({ ttlMs: ttl }, { rebuildMin: 0 });
      againstOracle(ax, ttl, burstOps(seed, 1500, ttl));
      expect(ax.rebuilt).toBeGreaterThan(10);
    });
  }
});

describe("ApproxIndex against its prune rule (tiny maxBlocks)", () => {
  for (const [seed, maxBlocks, step] of [[11, 40, 3], [12, 90, 7], [13, 25, 1], [14, 160, 4096]] as const) {
    it(`seed ${seed}: maxBlocks ${maxBlocks}, step ${step}`, () => {
      const ttl = 100;
      const ratio = 0.8;
      const ax = new ApproxIndex({ ttlMs: ttl, maxBlocks, pruneTargetRatio: ratio }, seed % 2 === 0 ? { pruneStep: step, rebuildMin: 0 } : { pruneStep: step });
      const model = new ModelApprox(ttl, maxBlocks, ratio, step);
      let now = 0;
      ops(seed, 4000, ttl).forEach((op, i) => {
        switch (op.kind) {
          case "record": {
            const before = ax.pruned;
            ax.record(op.slot, asHashes(op.chain, i), now);
            model.record(op.slot, op.chain, now);
            // The bound holds after every record, and one record drops at most its new blocks + step.
            expect(ax.size, `op ${i}`).toBeLessThanOrEqual(maxBlocks);
            expect(ax.pruned - before, `op ${i}`).toBeLessThanOrEqual(model.lastAdded + step);
            break;
          }
          case "match":
            ax.match(asHashes(op.chain, i), now);
            model.match(op.chain, now);
            expect(SLOTS.map((s) => ax.overlapOf(s)), `op ${i}`).toEqual(SLOTS.map((s) => model.overlapOf(s)));
            break;
          case "expire":
            expect(ax.expire(now), `op ${i}`).toBe(model.expire(now));
            break;
          case "clear":
            ax.clear(op.slot);
            model.clear(op.slot);
            break;
          case "tick":
            // Now and then the clock steps back (taken as standing still).
            now += rand01(seed, i) < 0.05 ? -Math.floor(op.ms / 2) : op.ms;
        }
        expect(ax.size, `op ${i}`).toBe(model.count);
        expect(SLOTS.map((s) => ax.workerBlockCount(s)), `op ${i}`).toEqual(SLOTS.map((s) => model.held.get(s)?.size ?? 0));
      });
      expect([ax.pruned, ax.expired]).toEqual([model.pruned, model.expired]);
      expect(ax.pruned).toBeGreaterThan(50);
    });
  }
});

/** A second seeded stream for the clock's steps back, apart from the ops' stream. */
function rand01(seed: number, i: number): number {
  return mulberry32(seed * 7919 + i)();
}
