// The simulated encoder's embedding cache holds `capacity` items, the least recently used going first.
import { beforeAll, describe, expect, it } from "vitest";
import { EncoderCache } from "../../../services/sglang-sim/encoder.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const item = (c: string): Uint8Array => new TextEncoder().encode(`image bytes ${c}`);

describe("EncoderCache", () => {
  it("keeps the `capacity` most recently used items", () => {
    const cache = new EncoderCache(2);
    const hit = (c: string): boolean => cache.encode(item(c), true).cacheHit;
    expect([hit("a"), hit("b"), hit("a"), hit("c")]).toEqual([false, false, true, false]);
    // "b" was the least recently used when "c" came; then "c" when "b" came back.
    expect([hit("a"), hit("b"), hit("c")]).toEqual([true, false, false]);
    expect(cache.stats()).toEqual({ hits: 2, misses: 5, entries: 2 });
  });

  it("without the cache, nothing is kept or counted", () => {
    const cache = new EncoderCache(2);
    expect(cache.encode(item("a"), false)).toEqual(cache.encode(item("a"), false));
    expect(cache.stats()).toEqual({ hits: 0, misses: 0, entries: 0 });
  });
});
