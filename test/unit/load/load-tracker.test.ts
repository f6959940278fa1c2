/**
 * LoadTracker and PendingRoutes against naive models: random adds, releases, expiries and clears
 * (fast-check), every answer recomputed from scratch from the live set. Also chainKeysOf against
 * a plain BigInt formulation (the typed-array word split must give the same keys).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { chainKeysOf } from "../../../src/blocks/chain-keys.ts";
import { LoadTracker } from "../../../src/load/load-tracker.ts";
import { PendingRoutes } from "../../../src/block-index/pending-routes.ts";

function chainKeysReference(hashes: readonly bigint[]): number[] {
  const out: number[] = [];
  let a = 0x9e3779b9 | 0;
  let b = 0x85ebca6b | 0;
  for (const h of hashes) {
    const lo = Number(h & 0xffffffffn) | 0;
    const hi = Number(h >> 32n) | 0;
    a = Math.imul(a ^ lo, 0x01000193) ^ Math.imul(b, 0x5bd1e995);
    b = Math.imul(b ^ hi, 0x27d4eb2d) ^ (a >>> 15);
    out.push((a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff));
  }
  return out;
}

/** Chains drawn from a small tree of prefixes, so requests share leading blocks. */
const chainArb = fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 0, maxLength: 12 }).map((path) => {
  const hashes: bigint[] = [];
  let h = 7n;
  for (const step of path) {
    h = BigInt.asUintN(64, h * 0x9e3779b97f4a7c15n + BigInt(step) + 1n);
    hashes.push(h);
  }
  return hashes;
});

/**
 * Local hashes as the edge computes them: of a block's own tokens only, so one hash recurs at other
 * positions and after other prefixes (only the whole leading run identifies a prefix).
 */
const localChainArb = fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 0, maxLength: 12 }).map((steps) => steps.map((s) => BigInt.asUintN(64, BigInt(s + 1) * 0x9e3779b97f4a7c15n)));

function commonPrefix(a: readonly number[] | readonly bigint[], b: readonly number[] | readonly bigint[]): number {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
}

describe("chainKeysOf", () => {
  it("matches the BigInt formulation on edge values and random 64-bit hashes", () => {
    const edge = [0n, 1n, 0xffffffffn, 0x100000000n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n];
    expect(chainKeysOf(edge)).toEqual(chainKeysReference(edge));
    fc.assert(fc.property(fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 40 }), (hs) => {
      expect(chainKeysOf(hs)).toEqual(chainKeysReference(hs));
      expect(chainKeysOf(BigUint64Array.from(hs))).toEqual(chainKeysReference(hs));
    }));
  });
});

