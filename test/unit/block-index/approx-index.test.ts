import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { APPROX_DROP_BATCH, ApproxIndex } from "../../../src/block-index/approx-index.ts";
import { HeldTable } from "../../../src/block-index/held-table.ts";
import { RadixIndex } from "../../../src/block-index/radix-index.ts";
import { InternalError } from "../../../src/api/errors.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const B = 4;
const seq = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe("ApproxIndex", () => {
  it("assumes routed blocks cached until the TTL, and a reuse refreshes them", () => {
    const ax = new ApproxIndex({ ttlMs: 1000 });
    const chain = localBlockHashes(seq(1, 40), B); // 10 blocks
    ax.record(3, chain, 0);
    ax.match(chain, 500);
    expect(ax.overlapOf(3)).toBe(10);
    expect(ax.overlapOf(0)).toBe(0);
    // A shorter request sharing the first 4 blocks refreshes only those.
    ax.record(3, chain.slice(0, 4), 900);
    ax.match(chain, 1000); // the 6 un-refreshed blocks expire exactly at 1000
    expect(ax.overlapOf(3)).toBe(4);
    expect(ax.size).toBe(4);
    ax.match(chain, 1899);
    expect(ax.overlapOf(3)).toBe(4);
    ax.match(chain, 1900);
    expect(ax.overlapOf(3)).toBe(0);
    expect(ax.size).toBe(0);
    expect(ax.expired).toBe(10);
  });

  it("counts overlap from the first block only (a shared suffix does not match)", () => {
    const ax = new ApproxIndex();
    const a = localBlockHashes(seq(1, 40), B);
    ax.record(0, a, 0);
    const b = localBlockHashes([...seq(500, 4), ...seq(5, 36)], B); // same blocks 2..10, different first
    ax.match(b, 1);
    expect(ax.overlapOf(0)).toBe(0);
  });

  it("keeps workers apart and clears one worker", () => {
    const ax = new ApproxIndex();
    const a = localBlockHashes(seq(1, 40), B);
    ax.record(0, a.slice(0, 3), 0);
    ax.record(1, a, 0);
    ax.match(a, 1);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([3, 10]);
    ax.clear(1);
    ax.match(a, 2);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([3, 0]);
    expect(ax.size).toBe(3);
  });

  it("prunes to 0.8 × maxBlocks, dropping the earliest-expiring entries first", () => {
    const ax = new ApproxIndex({ ttlMs: 10_000, maxBlocks: 100 });
    const chains = Array.from({ length: 12 }, (_, k) => localBlockHashes(seq(1000 * k + 1, 40), B)); // 10 blocks each
    for (let k = 0; k < 10; k++) ax.record(0, chains[k]!, k); // 100 entries: at the bound, no prune
    expect(ax.size).toBe(100);
    expect(ax.pruned).toBe(0);
    ax.record(0, chains[0]!, 20); // a refresh: chain 0 is now the latest to expire
    ax.record(0, chains[10]!, 21); // 110 > 100 → prune to 80
    expect(ax.size).toBe(80);
    expect(ax.pruned).toBe(30);
    const overlaps = chains.slice(0, 11).map((c) => (ax.match(c, 22), ax.overlapOf(0)));
    // Chains 1..3 expired first (earliest records) and are gone; 0 was refreshed; 4..10 remain.
    expect(overlaps).toEqual([10, 0, 0, 0, 10, 10, 10, 10, 10, 10, 10]);
  });

  it("stays consistent over many refreshes (stale expiry entries)", () => {
    const ax = new ApproxIndex({ ttlMs: 50 });
    const c = localBlockHashes(seq(1, 64), B);
    for (let t = 0; t < 2000; t++) ax.record(t % 4, c.slice(0, 1 + (t % 16)), t);
    ax.match(c, 2000);
    // Worker 3 last saw the chain at t=1999 with 16 blocks (1999 % 16 = 15 → 16 blocks).
    expect(ax.overlapOf(3)).toBe(16);
    ax.match(c, 2100);
    expect(ax.size).toBe(0);
  });
});

