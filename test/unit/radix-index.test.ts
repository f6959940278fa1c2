import { describe, expect, it } from "vitest";
import { RadixIndex } from "../../src/kv/radix-index.ts";

const blk = (h: string, l: number) => ({ engineHash: h, localHash: BigInt(l) });

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
  });

  it("does not count a block held without its prefix", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    ix.applyStored(0, null, [blk("a", 1), blk("b", 2)]);
    ix.applyStored(1, null, [blk("x", 1)]);
    ix.applyStored(1, "x", [blk("y", 2)]);
    ix.applyRemoved(1, ["x"]);
    const s = new Int32Array(2);
    ix.findMatches([1n, 2n], s);
    expect([...s]).toEqual([2, 0]);
  });

  it("links children through engine parent hashes and rejects unknown parents", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.applyStored(0, null, [blk("p", 5)]);
    expect(ix.applyStored(0, "p", [blk("c", 6)])).toEqual({ ok: true, applied: 1 });
    expect(ix.applyStored(0, "nope", [blk("d", 7)])).toMatchObject({ ok: false, error: "parent_not_found" });
    expect(ix.applyStored(0, "c", [blk("c", 8)])).toMatchObject({ ok: false, error: "self_parent" });
    expect(ix.size).toBe(2);
  });

  it("removal and clear prune the tree and the counts", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    ix.applyStored(0, null, [blk("1", 1), blk("2", 2)]);
    ix.applyStored(1, null, [blk("1", 1)]);
    expect(ix.size).toBe(3);
    expect(ix.applyRemoved(0, ["2", "unknown"])).toBe(1);
    expect(ix.size).toBe(2);
    ix.clearWorker(1);
    expect(ix.size).toBe(1);
    ix.clearWorker(0);
    expect(ix.size).toBe(0);
    expect(ix.root.children).toBeNull();
  });
});
