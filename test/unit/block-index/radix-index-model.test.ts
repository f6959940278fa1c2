// Differential test: the typed-array index against a tiny model where a block is its path (the
// local hashes from the root) and each worker is two plain collections.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RadixIndex, type ApplyResult } from "../../../src/block-index/radix-index.ts";

type Path = string;
const pathKey = (locals: readonly bigint[]): Path => locals.join(",");
const u64 = (s: string): bigint => BigInt.asUintN(64, BigInt(s));

/** The obviously-correct model: engine hash → path, and the set of paths the worker holds. */
class ModelIndex {
  readonly workers = new Map<number, { eng: Map<bigint, bigint[]>; held: Set<Path> }>();

  ensure(slot: number): void {
    if (!this.workers.has(slot)) this.workers.set(slot, { eng: new Map(), held: new Set() });
  }

  stored(slot: number, parent: string | null, blocks: { h: string; l: bigint }[]): ApplyResult {
    const w = this.workers.get(slot);
    if (!w) return { ok: false, applied: 0, error: "unknown_worker" };
    let base: bigint[] = [];
    if (parent !== null) {
      const p = w.eng.get(u64(parent));
      if (!p) return { ok: false, applied: 0, error: "parent_not_found" };
      base = p;
    }
    for (let i = 0; i < blocks.length; i++) {
      const h = u64(blocks[i]!.h);
      if (parent !== null && h === u64(parent)) return { ok: false, applied: i, error: "self_parent" };
      const path = [...base, blocks[i]!.l];
      const old = w.eng.get(h);
      if (old && pathKey(old) !== pathKey(path)) w.held.delete(pathKey(old));
      w.held.add(pathKey(path));
      w.eng.set(h, path);
      base = path;
    }
    return { ok: true, applied: blocks.length };
  }

  removed(slot: number, hashes: string[]): number {
    const w = this.workers.get(slot);
    if (!w) return 0;
    let n = 0;
    for (const s of hashes) {
      const p = w.eng.get(u64(s));
      if (!p) continue;
      w.eng.delete(u64(s));
      w.held.delete(pathKey(p));
      n++;
    }
    return n;
  }

  clear(slot: number): void {
    const w = this.workers.get(slot);
    if (w) this.workers.set(slot, { eng: new Map(), held: new Set() });
  }

  get size(): number {
    let n = 0;
    for (const w of this.workers.values()) n += w.held.size;
    return n;
  }

  /** Paths that must exist as nodes: held or named by an engine hash, and all their prefixes. */
  get nodeCount(): number {
    const live = new Set<Path>();
    for (const w of this.workers.values()) {
      const paths = [...[...w.held].map((k) => k.split(",").map(BigInt)), ...w.eng.values()];
      for (const p of paths) for (let i = 1; i <= p.length; i++) live.add(pathKey(p.slice(0, i)));
    }
    return live.size;
  }

  match(q: bigint[], slot: number): number {
    const w = this.workers.get(slot);
    if (!w) return 0;
    let k = 0;
    while (k < q.length && w.held.has(pathKey(q.slice(0, k + 1)))) k++;
    return k;
  }
}

// Small universes make aliases, shared prefixes, re-placements and collisions common.
const SLOTS = [0, 1, 2, 31, 33, 70];
const slotArb = fc.constantFrom(...SLOTS);
// Engine hashes, including aliases of the same 64 bits written differently.
const engineArb = fc.constantFrom("1", "2", "3", "4", "5", "-1", "18446744073709551615", "-9223372036854775808", "9223372036854775808", "007", "18446744073709551617");
const localArb = fc.oneof(fc.constantFrom(1n, 2n, 3n), fc.constant(0xffffffff00000001n));
const opArb = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant("stored" as const),
      slot: slotArb,
      parent: fc.option(engineArb, { freq: 2 }),
      blocks: fc.array(fc.record({ h: engineArb, l: localArb }), { minLength: 1, maxLength: 4 }),
      wire: fc.boolean(),
    }),
  },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("removed" as const), slot: slotArb, hashes: fc.array(engineArb, { minLength: 1, maxLength: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("cleared" as const), slot: slotArb }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("dropWorker" as const), slot: slotArb }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("addWorker" as const), slot: slotArb }) },
);
const queryArb = fc.array(localArb, { maxLength: 6 });

