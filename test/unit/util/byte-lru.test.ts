// ByteLru keeps the most recently used entries within its byte budget, with exact accounting,
// checked against a plain model (an array in recency order) over random operation sequences.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ByteLru } from "../../../src/util/byte-lru.ts";

const keysOf = <V>(lru: ByteLru<string, V>, candidates: string[]): string[] => candidates.filter((k) => lru.peek(k) !== undefined);

describe("ByteLru", () => {
  it("evicts the least recently used first; get makes an entry recent, peek does not", () => {
    const evicted: [string, number][] = [];
    const lru = new ByteLru<string, number>(30, (k, v) => evicted.push([k, v]));
    lru.set("a", 1, 10);
    lru.set("b", 2, 10);
    lru.set("c", 3, 10);
    expect(lru.get("a")).toBe(1);
    expect(lru.peek("b")).toBe(2);
    lru.set("d", 4, 10);
    expect(evicted).toEqual([["b", 2]]);
    lru.set("e", 5, 15);
    expect(evicted).toEqual([["b", 2], ["c", 3], ["a", 1]]);
    expect(keysOf(lru, ["a", "b", "c", "d", "e"])).toEqual(["d", "e"]);
    expect([lru.size, lru.bytes, lru.evictions]).toEqual([2, 25, 3]);
  });

  it("a replacement counts only its new bytes and becomes the most recent; delete frees bytes without an eviction", () => {
    const evicted: string[] = [];
    const lru = new ByteLru<string, string>(20, (k) => evicted.push(k));
    lru.set("a", "x", 8);
    lru.set("b", "y", 8);
    lru.set("a", "z", 4);
    expect([lru.size, lru.bytes]).toEqual([2, 12]);
    lru.set("c", "w", 8);
    expect([lru.size, lru.bytes, evicted]).toEqual([3, 20, []]);
    lru.set("d", "v", 1);
    expect(evicted).toEqual(["b"]);
    expect(lru.peek("a")).toBe("z");
    expect(lru.delete("a")).toBe(true);
    expect(lru.delete("a")).toBe(false);
    expect([lru.size, lru.bytes, lru.evictions, evicted]).toEqual([2, 9, 1, ["b"]]);
  });

  it("an entry larger than the whole budget pushes everything out, itself last", () => {
    const evicted: string[] = [];
    const lru = new ByteLru<string, number>(10, (k) => evicted.push(k));
    lru.set("a", 1, 5);
    lru.set("big", 2, 11);
    expect(evicted).toEqual(["a", "big"]);
    expect([lru.size, lru.bytes, lru.get("big")]).toEqual([0, 0, undefined]);
  });

  it("matches a model LRU over random sequences of get, peek, set and delete", () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant("get" as const), key: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ kind: fc.constant("peek" as const), key: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ kind: fc.constant("delete" as const), key: fc.integer({ min: 0, max: 7 }) }),
      fc.record({ kind: fc.constant("set" as const), key: fc.integer({ min: 0, max: 7 }), bytes: fc.integer({ min: 0, max: 40 }) }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100 }), fc.array(op, { maxLength: 60 }), (maxBytes, ops) => {
        const evicted: number[] = [];
        const lru = new ByteLru<number, string>(maxBytes, (k) => evicted.push(k));
        // Least recent first.
        const model: { key: number; value: string; bytes: number }[] = [];
        const modelEvicted: number[] = [];
        ops.forEach((o, step) => {
          const at = model.findIndex((e) => e.key === o.key);
          if (o.kind === "get") {
            expect(lru.get(o.key)).toBe(model[at]?.value);
            if (at >= 0) model.push(...model.splice(at, 1));
          } else if (o.kind === "peek") {
            expect(lru.peek(o.key)).toBe(model[at]?.value);
          } else if (o.kind === "delete") {
            expect(lru.delete(o.key)).toBe(at >= 0);
            if (at >= 0) model.splice(at, 1);
          } else {
            lru.set(o.key, `v${step}`, o.bytes);
            if (at >= 0) model.splice(at, 1);
            model.push({ key: o.key, value: `v${step}`, bytes: o.bytes });
            const sum = () => model.reduce((n, e) => n + e.bytes, 0);
            while (sum() > maxBytes) modelEvicted.push(model.shift()!.key);
          }
          expect(lru.bytes).toBe(model.reduce((n, e) => n + e.bytes, 0));
          expect(lru.bytes).toBeLessThanOrEqual(maxBytes);
          expect(lru.size).toBe(model.length);
          expect(evicted).toEqual(modelEvicted);
          expect(lru.evictions).toBe(modelEvicted.length);
        });
        for (const e of model) expect(lru.peek(e.key)).toBe(e.value);
      }),
      { numRuns: 500 },
    );
  });
});
