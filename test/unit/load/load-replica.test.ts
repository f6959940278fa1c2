/**
 * Load replication between shard cores: what one shard routes shows up as load in the others,
 * changes decisions there, and is released with it; ids never collide; lag is measured.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { LagWindow, LoadOpBatchSchema, Tombstones } from "../../../src/load/load-replica.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

function shardCore(now: () => number): RoutingCore {
  const core = new RoutingCore({ blockSize: 4, random: () => 0, now, replicateLoad: true });
  for (const id of ["a", "b"]) {
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
  }
  return core;
}

const prompt = (seed: number, n = 64) => Array.from({ length: n }, (_, i) => seed * 1000 + i);

describe("load replication between shards", () => {
  it("a request routed by one shard loads the worker in the other and steers its next cold pick", () => {
    let t = 1_000;
    const s0 = shardCore(() => t);
    const s1 = shardCore(() => t);
    // Cold requests, no cache anywhere: both shards alone would pick the same worker (tie → first).
    const d0 = s0.route({ localHashes: localBlockHashes(prompt(1), 4), isl: 64 })!;
    const alone = new RoutingCore({ blockSize: 4, random: () => 0 });
    for (const id of ["a", "b"]) alone.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    expect(alone.route({ localHashes: localBlockHashes(prompt(2), 4), isl: 64 })!.workerId).toBe(d0.workerId);

    const ops = s0.takeLoadOps();
    expect(ops).toHaveLength(1);
    expect(ops[0]).toMatchObject({ op: "add", id: d0.receiptId, workerId: d0.workerId, prefillTokens: 64, decodeBlocks: 16 });
    expect(s0.takeLoadOps()).toHaveLength(0);
    t += 3;
    expect(s1.applyRemoteLoad(0, ops)).toEqual({ applied: 1, skipped: 0 });
    const w = s1.workers().find((x) => x.workerId === d0.workerId)!;
    expect(w.activeRequests).toBe(1);
    expect(w.activePrefillTokens).toBe(64);
    // With the replica, shard 1 sends its cold request to the other worker.
    const d1 = s1.route({ localHashes: localBlockHashes(prompt(2), 4), isl: 64 })!;
    expect(d1.workerId).not.toBe(d0.workerId);

    // Settling on shard 0 releases the replica on shard 1; shard 1's own request stays.
    s0.settle({ receiptId: d0.receiptId, promptTokens: 64, cachedTokens: 0, outcome: "ok" });
    const rel = s0.takeLoadOps();
    expect(rel).toEqual([{ op: "release", id: d0.receiptId, at: t }]);
    t += 7;
    s1.applyRemoteLoad(0, rel);
    expect(s1.workers().find((x) => x.workerId === d0.workerId)!.activeRequests).toBe(0);
    expect(s1.sizes().activeRequests).toBe(1);
    const stats = s1.loadSyncStats();
    expect(stats).toMatchObject({ opsReceived: 2, opsApplied: 2, opsSkipped: 0 });
    expect(stats.lag).toMatchObject({ samples: 2, maxMs: 7 });
    expect(s0.loadSyncStats()).toMatchObject({ opsSent: 2, batchesSent: 2 });
  });

  it("same receipt id from two shards stays two entries; unknown workers and ids are skipped", () => {
    const s2 = shardCore(() => 5);
    const add = { op: "add" as const, id: "r1-0", workerId: "a", prefillTokens: 8, decodeBlocks: 2, chainKeys: [1, 2], at: 5 };
    s2.applyRemoteLoad(0, [add]);
    s2.applyRemoteLoad(1, [add]);
    expect(s2.sizes().activeRequests).toBe(2);
    expect(s2.workers().find((x) => x.workerId === "a")!.activeRequests).toBe(2);
    // A duplicate delivery does not double the load.
    expect(s2.applyRemoteLoad(0, [add])).toEqual({ applied: 0, skipped: 1 });
    expect(s2.applyRemoteLoad(0, [{ ...add, id: "r2", workerId: "nobody" }])).toEqual({ applied: 0, skipped: 1 });
    expect(s2.applyRemoteLoad(0, [{ op: "release", id: "never-seen", at: 5 }])).toEqual({ applied: 0, skipped: 1 });
    s2.applyRemoteLoad(0, [{ op: "done", id: "r1-0", at: 5 }]);
    expect(s2.workers().find((x) => x.workerId === "a")!.activePrefillTokens).toBe(8); // shard 1's entry still prefilling
    // A worker going down drops its replica load too.
    s2.setStatus("a", "down");
    expect(s2.sizes().activeRequests).toBe(0);
  });

  it("a release that overtakes its add leaves no phantom load; tombstones are bounded", () => {
    const s = shardCore(() => 10);
    const add = { op: "add" as const, id: "r9", workerId: "b", prefillTokens: 100, decodeBlocks: 7, chainKeys: [], at: 9 };
    expect(s.applyRemoteLoad(2, [{ op: "release", id: "r9", at: 9 }])).toEqual({ applied: 0, skipped: 1 });
    expect(s.applyRemoteLoad(2, [add])).toEqual({ applied: 0, skipped: 1 });
    expect(s.sizes().activeRequests).toBe(0);
    // The tombstone is used up: the same id added again later (not a real case, but bounded) counts.
    expect(s.applyRemoteLoad(2, [add])).toEqual({ applied: 1, skipped: 0 });
    const t = new Tombstones(100, 3);
    for (const [id, at] of [["a", 0], ["b", 1], ["c", 2], ["d", 3]] as const) t.add(id, at);
    expect(t.size).toBe(3);
    expect(t.take("a")).toBe(false);
    t.add("e", 150); // b, c, d are older than 100 ms now
    expect(t.size).toBe(1);
    expect(t.take("e")).toBe(true);
  });

  it("without replicateLoad nothing is queued", () => {
    const core = new RoutingCore({ blockSize: 4 });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    const d = core.route({ localHashes: localBlockHashes(prompt(3), 4), isl: 64 })!;
    core.settle({ receiptId: d.receiptId, promptTokens: 64, cachedTokens: 0, outcome: "ok" });
    expect(core.takeLoadOps()).toEqual([]);
  });

  it("the owner hears of queued changes where they are queued: a peek or a workers() read that gives up a watched prefill too", () => {
    let t = 1_000;
    let announced = 0;
    const core = new RoutingCore({ blockSize: 4, random: () => 0, now: () => t, replicateLoad: true, onLoadOps: () => announced++ });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    const watched = core.route({ localHashes: localBlockHashes(prompt(1), 4), isl: 64 })!;
    expect(announced).toBe(1);
    core.route({ localHashes: localBlockHashes(prompt(2), 4), isl: 64 });
    expect(announced).toBe(1); // already pending: one announcement until they are taken
    expect(core.takeLoadOps()).toHaveLength(2);

    // Both prefills are watched; past their deadline (10 s at least) a read with no route or settle gives them up.
    t += 60_000;
    core.peek({ localHashes: localBlockHashes(prompt(3), 4), isl: 64 });
    expect(announced).toBe(2);
    expect(core.takeLoadOps()).toMatchObject([{ op: "done", id: watched.receiptId }, { op: "done" }]);
    const third = core.route({ localHashes: localBlockHashes(prompt(4), 4), isl: 64 })!;
    expect(announced).toBe(3);
    core.takeLoadOps();
    t += 60_000;
    core.workers();
    expect(announced).toBe(4);
    expect(core.takeLoadOps()).toMatchObject([{ op: "done", id: third.receiptId }]);

    // A shard that does not replicate queues nothing and announces nothing.
    let silent = 0;
    const alone = new RoutingCore({ blockSize: 4, onLoadOps: () => silent++ });
    alone.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    alone.route({ localHashes: localBlockHashes(prompt(5), 4), isl: 64 });
    expect(silent).toBe(0);
  });

  it("batch schema refuses bad shapes; lag window keeps quantiles over its last samples", () => {
    expect(LoadOpBatchSchema.safeParse({ from: 0, ops: [{ op: "add", id: "x", workerId: "a", prefillTokens: -1, decodeBlocks: 0, chainKeys: [], at: 0 }] }).success).toBe(false);
    expect(LoadOpBatchSchema.safeParse({ from: 2000, ops: [] }).success).toBe(false);
    expect(LoadOpBatchSchema.safeParse({ from: 1, ops: [{ op: "done", id: "x", at: 1 }] }).success).toBe(true);
    const w = new LagWindow(4);
    expect(w.summary()).toEqual({ samples: 0, p50Ms: null, p99Ms: null, maxMs: null });
    for (const ms of [100, 1, 2, 3, 4]) w.record(ms);
    expect(w.summary()).toEqual({ samples: 4, p50Ms: 2, p99Ms: 4, maxMs: 4 });
  });
});
