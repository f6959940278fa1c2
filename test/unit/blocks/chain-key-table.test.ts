import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ChainKeyTable } from "../../../src/blocks/chain-key-table.ts";
import { chainKeysOf } from "../../../src/blocks/chain-keys.ts";

/** The plain model: key → (slot → count), and the XOR of the tags given per (key, slot). */
class Model {
  readonly m = new Map<number, Map<number, number>>();
  readonly tags = new Map<string, number>();
  inc(k: number, s: number, tag = 0): void {
    const h = this.m.get(k) ?? new Map<number, number>();
    this.m.set(k, h);
    h.set(s, (h.get(s) ?? 0) + 1);
    this.tags.set(`${k}/${s}`, (this.tags.get(`${k}/${s}`) ?? 0) ^ tag);
  }
  dec(k: number, s: number, tag = 0): void {
    const h = this.m.get(k);
    const c = h?.get(s);
    if (!h || c === undefined) return;
    this.tags.set(`${k}/${s}`, this.tags.get(`${k}/${s}`)! ^ tag);
    if (c > 1) h.set(s, c - 1);
    else (h.delete(s), this.tags.delete(`${k}/${s}`));
    if (h.size === 0) this.m.delete(k);
  }
  count(k: number, s: number): number {
    return this.m.get(k)?.get(s) ?? 0;
  }
  soleTag(k: number, s: number): number {
    return this.count(k, s) === 1 ? this.tags.get(`${k}/${s}`)! : -1;
  }
  holders(k: number): number[] {
    return [...(this.m.get(k)?.keys() ?? [])].sort();
  }
}

/** The slots eachHolder visits for `k`, sorted (empty when none). */
function holdersOf(t: ChainKeyTable, k: number): number[] {
  const slots: number[] = [];
  t.eachHolder(k, (s) => slots.push(s));
  return slots.sort();
}

describe("ChainKeyTable (LoadTracker's shared block keys)", () => {
  // 53-bit keys from a pool small enough to repeat, spread over both 32-bit halves; many keys force growth.
  const key = fc.oneof(fc.integer({ min: 0, max: 40 }).map((i) => i * 2 ** 32 + ((i * 2654435761) >>> 0)), fc.integer({ min: 0, max: 2 ** 53 - 1 }));
  const op = fc.record({ inc: fc.boolean(), k: key, slot: fc.integer({ min: 0, max: 3 }), tag: fc.integer({ min: 0, max: 2 ** 31 - 1 }) });

  it("agrees with a Map model on every operation (counts and sole holders' tags too), including deletions inside probe runs and growth", () => {
    // size "max": fast-check's default size ("small") keeps arrays to ~10 ops, far from the 512 keys that grow the table.
    let mostKeys = 0;
    fc.assert(
      fc.property(fc.array(op, { maxLength: 3000, size: "max" }), (ops) => {
        const t = new ChainKeyTable();
        const m = new Model();
        const seen: number[] = [];
        const held = new Map<string, number[]>();
        for (const o of ops) {
          seen.push(o.k);
          // A dec gives back the tag of a hold taken earlier, as PendingRoutes does.
          const tag = o.inc ? o.tag : (held.get(`${o.k}/${o.slot}`)?.pop() ?? 0);
          if (o.inc) {
            t.inc(o.k, o.slot, tag);
            m.inc(o.k, o.slot, tag);
            held.set(`${o.k}/${o.slot}`, [...(held.get(`${o.k}/${o.slot}`) ?? []), tag]);
          } else {
            t.dec(o.k, o.slot, tag);
            m.dec(o.k, o.slot, tag);
          }
          expect([t.holds(o.k, o.slot), t.countOf(o.k, o.slot), t.soleTag(o.k, o.slot)]).toEqual([
            m.count(o.k, o.slot) > 0,
            m.count(o.k, o.slot),
            m.soleTag(o.k, o.slot),
          ]);
        }
        // One comparison over every key seen (thousands of separate expects would dominate the run time).
        const state = (holders: (k: number) => number[], held: (k: number) => boolean, s3: (k: number, s: number) => [boolean, number, number]) =>
          [...new Set(seen)].map((k) => [k, holders(k), held(k), [0, 1, 2, 3].map((s) => s3(k, s))]);
        expect(state((k) => holdersOf(t, k), (k) => t.eachHolder(k, () => {}), (k, s) => [t.holds(k, s), t.countOf(k, s), t.soleTag(k, s)])).toEqual(
          state((k) => m.holders(k), (k) => m.m.has(k), (k, s) => [m.count(k, s) > 0, m.count(k, s), m.soleTag(k, s)]),
        );
        expect(t.size).toBe(m.m.size);
        mostKeys = Math.max(mostKeys, t.size);
      }),
      // Shrinking a failure that needs growth replays thousands of ops per step: the time limit ends it
      // (failing with the smallest case found so far); a passing run takes a second or two.
      { numRuns: 30, interruptAfterTimeLimit: 20_000 },
    );
    expect(mostKeys).toBeGreaterThan(511); // the table (1 024 slots at first) grew
  }, 30_000);

  it("empties completely after releasing everything it was given", () => {
    const t = new ChainKeyTable();
    const keys = Array.from({ length: 5000 }, (_, i) => (i * 0x9e3779b1) % 2 ** 53);
    for (const k of keys) t.inc(k, k % 3);
    for (const k of keys) t.inc(k, (k + 1) % 3);
    for (const k of keys.reverse()) {
      t.dec(k, k % 3);
      expect(t.holds(k, k % 3)).toBe(false);
      t.dec(k, (k + 1) % 3);
      expect(t.holds(k, (k + 1) % 3)).toBe(false);
      expect(t.eachHolder(k, () => {})).toBe(false);
    }
    expect(t.size).toBe(0);
    expect(holdersOf(t, keys[0]!)).toEqual([]);
  });
});

describe("chainKeysOf", () => {
  it("gives the same keys for an array and a BigUint64Array (the route RPC's shape), also at a byte offset", () => {
    fc.assert(
      fc.property(fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 300 }), fc.nat(5), (hs, skip) => {
        const keys = chainKeysOf(hs.slice(Math.min(skip, hs.length)));
        const big = BigUint64Array.from([...new Array<bigint>(skip).fill(7n), ...hs]);
        expect(chainKeysOf(big.subarray(skip + Math.min(skip, hs.length)))).toEqual(keys);
      }),
    );
  });
});