describe("ApproxIndex expiry entries", () => {
  it("filters out the entries repeats left stale, keeping each alive one in order", () => {
    const ax = new ApproxIndex({ ttlMs: 1_000_000 });
    const c = localBlockHashes(seq(1, 64), B); // 16 blocks
    const d = localBlockHashes(seq(900, 64), B);
    // Repeats of one chain re-tip its last block: each earlier entry goes stale (far past 1 024 of them).
    for (let t = 0; t < 5000; t++) ax.record(t % 3, t % 500 === 7 ? d : c.slice(0, 8 + (t % 2) * 8), t);
    ax.match(c, 5000);
    expect([ax.overlapOf(0), ax.overlapOf(1), ax.overlapOf(2)]).toEqual([16, 16, 16]);
    // d was last routed to worker 0 at t = 3507, to worker 2 at 4007 and to worker 1 at 4507.
    ax.match(d, 1_003_507);
    expect([ax.overlapOf(0), ax.overlapOf(1), ax.overlapOf(2)]).toEqual([0, 16, 16]);
    ax.match(d, 1_004_007);
    expect([ax.overlapOf(1), ax.overlapOf(2)]).toEqual([16, 0]);
    ax.match(d, 1_004_507);
    expect(ax.overlapOf(1)).toBe(0);
    // c (odd t: 16 blocks, even: its first 8): worker 0 all 16 at 4995 and 8 at 4998; worker 1 all at
    // 4999; worker 2 all at 4997.
    ax.match(c, 1_004_995);
    expect([ax.overlapOf(0), ax.overlapOf(1), ax.overlapOf(2)]).toEqual([8, 16, 16]);
    ax.match(c, 1_004_997);
    expect([ax.overlapOf(0), ax.overlapOf(1), ax.overlapOf(2)]).toEqual([8, 16, 0]);
    ax.match(c, 1_004_998);
    expect([ax.overlapOf(0), ax.overlapOf(1), ax.overlapOf(2)]).toEqual([0, 16, 0]);
    expect(ax.expire(1_004_999)).toBe(16);
    expect(ax.size).toBe(0);
  });
});

describe("ApproxIndex expiry at scale", () => {
  const long = (from: number, blocks: number) => localBlockHashes(seq(from, blocks * B), B);

  it("keeps an alive entry at the queue head through the compaction of stale ones", () => {
    const ax = new ApproxIndex({ ttlMs: 1_000_000 });
    const x = long(50_000, 6);
    const c = long(1, 8);
    ax.record(0, x, 0); // the head entry: alive, never refreshed
    // Each repeat re-tips c's last block: the earlier entry goes stale (compaction past 1 024 + 2 × alive).
    for (let t = 1; t <= 3000; t++) ax.record(1, c, t);
    ax.match(x, 999_999);
    expect(ax.overlapOf(0)).toBe(6);
    ax.match(x, 1_000_000);
    expect(ax.overlapOf(0)).toBe(0);
    expect(ax.size).toBe(8);
    expect(ax.expire(1_003_000)).toBe(8);
  });

  it("drops more blocks of one worker than one tree removal takes, answering as before", () => {
    // Two long routes sharing 1 000 blocks: the first's own 2.5 × APPROX_DROP_BATCH blocks expire while
    // the second's stay (too many alive for a rebuild).
    const own = Math.floor(2.5 * APPROX_DROP_BATCH);
    const shared = long(1, 1000);
    const a = localBlockHashes([...seq(1, 1000 * B), ...seq(10_000_000, own * B)], B);
    const b = localBlockHashes([...seq(1, 1000 * B), ...seq(20_000_000, 3 * own * B)], B);
    const ax = new ApproxIndex({ ttlMs: 100, maxBlocks: 2 ** 20 });
    ax.record(0, a, 0);
    ax.record(0, b, 50);
    expect(ax.size).toBe(1000 + own + 3 * own);
    expect(ax.expire(100)).toBe(own);
    expect(ax.rebuilt).toBe(0);
    ax.match(a, 100);
    expect(ax.overlapOf(0)).toBe(1000);
    ax.match(b, 100);
    expect(ax.overlapOf(0)).toBe(b.length);
    ax.match(shared, 149);
    expect(ax.overlapOf(0)).toBe(1000);
    expect(ax.expire(150)).toBe(1000 + 3 * own);
    expect(ax.rebuilt).toBe(1); // every entry expired: it starts afresh
  });

  it("rebuilds from the alive entries when most blocks expired, answering as before", () => {
    const ax = new ApproxIndex({ ttlMs: 100, maxBlocks: 2 ** 20 });
    const dead = Array.from({ length: 6 }, (_, k) => long(100_000 * (k + 1), 2000));
    const sys = seq(1, 32 * B);
    const alive = [0, 1, 2].map((k) => localBlockHashes([...sys, ...seq(5_000_000 + 100_000 * k, 200 * B)], B));
    dead.forEach((c, k) => ax.record(k % 2, c, k));
    alive.forEach((c, k) => ax.record(k % 2, c, 60 + k)); // slot 0 holds alive[0] and alive[2], sharing 32 blocks
    ax.record(0, alive[0]!.slice(0, 10), 70); // the whole request assumed: it re-tips block 10 of alive[0]
    expect(ax.rebuilt).toBe(0);
    expect(ax.expire(105)).toBe(12_000); // the dead routes expire at 100..105
    expect(ax.rebuilt).toBe(1);
    expect(ax.size).toBe(232 + 232 + 200);
    expect([ax.workerBlockCount(0), ax.workerBlockCount(1)]).toEqual([432, 232]);
    for (const c of dead) {
      ax.match(c, 105);
      expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([0, 0]);
    }
    ax.match(alive[2]!, 105);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([232, 32]);
    // alive[0] expires at 160 but its first 10 blocks live until 170; alive[2] keeps the shared 32 until 162.
    ax.match(alive[0]!, 160);
    expect(ax.overlapOf(0)).toBe(32);
    ax.match(alive[0]!, 162);
    expect(ax.overlapOf(0)).toBe(10);
    expect(ax.size).toBe(10);
    expect(ax.rebuilt).toBe(1); // too few blocks expired at 160 and 162 to rebuild
    ax.match(alive[0]!, 170);
    expect(ax.size).toBe(0);
    expect(ax.rebuilt).toBe(2);
  });
});

