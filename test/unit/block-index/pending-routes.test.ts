// PendingRoutes (src/block-index/pending-routes.ts: grid keys, inner keys only where chains share a
// segment) against the implementation that counted every block's key (pending-routes-oracle.ts):
// seeded traces of chains sharing prefixes and forking anywhere (on and next to the grid), repeats
// and next turns (the heir hand-over), queries, clears, expiry and tiny bounds; every overlap, size
// and block count must be equal.
import { describe, expect, it } from "vitest";
import { DEFAULT_PENDING_KEY_STRIDE, PendingRoutes } from "../../../src/block-index/pending-routes.ts";
import { PendingRoutes as Oracle } from "./pending-routes-oracle.ts";
import { mulberry32 as rng } from "../support/tokenizer-fuzz.ts";

const SLOTS = 4;
const TTL = 50;

/** One seeded trace: adds, queries, clears and clock steps on both, compared after every step. */
function trace(seed: number, stride: number, maxPerWorker: number, maxBlocks: number, steps: number): void {
  const rand = rng(seed);
  const pick = (n: number) => Math.floor(rand() * n);
  let fresh = 1n;
  const tail = (n: number) => Array.from({ length: n }, () => fresh++);
  const made: bigint[][] = [];
  // A chain sharing a prefix with an earlier one: whole (a repeat or a next turn), cut on the grid
  // or one block off it, or anywhere; then a tail of new blocks (none: a prefix of the earlier one).
  const chain = (): bigint[] => {
    if (made.length === 0 || rand() < 0.15) return tail(1 + pick(3 * stride + 8));
    const base = made[pick(made.length)]!;
    const r = rand();
    const keep =
      r < 0.3 ? base.length
      : r < 0.65 ? Math.max(0, Math.min(base.length, pick(Math.ceil(base.length / stride) + 1) * stride + pick(3) - 1))
      : pick(base.length + 1);
    return base.slice(0, keep).concat(tail(rand() < 0.25 ? 0 : pick(2 * stride + 4)));
  };
  const form = (c: bigint[]) => (rand() < 0.5 ? BigUint64Array.from(c) : c);
  const pr = new PendingRoutes(TTL, maxPerWorker, maxBlocks, stride);
  const oracle = new Oracle(TTL, maxPerWorker, maxBlocks);
  let now = 0;
  for (let i = 0; i < steps; i++) {
    const at = `seed ${seed} stride ${stride} bounds ${maxPerWorker}/${maxBlocks} step ${i}`;
    const r = rand();
    if (r < 0.45) {
      const c = chain();
      const slot = pick(SLOTS);
      const h = form(c);
      pr.add(slot, h, now);
      oracle.add(slot, h, now);
      if (c.length > 0) made.length < 40 ? made.push(c) : (made[pick(made.length)] = c);
    } else if (r < 0.9) {
      const h = form(chain());
      expect(pr.overlaps(h, now), at).toEqual(oracle.overlaps(h, now));
      const slot = pick(SLOTS);
      expect(pr.overlap(slot, h, now), at).toBe(oracle.overlap(slot, h, now));
    } else if (r < 0.94) {
      const slot = pick(SLOTS);
      pr.clear(slot);
      oracle.clear(slot);
    }
    const step = rand();
    now += step < 0.6 ? 0 : step < 0.85 ? 1 + pick(5) : step < 0.97 ? pick(TTL) : TTL + 1;
    expect([pr.size, pr.blocks], at).toEqual([oracle.size, oracle.blocks]);
  }
  // Every hold a chain took (or took over, or was given for a shared segment) is given back.
  for (let slot = 0; slot < SLOTS; slot++) pr.clear(slot);
  expect([pr.size, pr.blocks, pr.keys]).toEqual([0, 0, 0]);
}

describe("PendingRoutes against the every-key oracle", () => {
  it("returns the same overlaps on seeded traces of shared prefixes, forks, repeats, expiry and clears", () => {
    let seed = 1;
    for (const stride of [2, 3, 4, 8])
      for (const [maxPerWorker, maxBlocks] of [[256, 1 << 18], [3, 1 << 18], [1, 60], [4, 25]] as const)
        for (let t = 0; t < 12; t++) trace(seed++, stride, maxPerWorker, maxBlocks, 400);
  });

  it("returns the same overlaps with the default stride on long chains forking on and off the grid", () => {
    for (let seed = 500; seed < 530; seed++) trace(seed, DEFAULT_PENDING_KEY_STRIDE, 256, 1 << 18, 300);
  });
});

describe("PendingRoutes' held keys", () => {
  const chainOf = (seed: number, n: number, shared: bigint[] = []) => shared.concat(Array.from({ length: n - shared.length }, (_, i) => BigInt(seed * 1_000_000 + i + 1)));

  it("refuses a key stride that is not an integer ≥ 2 (a NaN stride would hold nothing)", () => {
    for (const stride of [Number.NaN, 1, 0, 2.5, Infinity]) expect(() => new PendingRoutes(60_000, 256, 1 << 18, stride)).toThrow(RangeError);
    expect(new PendingRoutes(60_000, 256, 1 << 18, 2).keyStride).toBe(2);
  });

  it("counts the grid and the first segment of distinct chains, not every block", () => {
    const pr = new PendingRoutes(60_000, 256, 1 << 18, 16);
    for (let s = 0; s < 10; s++) pr.add(s % 3, chainOf(s, 1000), s);
    // Per chain: 62 grid keys (positions 15, 31, ..., 991) and the first segment's 15 inner keys.
    expect(pr.keys).toBe(10 * (62 + 15));
    expect(pr.blocks).toBe(10 * 1000);
    expect(pr.overlaps(chainOf(4, 1000).slice(0, 700).concat([7n]), 10)).toEqual(new Map([[1, 700]]));
  });

  it("counts a shared segment's inner keys on each chain through it, and a next turn only its new blocks", () => {
    const pr = new PendingRoutes(60_000, 256, 1 << 18, 16);
    const system = chainOf(99, 32);
    const a = chainOf(1, 100, system);
    pr.add(0, a, 0);
    expect(pr.keys).toBe(6 + 15);
    // b shares the system prompt (two grid keys): both hold the inner keys of the two segments after them.
    pr.add(0, chainOf(2, 100, system), 1);
    expect(pr.keys).toBe(15 + 2 + 15 + 2 * 15 + 2 * 4);
    // a's next turn takes a's holds over and adds its new grid keys.
    const before = pr.keys;
    pr.add(0, a.concat(chainOf(3, 64)), 2);
    expect([pr.size, pr.keys]).toEqual([2, before + 4]);
    expect(pr.overlaps(a.concat(chainOf(3, 64)).slice(0, 150), 3)).toEqual(new Map([[0, 150]]));
    expect(pr.overlaps(system.concat([5n]), 3)).toEqual(new Map([[0, 32]]));
  });
});