describe("RadixIndex matches the path model", () => {
  it("on random event sequences from several workers", () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), fc.array(queryArb, { minLength: 1, maxLength: 6 }), (ops, queries) => {
        const ix = new RadixIndex();
        const model = new ModelIndex();
        for (const s of SLOTS.slice(0, 4)) {
          ix.ensureWorker(s);
          model.ensure(s);
        }
        const scores = new Int32Array(128);
        const check = () => {
          expect(ix.size).toBe(model.size);
          expect(ix.nodeCount).toBe(model.nodeCount);
          for (const s of SLOTS) {
            expect(ix.hasWorker(s)).toBe(model.workers.has(s));
            const w = model.workers.get(s);
            expect(ix.workerBlockCount(s)).toBe(w?.eng.size ?? 0);
            const want = w ? [...w.eng.values()].map((p) => p[p.length - 1]!) : [];
            expect(ix.workerLocalHashes(s).sort()).toEqual(want.sort());
          }
          for (const q of queries) {
            ix.findMatches(q, scores);
            for (const s of SLOTS) expect(scores[s]).toBe(model.match(q, s));
          }
        };
        for (const op of ops) {
          if (op.t === "stored") {
            const want = model.stored(op.slot, op.parent, op.blocks);
            const got = op.wire
              ? ix.applyStoredWire(op.slot, op.parent, op.blocks.map((b) => ({ h: b.h, l: b.l.toString(16).padStart(16, "0") })))
              : ix.applyStored(op.slot, op.parent, op.blocks.map((b) => ({ engineHash: b.h, localHash: b.l })));
            expect(got).toEqual(want);
          } else if (op.t === "removed") {
            expect(ix.applyRemoved(op.slot, op.hashes)).toBe(model.removed(op.slot, op.hashes));
          } else if (op.t === "cleared") {
            ix.clearWorker(op.slot);
            model.clear(op.slot);
          } else if (op.t === "dropWorker") {
            ix.removeWorker(op.slot);
            model.workers.delete(op.slot);
          } else {
            ix.ensureWorker(op.slot);
            model.ensure(op.slot);
          }
          check();
        }
        check();
      }),
      { numRuns: 400 },
    );
  });

  it("keeps the model's answers on long chains after heavy churn", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 40 }), fc.boolean()), { minLength: 1, maxLength: 200, size: "max" }), (steps) => {
        // Workers store prefixes of one long chain of distinct blocks, then evict tails.
        const ix = new RadixIndex();
        const model = new ModelIndex();
        const chain = Array.from({ length: 41 }, (_, i) => ({ h: String(1000 + i), l: BigInt(i * 2654435761) }));
        for (let s = 0; s < 4; s++) {
          ix.ensureWorker(s);
          model.ensure(s);
        }
        for (const [slot, len, evict] of steps) {
          if (evict) {
            const hs = chain.slice(len).map((b) => b.h);
            expect(ix.applyRemoved(slot, hs)).toBe(model.removed(slot, hs));
          } else {
            const blocks = chain.slice(0, len + 1);
            expect(ix.applyStored(slot, null, blocks.map((b) => ({ engineHash: b.h, localHash: b.l })))).toEqual(model.stored(slot, null, blocks));
          }
        }
        const q = chain.map((b) => b.l);
        const scores = new Int32Array(4);
        ix.findMatches(q, scores);
        expect([...scores]).toEqual([0, 1, 2, 3].map((s) => model.match(q, s)));
        expect(ix.size).toBe(model.size);
        expect(ix.nodeCount).toBe(model.nodeCount);
      }),
      { numRuns: 100 },
    );
  });
});

describe("RadixIndex matches the path model at scale", () => {
  it("across several node chunks, with removals, aliases and a mask widening that re-lays out every chunk", () => {
    // 800 chains of 16 blocks (four shared 4-block prefixes) hold ~9 600 nodes: more than one
    // node chunk (8 192 records), so ids in every chunk are created, freed, reused and re-laid out.
    let seed = 0x2545f491;
    const rand = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    const prefixes = Array.from({ length: 4 }, (_, p) => Array.from({ length: 4 }, (_, i) => BigInt(p * 100 + i + 1)));
    let nextEngine = 1;
    let nextLocal = 1n << 40n;
    const chains: { slot: number; blocks: { h: string; l: bigint }[] }[] = [];
    const ix = new RadixIndex();
    const model = new ModelIndex();
    for (const s of [0, 1, 2, 3]) {
      ix.ensureWorker(s);
      model.ensure(s);
    }
    const store = (slot: number): void => {
      const locals = [...prefixes[rand(4)]!, ...Array.from({ length: 12 }, () => nextLocal++)];
      // Engine hashes are fresh per block, so a prefix stored again by one worker is an alias.
      const blocks = locals.map((l) => ({ h: String(nextEngine++ * 7919), l }));
      chains.push({ slot, blocks });
      const wire = blocks.map((b) => ({ h: b.h, l: b.l.toString(16).padStart(16, "0") }));
      expect(ix.applyStoredWire(slot, null, wire)).toEqual(model.stored(slot, null, blocks));
    };
    const evictSome = (count: number): void => {
      for (let k = 0; k < count; k++) {
        const c = chains[rand(chains.length)]!;
        const hs = c.blocks.slice(rand(16)).map((b) => b.h).reverse();
        expect(ix.applyRemoved(c.slot, hs)).toBe(model.removed(c.slot, hs));
      }
    };
    const check = (slots: number[]): void => {
      expect(ix.size).toBe(model.size);
      expect(ix.nodeCount).toBe(model.nodeCount);
      const scores = new Int32Array(128);
      for (const s of slots) {
        const w = model.workers.get(s)!;
        expect(ix.workerBlockCount(s)).toBe(w.eng.size);
        expect(ix.workerLocalHashes(s).sort()).toEqual([...w.eng.values()].map((p) => p[p.length - 1]!).sort());
      }
      for (let k = 0; k < 200; k++) {
        const q = chains[rand(chains.length)]!.blocks.map((b) => b.l);
        ix.findMatches(q, scores);
        for (const s of slots) expect(scores[s]).toBe(model.match(q, s));
      }
    };
    for (let i = 0; i < 800; i++) store(i % 4);
    expect(ix.nodeCount).toBeGreaterThan(8192);
    evictSome(300);
    check([0, 1, 2, 3]);
    ix.ensureWorker(100);
    model.ensure(100);
    for (let i = 0; i < 200; i++) store(i % 2 === 0 ? 100 : rand(4));
    evictSome(200);
    check([0, 1, 2, 3, 100]);
  });
});