// Each guard's failure is injected once into the tree (the bug it stands for), after the tree changed,
// so the tables and queue are out of step with it as a real bug would leave them.
describe("ApproxIndex after an internal error", () => {
  afterEach(() => vi.restoreAllMocks());
  const chain = (from: number, blocks: number) => localBlockHashes(seq(from, blocks * B), B);

  /** The index forgot everything, counted it, answers 0 overlaps and assumes new routes again. */
  function expectFresh(ax: ApproxIndex, forgotten: ReturnType<typeof chain>, now: number): void {
    expect([ax.resets, ax.size, ax.workerBlockCount(0), ax.workerBlockCount(1)]).toEqual([1, 0, 0, 0]);
    ax.match(forgotten, now);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([0, 0]);
    const next = chain(900_000, 30);
    ax.record(1, next, now);
    ax.record(1, forgotten.slice(0, 5), now);
    ax.match(next, now);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([0, 30]);
    ax.match(forgotten, now + 99);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([0, 5]);
    expect(ax.expire(now + 100)).toBe(35);
    expect(ax.resets).toBe(1);
  }

  it("a record whose tree store fails starts afresh, and tells its owner", () => {
    let told = 0;
    const ax = new ApproxIndex({ ttlMs: 100 }, { onReset: () => told++ });
    const a = chain(1, 20);
    ax.record(0, a, 0);
    const store = RadixIndex.prototype.applyStoredIds;
    vi.spyOn(RadixIndex.prototype, "applyStoredIds").mockImplementationOnce(function (this: RadixIndex, ...args) {
      store.apply(this, args);
      return { ok: false, applied: 0, error: "parent_not_found" };
    });
    ax.record(0, chain(1, 40), 10);
    expect(told).toBe(1);
    expectFresh(ax, a, 10);
  });

  it("an expiry whose tree removal fails starts afresh", () => {
    const ax = new ApproxIndex({ ttlMs: 100 });
    const a = chain(1, 20);
    ax.record(0, a, 0);
    ax.record(1, chain(5000, 20), 50);
    vi.spyOn(RadixIndex.prototype, "applyRemovedIds").mockReturnValueOnce(0);
    ax.match(a, 100);
    expect([ax.overlapOf(0), ax.overlapOf(1)]).toEqual([0, 0]);
    expect(ax.rebuilt).toBe(0);
    expectFresh(ax, a, 100);
  });

  it("a rebuild that misses an alive block starts afresh", () => {
    const ax = new ApproxIndex({ ttlMs: 100 }, { rebuildMin: 0 });
    const a = chain(1, 20);
    ax.record(0, a, 0);
    ax.record(1, chain(5000, 2), 50);
    vi.spyOn(RadixIndex.prototype, "localWordsOfIds").mockReturnValueOnce(false);
    expect(ax.expire(100)).toBe(0);
    expect(ax.rebuilt).toBe(0);
    expectFresh(ax, a, 100);
  });

  it("rethrows any other error (a caller's mistake), keeping what it assumed", () => {
    const ax = new ApproxIndex({ ttlMs: 100 });
    const a = chain(1, 20);
    ax.record(0, a, 0);
    expect(() => ax.record(-1, a, 0)).toThrow(RangeError);
    ax.match(a, 0);
    expect([ax.resets, ax.overlapOf(0)]).toEqual([0, 20]);
  });
});

