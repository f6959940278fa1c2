import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { chainEndOf, RadixIndex } from "../../../src/block-index/radix-index.ts";

const blk = (h: string, l: number) => ({ engineHash: h, localHash: BigInt(l) });
const hex = (l: bigint) => l.toString(16).padStart(16, "0");

describe("RadixIndex", () => {
  it("counts consecutive leading blocks per worker", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    expect(ix.applyStored(0, null, [blk("1", 10), blk("2", 20), blk("3", 30)]).ok).toBe(true);
    expect(ix.applyStored(1, null, [blk("1", 10), blk("9", 21)]).ok).toBe(true);
    const s = new Int32Array(4);
    ix.findMatches([10n, 20n, 30n, 40n], s);
    expect([...s.slice(0, 2)]).toEqual([3, 1]);
    ix.findMatches([11n, 20n], s);
    expect([...s.slice(0, 2)]).toEqual([0, 0]);
    ix.findMatches(new BigUint64Array([10n, 20n, 30n]), s);
    expect([...s.slice(0, 2)]).toEqual([3, 1]);
    ix.findMatches([], s);
    expect([...s]).toEqual([0, 0, 0, 0]);
  });

  it("does not count a block held without its prefix", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    ix.applyStored(0, null, [blk("1", 1), blk("2", 2)]);
    ix.applyStored(1, null, [blk("7", 1)]);
    ix.applyStored(1, "7", [blk("8", 2)]);
    ix.applyRemoved(1, ["7"]);
    const s = new Int32Array(2);
    ix.findMatches([1n, 2n], s);
    expect([...s]).toEqual([2, 0]);
  });

  it("links children through engine parent hashes and rejects unknown parents", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.applyStored(0, null, [blk("5", 5)]);
    expect(ix.applyStored(0, "5", [blk("6", 6)])).toEqual({ ok: true, applied: 1 });
    expect(ix.applyStored(0, "404", [blk("7", 7)])).toMatchObject({ ok: false, error: "parent_not_found" });
    expect(ix.applyStored(0, "6", [blk("9", 9), blk("6", 8)])).toEqual({ ok: false, applied: 1, error: "self_parent" });
    expect(ix.applyStored(3, null, [blk("1", 1)])).toEqual({ ok: false, applied: 0, error: "unknown_worker" });
    expect(ix.size).toBe(3);
    expect(ix.workerBlockCount(0)).toBe(3);
  });

  it("removal and clear prune the tree and the counts", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    ix.applyStored(0, null, [blk("1", 1), blk("2", 2)]);
    ix.applyStored(1, null, [blk("1", 1)]);
    expect(ix.size).toBe(3);
    expect(ix.nodeCount).toBe(2);
    expect(ix.applyRemoved(0, ["2", "12345"])).toBe(1);
    expect(ix.size).toBe(2);
    expect(ix.nodeCount).toBe(1);
    ix.clearWorker(1);
    expect(ix.size).toBe(1);
    ix.clearWorker(0);
    expect(ix.size).toBe(0);
    expect(ix.nodeCount).toBe(0);
    expect(ix.workerBlockCount(0)).toBe(0);
    expect(ix.hasWorker(0)).toBe(true);
    ix.removeWorker(0);
    expect(ix.hasWorker(0)).toBe(false);
  });

  it("wire blocks and dumps parse decimal int64 and hex without BigInt, keyed by the 64-bit value", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    const big = 0xfedcba9876543210n;
    const r = ix.applyStoredWire(0, null, [
      { h: "-9223372036854775808", l: hex(big) },
      { h: "18446744073709551615", l: "0000000000000001" },
    ]);
    expect(r).toEqual({ ok: true, applied: 2 });
    // "-1" is the same engine block as u64 max.
    expect(ix.applyStoredWire(0, "-1", [{ h: "123456789012345678", l: "00000000000000ff" }])).toEqual({ ok: true, applied: 1 });
    const s = new Int32Array(1);
    ix.findMatches([big, 1n, 255n], s);
    expect(s[0]).toBe(3);
    expect(ix.workerEngineHashes(0).sort()).toEqual(["-1", "-9223372036854775808", "123456789012345678"].sort());
    expect(ix.workerLocalHashesHex(0).sort()).toEqual([hex(big), "0000000000000001", "00000000000000ff"].sort());
    expect(ix.workerLocalHashes(0).sort()).toEqual([1n, 255n, big].sort());
    const d = ix.applyDumpWire(0, [
      { h: "9223372036854775807", p: null, l: "00000000000000aa" },
      { h: "42", p: "9223372036854775807", l: "00000000000000bb" },
      { h: "43", p: "999", l: "00000000000000cc" },
      { h: "44", p: "44", l: "00000000000000dd" },
    ]);
    expect(d).toEqual({ applied: 2, failed: 2 });
    ix.findMatches([0xaan, 0xbbn], s);
    expect(s[0]).toBe(2);
    expect(() => ix.applyRemoved(0, ["12a"])).toThrow(RangeError);
    expect(ix.applyRemoved(0, ["18446744073709551616"])).toBe(0); // 2^64 wraps to 0: not held
    expect(() => ix.applyStoredWire(0, null, [{ h: "1", l: "xyz" }])).toThrow(RangeError);
    expect(ix.applyRemoved(0, ["0042", "-0"])).toBe(1);
  });

  it("handles worker slots beyond 64 (the mask widens) and keeps earlier slots intact", () => {
    const ix = new RadixIndex();
    for (const slot of [0, 31, 32, 63]) ix.ensureWorker(slot);
    ix.applyStored(31, null, [blk("1", 1), blk("2", 2)]);
    ix.applyStored(63, null, [blk("1", 1)]);
    ix.ensureWorker(100);
    ix.applyStored(100, null, [blk("1", 1), blk("2", 2), blk("3", 3)]);
    const s = new Int32Array(101);
    ix.findMatches([1n, 2n, 3n], s);
    expect([s[0], s[31], s[32], s[63], s[100]]).toEqual([0, 2, 0, 1, 3]);
    expect(ix.size).toBe(6);
    ix.removeWorker(100);
    expect(ix.size).toBe(3);
    expect(ix.nodeCount).toBe(2);
  });

  it("an engine hash re-stored at another position moves there", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.applyStored(0, null, [blk("1", 1), blk("2", 2)]);
    ix.applyStored(0, null, [blk("2", 9)]);
    const s = new Int32Array(1);
    ix.findMatches([1n, 2n], s);
    expect(s[0]).toBe(1);
    ix.findMatches([9n], s);
    expect(s[0]).toBe(1);
    expect(ix.size).toBe(2);
    expect(ix.nodeCount).toBe(2);
  });

  it("moving an engine hash up onto an ancestor kept only by its child keeps that ancestor", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.applyStored(0, null, [blk("1", 1), blk("2", 2)]);
    ix.applyRemoved(0, ["1"]); // node [1] now lives only because [1,2] is below it
    ix.applyStored(0, null, [blk("2", 1)]); // engine hash 2 moves from [1,2] to [1]
    expect(ix.nodeCount).toBe(1);
    expect(ix.size).toBe(1);
    const s = new Int32Array(1);
    ix.findMatches([1n, 2n], s);
    expect(s[0]).toBe(1);
    ix.applyStored(0, "2", [blk("3", 3)]);
    ix.findMatches([1n, 3n], s);
    expect(s[0]).toBe(2);
  });

  it("grows and shrinks its tables across many blocks", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    const n = 50_000;
    const chain = Array.from({ length: n }, (_, i) => blk(String(i + 1), i * 7919 + 1));
    expect(ix.applyStored(0, null, chain)).toEqual({ ok: true, applied: n });
    ix.applyStored(1, null, chain.slice(0, 100));
    const s = new Int32Array(2);
    ix.findMatches(chain.slice(0, 300).map((b) => b.localHash), s);
    expect([...s]).toEqual([300, 100]);
    const grown = ix.storageBytes();
    expect(ix.applyRemoved(0, chain.slice(n / 2).map((b) => b.engineHash))).toBe(n / 2);
    expect(ix.nodeCount).toBe(n / 2);
    ix.clearWorker(0);
    expect(ix.nodeCount).toBe(100);
    expect(ix.storageBytes()).toBeLessThan(grown);
  });
});

