// HeldChains counts each node once while a kept entry's chain includes it and evicts the least
// recently used entries until the sizes fit, checked against a plain model (kept entries in
// recency order, sizes summed over the union of their chains) over random operation sequences;
// dropWhere drops exactly the entries it picks.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HeldChains, type HeldNode } from "../../../src/util/held-chains.ts";

interface TestNode extends HeldNode<TestNode> {
  name: string;
}

const node = (name: string, parent: TestNode | null, bytes: number, tokens?: number): TestNode => ({ name, parent, holders: 0, bytes, ...(tokens !== undefined ? { tokens } : {}) });

describe("HeldChains", () => {
  it("a shared parent counts once and stops counting when the last entry holding it goes", () => {
    const dropped: string[] = [];
    const held = new HeldChains<TestNode>({ maxBytes: 1000, onDrop: (n) => dropped.push(n.name) });
    const root = node("root", null, 100);
    const a = node("a", root, 10);
    const b = node("b", root, 20);
    held.keep(root);
    held.keep(a);
    held.keep(b);
    expect([held.entries, held.bytes, root.holders]).toEqual([3, 130, 3]);
    expect(held.drop(root)).toBe(true);
    expect(held.drop(root)).toBe(false);
    expect([held.entries, held.bytes, root.holders]).toEqual([2, 130, 2]);
    held.drop(a);
    expect(held.bytes).toBe(120);
    held.drop(b);
    expect([held.entries, held.bytes, root.holders, dropped]).toEqual([0, 0, 0, ["root", "a", "b"]]);
    expect(held.evictions).toBe(0);
  });

  it("evicts least recently used first, the newest last when its own chain is over the budget", () => {
    const dropped: string[] = [];
    const held = new HeldChains<TestNode>({ maxBytes: 100, onDrop: (n) => dropped.push(n.name) });
    const a = node("a", null, 40);
    const b = node("b", null, 40);
    held.keep(a);
    held.keep(b);
    held.touch(a);
    const c = node("c", b, 30);
    held.keep(c);
    held.evictOverBudget();
    // b is the oldest but c still holds it: dropping b frees nothing, then a goes.
    expect([dropped, held.bytes, held.evictions]).toEqual([["b", "a"], 70, 2]);
    const big = node("big", c, 50);
    held.keep(big);
    held.evictOverBudget();
    expect([dropped, held.entries, held.bytes, held.evictions]).toEqual([["b", "a", "c", "big"], 0, 0, 4]);
  });

  it("dropWhere drops the kept entries it picks, not counted as evictions, and frees what none other holds", () => {
    const dropped: string[] = [];
    const held = new HeldChains<TestNode>({ maxBytes: 1000, onDrop: (n) => dropped.push(n.name) });
    const root = node("root", null, 100);
    const bad = node("bad", root, 10);
    const child = node("child", bad, 5);
    const other = node("other", root, 20);
    for (const n of [root, bad, child, other]) held.keep(n);
    const holdsBad = (n: TestNode) => {
      for (let x: TestNode | null = n; x; x = x.parent) if (x === bad) return true;
      return false;
    };
    expect(held.dropWhere(holdsBad)).toBe(2);
    expect([dropped, held.entries, held.bytes, held.evictions]).toEqual([["bad", "child"], 2, 120, 0]);
    expect(held.dropWhere(holdsBad)).toBe(0);
  });

  it("touch does not keep a dropped entry again", () => {
    const held = new HeldChains<TestNode>({ maxBytes: 100, onDrop: () => {} });
    const a = node("a", null, 10);
    const b = node("b", a, 10);
    held.keep(a);
    held.keep(b);
    held.drop(a);
    held.touch(a);
    expect([held.entries, held.bytes, a.holders]).toEqual([1, 20, 1]);
  });

  it("grows a node's sizes, counted at once only while it is held; tokens bound too", () => {
    const dropped: string[] = [];
    const held = new HeldChains<TestNode>({ maxBytes: 1000, maxTokens: 50, onDrop: (n) => dropped.push(n.name) });
    const a = node("a", null, 10, 20);
    const b = node("b", null, 10, 20);
    held.keep(a);
    held.keep(b);
    held.grow(a, 5, 5);
    expect([held.bytes, held.tokens, a.bytes, a.tokens]).toEqual([25, 45, 15, 25]);
    held.evictOverBudget();
    expect(dropped).toEqual([]);
    held.grow(b, 0, 10);
    held.evictOverBudget();
    expect([dropped, held.bytes, held.tokens]).toEqual([["a"], 10, 30]);
    held.grow(a, 100, 100);
    expect([held.bytes, held.tokens, a.bytes, a.tokens]).toEqual([10, 30, 115, 125]);
    expect(held.admits(250)).toBe(true);
    expect(held.admits(251)).toBe(false);
    held.clear();
    expect([held.entries, held.bytes, held.tokens, held.evictions]).toEqual([0, 0, 0, 0]);
  });

  it("matches a model over random operations", () => {
    type Op =
      | { kind: "add"; parent: number; bytes: number; tokens: number }
      | { kind: "touch" | "drop"; at: number }
      | { kind: "grow"; at: number; bytes: number; tokens: number };
    const op = fc.oneof(
      { weight: 4, arbitrary: fc.record({ kind: fc.constant("add" as const), parent: fc.nat(40), bytes: fc.nat(60), tokens: fc.nat(30) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constantFrom("touch" as const, "drop" as const), at: fc.nat(40) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant("grow" as const), at: fc.nat(40), bytes: fc.nat(30), tokens: fc.nat(10) }) },
    );
    fc.assert(
      fc.property(fc.integer({ min: 20, max: 400 }), fc.option(fc.integer({ min: 10, max: 200 }), { nil: undefined }), fc.array(op, { maxLength: 120 }), (maxBytes, maxTokens, ops) => {
        const dropped: TestNode[] = [];
        const held = new HeldChains<TestNode>({ maxBytes, ...(maxTokens !== undefined ? { maxTokens } : {}), onDrop: (n) => dropped.push(n) });
        const nodes: TestNode[] = [];
        // The model: kept entries, least recently used first, and their evictions.
        let kept: TestNode[] = [];
        const modelDropped: TestNode[] = [];
        let evictions = 0;
        const sizes = () => {
          const counted = new Set<TestNode>();
          for (const e of kept) for (let x: TestNode | null = e; x; x = x.parent) counted.add(x);
          let bytes = 0;
          let tokens = 0;
          for (const x of counted) {
            bytes += x.bytes;
            tokens += x.tokens ?? 0;
          }
          return { bytes, tokens, counted };
        };
        const modelDrop = (n: TestNode) => {
          kept = kept.filter((e) => e !== n);
          modelDropped.push(n);
        };
        const modelEvict = () => {
          for (;;) {
            const s = sizes();
            if (s.bytes <= maxBytes && s.tokens <= (maxTokens ?? Infinity)) return;
            modelDrop(kept[0]!);
            evictions++;
          }
        };
        for (const o of ops) {
          if (o.kind === "add") {
            const n = node(`n${nodes.length}`, o.parent < nodes.length ? nodes[o.parent]! : null, o.bytes, o.tokens);
            nodes.push(n);
            held.keep(n);
            kept.push(n);
            held.evictOverBudget();
            modelEvict();
          } else if (nodes.length > 0) {
            const n = nodes[o.at % nodes.length]!;
            if (o.kind === "touch") {
              held.touch(n);
              if (kept.includes(n)) kept = [...kept.filter((e) => e !== n), n];
            } else if (o.kind === "drop") {
              expect(held.drop(n)).toBe(kept.includes(n));
              if (kept.includes(n)) modelDrop(n);
            } else if (o.kind === "grow") {
              held.grow(n, o.bytes, o.tokens);
              held.evictOverBudget();
              modelEvict();
            }
          }
          const s = sizes();
          expect([held.entries, held.bytes, held.tokens, held.evictions]).toEqual([kept.length, s.bytes, s.tokens, evictions]);
          expect(dropped).toEqual(modelDropped);
          // Held along the tree: itself while kept, plus each child that counts.
          for (const x of nodes) expect(x.holders).toBe((kept.includes(x) ? 1 : 0) + nodes.filter((c) => c.parent === x && s.counted.has(c)).length);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("keeping or dropping an entry reads only the nodes that start or stop counting, not a long chain above them", () => {
    const held = new HeldChains<TestNode>({ maxBytes: 1e9, onDrop: () => {} });
    let reads = 0;
    // A node whose parent link counts its reads.
    const counted = (name: string, parent: TestNode | null): TestNode => {
      const n = { name, holders: 0, bytes: 1 } as TestNode;
      Object.defineProperty(n, "parent", { get: () => (reads++, parent) });
      return n;
    };
    let tip: TestNode | null = null;
    for (let i = 0; i < 1000; i++) {
      tip = counted(`turn ${i}`, tip);
      held.keep(tip);
    }
    reads = 0;
    const leaf = counted("leaf", tip);
    held.keep(leaf);
    held.drop(leaf);
    held.drop(tip!);
    expect(reads, "parent links read").toBeLessThanOrEqual(4);
    expect([held.entries, held.bytes]).toEqual([999, 999]);
  });
});