describe("HeldTable", () => {
  it("refuses a block stored twice (an internal error, not a second count)", () => {
    const t = new HeldTable();
    t.insert(5, 7, 0, 0, 0, 1);
    expect(() => t.insert(5, 7, 0, 0, 0, 2)).toThrow(InternalError);
    expect([t.count, t.tips]).toEqual([1, 1]);
  });
});

describe("RoutingCore approximate mode", () => {
  function hello(core: RoutingCore, id: string, kvEvents: boolean) {
    const r = core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents }, id);
    expect(r.ok).toBe(true);
    core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
  }

  it("routes a repeat to the approximate worker it chose, until the TTL passes", () => {
    let now = 0;
    // random 0.99 keeps the first of tied workers (reservoir sampling replaces on random·k < 1).
    const core = new RoutingCore({ blockSize: B, random: () => 0.99, now: () => now, approx: { ttlMs: 120_000 } });
    hello(core, "ev", true);
    hello(core, "ax", false);
    const hashes = localBlockHashes(seq(1, 400), B); // 100 blocks
    now = 1;
    const first = core.route({ localHashes: hashes, isl: 400, exclude: ["ev"] })!;
    expect(first.workerId).toBe("ax");
    expect(first.overlapBlocks).toBe(0);
    core.settle({ receiptId: first.receiptId, promptTokens: 400, cachedTokens: 0, outcome: "ok" });
    expect(core.sizes().assumedBlocks).toBe(100);
    // 60 s later (pending routes last 5 s): only the assumption makes "ax" win over the tie-winner "ev".
    now = 60_000;
    const again = core.route({ localHashes: hashes, isl: 400 })!;
    expect(again.workerId).toBe("ax");
    expect(again.overlapBlocks).toBe(100);
    core.settle({ receiptId: again.receiptId, promptTokens: 400, cachedTokens: 400, outcome: "ok" });
    // The reuse at 60 s refreshed the TTL: still there at 60 s + 119.999 s, gone at 60 s + 120 s.
    now = 60_000 + 119_999;
    expect(core.peek({ localHashes: hashes, isl: 400 }).candidates.find((c) => c.workerId === "ax")!.overlapBlocks).toBe(100);
    now = 60_000 + 120_000;
    const cold = core.peek({ localHashes: hashes, isl: 400 });
    expect(cold.candidates.find((c) => c.workerId === "ax")!.overlapBlocks).toBe(0);
    expect(cold.workerId).toBe("ev");
  });

  it("mixed pool: a worker with events is scored from its events, never from assumptions", () => {
    let now = 0;
    const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => now });
    hello(core, "ev", true);
    hello(core, "ax", false);
    const tokens = seq(1, 80);
    const hashes = localBlockHashes(tokens, B);
    // "ev" reports 8 of the 20 blocks through its relay.
    const blocks = hashes.slice(0, 8).map((l, i) => ({ h: String(100 + i), p: i === 0 ? null : String(99 + i), l: localHashToHex(l) }));
    core.applyDump("ev", { type: "dump", epoch: 1, seq: 0, blocks });
    now = 10;
    const d = core.route({ localHashes: hashes, isl: 80 })!;
    expect(d.workerId).toBe("ev");
    expect(d.overlapBlocks).toBe(8);
    core.settle({ receiptId: d.receiptId, promptTokens: 80, cachedTokens: 32, outcome: "ok" });
    // Routing to "ev" assumed nothing: after the pending window only its events count.
    now = 10_000;
    const view = core.peek({ localHashes: hashes, isl: 80 });
    expect(view.candidates.find((c) => c.workerId === "ev")!.overlapBlocks).toBe(8);
    expect(view.candidates.find((c) => c.workerId === "ax")!.overlapBlocks).toBe(0);
    expect(core.sizes().assumedBlocks).toBe(0);
    // Routing to "ax" (the other is excluded) is remembered for "ax" only.
    const e = core.route({ localHashes: hashes, isl: 80, exclude: ["ev"] })!;
    expect(e.workerId).toBe("ax");
    core.settle({ receiptId: e.receiptId, promptTokens: 80, cachedTokens: 0, outcome: "ok" });
    now = 20_000;
    const v2 = core.peek({ localHashes: hashes, isl: 80 });
    expect(v2.candidates.find((c) => c.workerId === "ax")!.overlapBlocks).toBe(20);
    expect(v2.workerId).toBe("ax");
    // A worker going down forgets what was assumed for it.
    core.setStatus("ax", "down");
    expect(core.sizes().assumedBlocks).toBe(0);
  });
});