describe("LoadTracker", () => {
  it("distinct decode blocks, prefill and shared prefixes equal a recomputation from the active set", () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant("add" as const), slot: fc.integer({ min: 0, max: 3 }), chain: chainArb, tail: fc.integer({ min: 0, max: 2 }), prefill: fc.integer({ min: 0, max: 500 }) }),
      fc.record({ t: fc.constant("release" as const), pick: fc.nat() }),
      fc.record({ t: fc.constant("done" as const), pick: fc.nat() }),
      fc.record({ t: fc.constant("query" as const), chain: chainArb }),
    );
    fc.assert(
      // Long runs: a worker holds many requests at once, in every order of their chains.
      fc.property(fc.array(op, { maxLength: 80, size: "max" }), (ops) => {
        const lt = new LoadTracker();
        const live = new Map<string, { slot: number; keys: number[]; decode: number; prefill: number; done: boolean }>();
        let n = 0;
        for (const o of ops) {
          if (o.t === "add") {
            const keys = chainKeysOf(o.chain);
            const id = `r${n++}`;
            lt.add({ receiptId: id, slot: o.slot, prefillTokens: o.prefill, decodeBlocks: keys.length + o.tail, chainKeys: keys, startedAt: 0, prefillDone: false });
            live.set(id, { slot: o.slot, keys, decode: keys.length + o.tail, prefill: o.prefill, done: false });
          } else if (o.t === "release" || o.t === "done") {
            const ids = [...live.keys()];
            if (ids.length === 0) continue;
            const id = ids[o.pick % ids.length]!;
            if (o.t === "release") {
              lt.release(id);
              live.delete(id);
            } else {
              lt.markPrefillDone(id);
              live.get(id)!.done = true;
            }
          } else {
            const q = chainKeysOf(o.chain);
            const expected = new Map<number, number>();
            for (const r of live.values()) {
              const k = commonPrefix(q, r.keys);
              if (k > 0 && k > (expected.get(r.slot) ?? 0)) expected.set(r.slot, k);
            }
            expect(new Map([...lt.sharedPrefixes(q)].filter(([, v]) => v > 0))).toEqual(expected);
          }
          for (let s = 0; s < 4; s++) {
            const mine = [...live.values()].filter((r) => r.slot === s);
            const distinct = new Set(mine.flatMap((r) => r.keys));
            const privateBlocks = mine.reduce((a, r) => a + (r.decode - r.keys.length), 0);
            expect(lt.decodeBlocks(s)).toBe(distinct.size + privateBlocks);
            expect(lt.prefillTokens(s)).toBe(mine.reduce((a, r) => a + (r.done ? 0 : r.prefill), 0));
            expect(lt.activeRequests(s)).toBe(mine.length);
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("PendingRoutes", () => {
  it("overlaps equal the longest common run with any live chain per worker; repeats keep buckets short", () => {
    // Mostly adds at the same instant, so a quarter of the runs take a worker past its bound of 5 live
    // chains (the TTL is 100); with fast-check's default size (~10 ops) and dt up to 40 on every op, none did.
    const dt = fc.oneof({ weight: 2, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 40 }) });
    const op = fc.oneof(
      { weight: 3, arbitrary: fc.record({ t: fc.constant("add" as const), slot: fc.integer({ min: 0, max: 2 }), chain: localChainArb, typed: fc.boolean(), dt }) },
      { weight: 1, arbitrary: fc.record({ t: fc.constant("clear" as const), slot: fc.integer({ min: 0, max: 2 }) }) },
      { weight: 2, arbitrary: fc.record({ t: fc.constant("query" as const), chain: localChainArb, typed: fc.boolean(), dt }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 100, size: "max" }), (ops) => {
        const pr = new PendingRoutes(100, 5);
        const model: { slot: number; hashes: bigint[]; expiresAt: number }[] = [];
        let now = 0;
        for (const o of ops) {
          if (o.t === "add") {
            now += o.dt;
            pr.add(o.slot, o.typed ? BigUint64Array.from(o.chain) : o.chain, now);
            if (o.chain.length === 0) continue;
            // A worker's chain that the new one repeats or extends is replaced by it.
            for (let i = model.length - 1; i >= 0; i--) {
              const c = model[i]!;
              if (c.slot === o.slot && c.hashes.length <= o.chain.length && commonPrefix(c.hashes, o.chain) === c.hashes.length) model.splice(i, 1);
            }
            model.push({ slot: o.slot, hashes: o.chain, expiresAt: now + 100 });
            // The per-worker bound keeps the newest 5 live chains of each worker.
            const mine = model.filter((c) => c.slot === o.slot && c.expiresAt > now);
            if (mine.length > 5) model.splice(model.indexOf(mine[0]!), 1);
          } else if (o.t === "clear") {
            pr.clear(o.slot);
            for (let i = model.length - 1; i >= 0; i--) if (model[i]!.slot === o.slot) model.splice(i, 1);
          } else {
            now += o.dt;
            const expected = new Map<number, number>();
            for (const c of model) {
              if (c.expiresAt <= now) continue;
              const k = commonPrefix(o.chain, c.hashes);
              if (k > 0 && k > (expected.get(c.slot) ?? 0)) expected.set(c.slot, k);
            }
            expect(pr.overlaps(o.typed ? BigUint64Array.from(o.chain) : o.chain, now)).toEqual(expected);
          }
        }
        // Every count a chain took (or inherited from the chain it extended) is given back.
        for (let slot = 0; slot <= 2; slot++) pr.clear(slot);
        expect([pr.size, pr.blocks, pr.keys]).toEqual([0, 0, 0]);
      }),
      { numRuns: 400 },
    );
    // 1 000 repeats of one chain on one worker: the overlap is found at once and nothing piles up.
    const pr = new PendingRoutes();
    const chain = Array.from({ length: 2000 }, (_, i) => BigInt(i + 1));
    for (let i = 0; i < 1000; i++) pr.add(0, chain, i);
    expect(pr.overlaps(chain, 1000)).toEqual(new Map([[0, 2000]]));
    expect(pr.size).toBe(1);
  });
});

describe("PendingRoutes bounds", () => {
  it("holds at most maxBlocks block references in total, dropping the oldest chains first", () => {
    const pr = new PendingRoutes(60_000, 256, 1000);
    const chainOf = (seed: number, n: number) => Array.from({ length: n }, (_, i) => BigInt(seed * 100_000 + i + 1));
    for (let s = 0; s < 10; s++) pr.add(s % 3, chainOf(s, 300), s);
    expect(pr.blocks).toBeLessThanOrEqual(1000);
    expect(pr.size).toBe(3);
    // The newest three survive; the first seven are gone.
    expect(pr.overlaps(chainOf(9, 300), 10)).toEqual(new Map([[0, 300]]));
    expect(pr.overlaps(chainOf(6, 300), 10)).toEqual(new Map());
    // A chain longer than the whole budget keeps its leading maxBlocks blocks.
    pr.add(1, chainOf(42, 5000), 11);
    expect(pr.blocks).toBe(1000);
    expect(pr.overlaps(chainOf(42, 5000), 12)).toEqual(new Map([[1, 1000]]));
  });
});
