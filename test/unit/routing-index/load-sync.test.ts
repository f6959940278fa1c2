/**
 * The pool's load as one object changes it, and its replication between shards, alone
 * (src/routing-index/load-sync.ts) over a real LoadTracker and worker registry: what is queued for
 * the peers, what a peer's ops do here (namespaced ids, skips, tombstones), and the stats.
 */
import { describe, expect, it } from "vitest";
import { LoadSync } from "../../../src/routing-index/load-sync.ts";
import { WorkerRegistry } from "../../../src/routing-index/worker-registry.ts";
import { LoadTracker } from "../../../src/load/load-tracker.ts";
import { replicaReceiptId } from "../../../src/load/load-replica.ts";

function setup(replicate: boolean, now: () => number = () => 50) {
  const registry = new WorkerRegistry(4, now);
  for (const id of ["a", "b"]) registry.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
  const load = new LoadTracker();
  return { registry, load, sync: new LoadSync(load, registry, replicate, now) };
}

const request = (receiptId: string, slot: number) => ({ receiptId, slot, prefillTokens: 40, decodeBlocks: 12, chainKeys: [7, 8, 9], startedAt: 20, prefillDone: false });

describe("LoadSync", () => {
  it("applies local adds and releases to the tracker and queues them for the peers, in order", () => {
    const { load, sync } = setup(true);
    sync.add(request("r1", 1), "b");
    expect(load.prefillTokens(1)).toBe(40);
    expect(load.decodeBlocks(1)).toBe(12);
    expect(sync.pendingOps).toBe(1);
    expect(sync.release("r1")).toMatchObject({ receiptId: "r1", slot: 1 });
    expect(sync.release("r1")).toBeUndefined(); // a second release is not queued again
    expect(load.size).toBe(0);
    expect(sync.takeOps()).toEqual([
      { op: "add", id: "r1", workerId: "b", prefillTokens: 40, decodeBlocks: 12, chainKeys: [7, 8, 9], at: 20 },
      { op: "release", id: "r1", at: 50 },
    ]);
    expect(sync.takeOps()).toEqual([]);
    expect(sync.stats()).toMatchObject({ opsSent: 2, batchesSent: 1 });
  });

  it("a stream's first output (prefill done) goes to the peers once, so they stop counting its prefill", () => {
    const { load, sync } = setup(true);
    sync.add(request("r2", 0), "a");
    sync.takeOps();
    sync.markPrefillDone("r2");
    sync.markPrefillDone("r2"); // a second mark is not queued again
    expect(load.prefillTokens(0)).toBe(0);
    expect(sync.takeOps()).toEqual([{ op: "done", id: "r2", at: 50 }]);
  });

  it("queues nothing when the pool is not sharded, but still moves the load", () => {
    const { load, sync } = setup(false);
    sync.add(request("r1", 0), "a");
    sync.markPrefillDone("r1");
    expect(load.prefillTokens(0)).toBe(0);
    expect(load.decodeBlocks(0)).toBe(12);
    sync.release("r1");
    expect(sync.pendingOps).toBe(0);
    expect(sync.takeOps()).toEqual([]);
    expect(sync.stats()).toMatchObject({ opsSent: 0, batchesSent: 0 });
  });

  it("a peer's ops land under ids namespaced by its shard, on the worker's slot here", () => {
    const { load, sync } = setup(true);
    const add = { op: "add" as const, id: "r1", workerId: "b", prefillTokens: 16, decodeBlocks: 4, chainKeys: [1], at: 45 };
    expect(sync.applyRemote(3, [add])).toEqual({ applied: 1, skipped: 0 });
    expect(load.get(replicaReceiptId(3, "r1"))).toMatchObject({ slot: 1, prefillTokens: 16, startedAt: 50 });
    expect(load.get("r1")).toBeUndefined();
    // The same op from another shard is another request; a duplicate delivery is skipped.
    expect(sync.applyRemote(4, [add])).toEqual({ applied: 1, skipped: 0 });
    expect(sync.applyRemote(3, [add])).toEqual({ applied: 0, skipped: 1 });
    expect(sync.applyRemote(3, [{ op: "done", id: "r1", at: 48 }, { op: "done", id: "nope", at: 48 }])).toEqual({ applied: 1, skipped: 1 });
    expect(load.prefillTokens(1)).toBe(16); // shard 4's copy still prefilling
    expect(sync.applyRemote(3, [{ op: "release", id: "r1", at: 49 }])).toEqual({ applied: 1, skipped: 0 });
    expect(load.size).toBe(1);
    // Remote changes are never sent on.
    expect(sync.pendingOps).toBe(0);
    expect(sync.stats()).toMatchObject({ opsReceived: 6, opsApplied: 4, opsSkipped: 2, lag: { samples: 6, maxMs: 5 } });
  });

  it("skips adds for unknown or down workers, and an add whose release came first", () => {
    const { registry, load, sync } = setup(true);
    const add = { op: "add" as const, id: "r1", workerId: "a", prefillTokens: 16, decodeBlocks: 4, chainKeys: [], at: 50 };
    expect(sync.applyRemote(0, [{ ...add, workerId: "ghost" }])).toEqual({ applied: 0, skipped: 1 });
    registry.setStatus("b", "down");
    expect(sync.applyRemote(0, [{ ...add, workerId: "b" }])).toEqual({ applied: 0, skipped: 1 });
    expect(sync.applyRemote(0, [{ op: "release", id: "r1", at: 50 }, add])).toEqual({ applied: 0, skipped: 2 });
    expect(load.size).toBe(0);
  });

  it("counts batches that could not be delivered", () => {
    const { sync } = setup(true);
    sync.sendFailed();
    sync.sendFailed();
    expect(sync.stats().sendFailures).toBe(2);
  });
});
