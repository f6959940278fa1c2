import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { PagedRadixCache, type KvEvent } from "../../../services/sglang-sim/radix-cache.ts";

beforeAll(async () => {
  await initHashing();
});

const P = 4;

function seq(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

function recorder(): { events: KvEvent[]; cache: PagedRadixCache } {
  const events: KvEvent[] = [];
  const cache = new PagedRadixCache(P, (e) => events.push(e));
  return { events, cache };
}

/** Applies events the way a relay would and returns hash → {parent, tokens}. */
function replay(events: readonly KvEvent[]): Map<bigint, { parent: bigint | null; tokens: number[] }> {
  const m = new Map<bigint, { parent: bigint | null; tokens: number[] }>();
  for (const e of events) {
    if (e.type === "BlockStored") m.set(e.hash, { parent: e.parent, tokens: e.tokens });
    else if (e.type === "BlockRemoved") for (const h of e.hashes) m.delete(h);
    else m.clear();
  }
  return m;
}

function dumpMap(cache: PagedRadixCache): Map<bigint, { parent: bigint | null; tokens: number[] }> {
  return new Map(cache.dump().map((b) => [b.hash, { parent: b.parent, tokens: b.tokens }]));
}

describe("PagedRadixCache", () => {
  it("truncates keys to whole pages and emits one chained BlockStored per page", () => {
    const { events, cache } = recorder();
    const tokens = seq(100, 10); // 2 full pages + 2 tokens
    const { alreadyCached } = cache.insert(tokens);
    expect(alreadyCached).toBe(0);
    expect(cache.totalTokens).toBe(8);
    const expected = engineBlockHashes(tokens.slice(0, 8), P).hashes;
    expect(events).toEqual([
      { type: "BlockStored", hash: expected[0], parent: null, tokens: seq(100, 4), blockSize: P },
      { type: "BlockStored", hash: expected[1], parent: expected[0], tokens: seq(104, 4), blockSize: P },
    ]);
  });

  it("publishes SGLang's golden hash for tokens [1,2,3,4] at page size 4", () => {
    const events: KvEvent[] = [];
    new PagedRadixCache(4, (e) => events.push(e)).insert([1, 2, 3, 4]);
    expect(events).toEqual([{ type: "BlockStored", hash: -3488128144981237669n, parent: null, tokens: [1, 2, 3, 4], blockSize: 4 }]);
  });

  it("matches whole pages only, and a match never counts a partial page", () => {
    const { cache } = recorder();
    cache.insert(seq(0, 12));
    expect(cache.matchPrefix(seq(0, 12)).length).toBe(12);
    expect(cache.matchPrefix(seq(0, 11)).length).toBe(8);
    expect(cache.matchPrefix(seq(0, 3)).length).toBe(0);
    // Diverging inside the 2nd page: only the first page matches.
    expect(cache.matchPrefix([0, 1, 2, 3, 4, 5, 99, 7, 8]).length).toBe(4);
    expect(cache.matchPrefix([9, 9, 9, 9]).length).toBe(0);
  });

  it("splits a node on a partial match without emitting events, keeping hashes intact", () => {
    const { events, cache } = recorder();
    cache.insert(seq(0, 16));
    expect(cache.nodeCount()).toBe(1);
    const before = events.length;
    const m = cache.matchPrefix(seq(0, 8));
    expect(m.length).toBe(8);
    expect(cache.nodeCount()).toBe(2);
    expect(events.length).toBe(before);
    expect(m.node.hashes).toEqual(engineBlockHashes(seq(0, 8), P).hashes);
    expect(m.node.children.size).toBe(1);
    const lower = [...m.node.children.values()][0]!;
    expect(lower.key).toEqual(seq(8, 8));
    expect(lower.hashes).toEqual(engineBlockHashes(seq(0, 16), P).hashes.slice(2));
    expect(cache.totalTokens).toBe(16);
    expect(replay(events)).toEqual(dumpMap(cache));
  });

  it("a branch continues the SHA-256 chain from its parent's last digest", () => {
    const { events, cache } = recorder();
    const a = [...seq(0, 8), 1, 1, 1, 1];
    const b = [...seq(0, 8), 2, 2, 2, 2];
    cache.insert(a);
    events.length = 0;
    const r = cache.insert(b);
    expect(r.alreadyCached).toBe(8);
    const hb = engineBlockHashes(b, P).hashes;
    expect(events).toEqual([{ type: "BlockStored", hash: hb[2], parent: hb[1], tokens: [2, 2, 2, 2], blockSize: P }]);
    expect(cache.nodeCount()).toBe(3); // shared upper node + two leaves
    expect(cache.matchPrefix(b).length).toBe(12);
    expect(cache.matchPrefix(a).length).toBe(12);
  });

  it("evicts least-recently-used unreferenced leaves, one BlockRemoved per node", () => {
    const { events, cache } = recorder();
    const x = seq(0, 8);
    const y = seq(100, 8);
    const z = seq(200, 4);
    cache.insert(x);
    cache.insert(y);
    cache.insert(z);
    cache.matchPrefix(x); // x is now the most recently used
    events.length = 0;
    const freed = cache.evict(1);
    expect(freed).toBe(8);
    expect(events).toEqual([{ type: "BlockRemoved", hashes: engineBlockHashes(y, P).hashes }]);
    cache.evict(1);
    expect(events[1]).toEqual({ type: "BlockRemoved", hashes: engineBlockHashes(z, P).hashes });
    expect(cache.matchPrefix(x).length).toBe(8);
    expect(cache.totalTokens).toBe(8);
  });

  it("evicts children before their parent and the parent once it became a leaf", () => {
    const { events, cache } = recorder();
    cache.insert([...seq(0, 4), 1, 1, 1, 1]);
    cache.insert([...seq(0, 4), 2, 2, 2, 2]);
    events.length = 0;
    expect(cache.evict(100)).toBe(12);
    expect(events.map((e) => (e.type === "BlockRemoved" ? e.hashes.length : -1))).toEqual([1, 1, 1]);
    // The shared parent page goes last.
    expect(events[2]).toEqual({ type: "BlockRemoved", hashes: engineBlockHashes(seq(0, 4), P).hashes });
    expect(cache.totalTokens).toBe(0);
  });

  it("never evicts nodes held by running requests (lock refs cover ancestors)", () => {
    const { cache } = recorder();
    const held = [...seq(0, 4), 7, 7, 7, 7];
    cache.insert(held);
    cache.insert([...seq(0, 4), 8, 8, 8, 8]);
    cache.insert(seq(500, 8));
    const m = cache.matchPrefix(held);
    cache.incLockRef(m.node);
    expect(cache.protectedTokens).toBe(8);
    cache.evict(1_000);
    expect(cache.totalTokens).toBe(8);
    expect(cache.matchPrefix(held).length).toBe(8);
    cache.decLockRef(m.node);
    expect(cache.protectedTokens).toBe(0);
    expect(cache.evict(1_000)).toBe(8);
    expect(cache.totalTokens).toBe(0);
  });

  it("a split keeps the lock state of the node it splits", () => {
    const { cache } = recorder();
    const m0 = cache.insert(seq(0, 12));
    cache.incLockRef(m0.node);
    cache.matchPrefix(seq(0, 4)); // splits the locked node
    expect(cache.protectedTokens).toBe(12);
    cache.decLockRef(m0.node);
    expect(cache.protectedTokens).toBe(0);
    expect(cache.evict(100)).toBe(12);
  });

  it("reset clears everything with AllBlocksCleared", () => {
    const { events, cache } = recorder();
    cache.insert(seq(0, 8));
    cache.reset();
    expect(events.at(-1)).toEqual({ type: "AllBlocksCleared" });
    expect(cache.dump()).toEqual([]);
    expect(cache.matchPrefix(seq(0, 8)).length).toBe(0);
  });

  it("dump lists parents before children", () => {
    const { cache } = recorder();
    cache.insert(seq(0, 12));
    cache.insert([...seq(0, 4), 5, 5, 5, 5, 6, 6, 6, 6]);
    const seen = new Set<bigint>();
    for (const b of cache.dump()) {
      if (b.parent !== null) expect(seen.has(b.parent)).toBe(true);
      seen.add(b.hash);
    }
    expect(seen.size).toBe(5);
  });

  it("events replayed by a relay always equal the cache's true block set (property)", () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant("insert" as const), tokens: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 24 }) }),
      fc.record({ kind: fc.constant("match" as const), tokens: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 24 }) }),
      fc.record({ kind: fc.constant("evict" as const), n: fc.integer({ min: 1, max: 20 }) }),
      fc.record({ kind: fc.constant("lock" as const), tokens: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 16 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const { events, cache } = recorder();
        const locked: ReturnType<PagedRadixCache["matchPrefix"]>["node"][] = [];
        for (const o of ops) {
          if (o.kind === "insert") cache.insert(o.tokens);
          else if (o.kind === "match") cache.matchPrefix(o.tokens);
          else if (o.kind === "lock") {
            const m = cache.matchPrefix(o.tokens);
            cache.incLockRef(m.node);
            locked.push(m.node);
          } else {
            const before = cache.totalTokens;
            const freed = cache.evict(o.n);
            expect(before - cache.totalTokens).toBe(freed);
          }
          expect(cache.totalTokens).toBe(cache.dump().length * P);
        }
        expect(replay(events)).toEqual(dumpMap(cache));
        // Every cached path hashes like SGLang's chain from the root.
        for (const b of cache.dump()) {
          const path: number[][] = [];
          const byHash = dumpMap(cache);
          for (let h: bigint | null = b.hash; h !== null; h = byHash.get(h)!.parent) path.unshift(byHash.get(h)!.tokens);
          expect(engineBlockHashes(path.flat(), P).hashes.at(-1)).toBe(b.hash);
        }
        for (const n of locked) cache.decLockRef(n);
        expect(cache.protectedTokens).toBe(0);
      }),
      { numRuns: 300 },
    );
  });
});