describe("RadixIndex query keys", () => {
  it("chainEndOf after walks of the same hashes (one tree or several, to any depth) equals chainEndOf of a fresh copy", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 100, size: "max" }), fc.array(fc.nat(100), { maxLength: 3 }), fc.array(fc.nat(80), { minLength: 1, maxLength: 4 }), fc.boolean(), (digits, storedDepths, counts, typed) => {
        const locals = digits.map((d) => BigInt.asUintN(64, BigInt(d) * 0x9e3779b97f4a7c15n + 1n));
        const query = typed ? BigUint64Array.from(locals) : [...locals];
        // Trees that hold the query to different depths: walks stop at different blocks.
        const trees = storedDepths.map((depth) => {
          const ix = new RadixIndex();
          ix.ensureWorker(0);
          ix.applyStored(0, null, locals.slice(0, Math.min(depth, locals.length)).map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
          return ix;
        });
        const scores = new Int32Array(64);
        // The reference: computed from the root, with no walk remembered (a walk of nothing forgets it).
        new RadixIndex().findMatchesWords(new Uint32Array(0), 0, scores);
        const lengths = counts.map((c) => 1 + (c % locals.length));
        const expected = lengths.map((count) => chainEndOf([...locals], count));
        for (const ix of trees) ix.findMatches(query, scores);
        expect(lengths.map((count) => chainEndOf(query, count))).toEqual(expected);
        // A walk of other hashes in between: nothing of it is used for these.
        for (const ix of trees) ix.findMatches([...locals].reverse(), scores);
        expect(lengths.map((count) => chainEndOf(query, count))).toEqual(expected);
        // A tree holding the whole chain recognises its end.
        const full = new RadixIndex();
        full.ensureWorker(0);
        full.applyStored(0, null, locals.map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
        full.findMatches(query, scores);
        expect(full.holdsChainEnd(0, chainEndOf(query, locals.length))).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it("an array whose length changed after its walk is not taken for the walked query", () => {
    const locals = Array.from({ length: 10 }, (_, i) => BigInt(i + 1) << 40n);
    const query = [...locals];
    new RadixIndex().findMatches(query, new Int32Array(4));
    // Cut and refilled with other hashes (the caller's rule is not to; the guard catches this much).
    query.length = 3;
    for (let i = 3; i < 8; i++) query.push(BigInt(i + 100) << 40n);
    expect(chainEndOf(query, 8)).toEqual(chainEndOf([...query], 8));
  });

  it("findMatches reads a BigUint64Array view at an offset as the same hashes in an array", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    const locals = Array.from({ length: 12 }, (_, i) => BigInt(i + 1) << 40n);
    ix.applyStored(0, null, locals.slice(3).map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
    const a = new Int32Array(4);
    const b = new Int32Array(4);
    ix.findMatches(BigUint64Array.from(locals).subarray(3), a);
    ix.findMatches(locals.slice(3), b);
    expect([...a]).toEqual([...b]);
    expect(a[0]).toBe(9);
  });
});
