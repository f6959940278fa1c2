/**
 * The block views alone (src/routing-index/block-views.ts), over a real worker registry: dumps and
 * events into the index, the drops they count, synced vs approximate, the block budget, a relay
 * gone, and each worker's overlap with a request (index, approximate index, recent routes).
 */
import { beforeAll, describe, expect, it } from "vitest";
import { BlockViews, type BlockViewsOptions } from "../../../src/routing-index/block-views.ts";
import { WorkerRegistry } from "../../../src/routing-index/worker-registry.ts";
import { emptyIndexCounters } from "../../../src/routing-index/pool-metrics.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const tokens = Array.from({ length: 40 }, (_, i) => i + 1);
const query = () => localBlockHashes(tokens, 4);

function dumpOf(toks: number[], base: number) {
  return localBlockHashes(toks, 4).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

function setup(opts: BlockViewsOptions = {}, now = () => 1_000) {
  const registry = new WorkerRegistry(4, now);
  const counters = emptyIndexCounters();
  const views = new BlockViews(registry, counters, opts);
  const join = (id: string, kvEvents = true, epoch = 1) => {
    const r = registry.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch, modelName: "m", contract: null, kvEvents }, id);
    if (!r.ok) throw new Error(r.reason);
    if (r.added) views.addSlot(r.worker.slot);
    if (r.newLife) views.resetWorker(r.worker.slot, id);
    return r.worker;
  };
  return { registry, counters, views, join };
}

describe("BlockViews", () => {
  it("drops messages for unknown workers, other epochs and unsynced workers, each counted by reason", () => {
    const { views, counters, join } = setup();
    expect(views.applyDump("ghost", { type: "dump", epoch: 1, seq: 0, blocks: [] })).toEqual({ ok: false, reason: "unknown_worker", resync: false });
    join("a");
    expect(views.applyDump("a", { type: "dump", epoch: 2, seq: 0, blocks: [] })).toEqual({ ok: false, reason: "stale_epoch", resync: false });
    // Events before any dump: the relay must resync.
    expect(views.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "cleared" }] })).toEqual({ ok: false, reason: "not_synced", resync: true });
    expect(counters.dropReasons).toEqual({ unknown_worker: 1, stale_epoch: 1, not_synced: 1 });
    expect(counters.eventsDropped).toBe(3);
    expect(counters.eventsApplied).toBe(0);
  });

  it("a dump syncs the worker and touches it; events then store, remove and clear blocks", () => {
    let t = 1_000;
    const { registry, views, counters, join } = setup({}, () => t);
    const a = join("a");
    t = 2_000;
    expect(views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) })).toEqual({ ok: true });
    expect(registry.get("a")!.lastSeen).toBe(2_000);
    expect(views.isSynced("a") && views.isExact("a")).toBe(true);
    expect(views.index.workerBlockCount(a.slot)).toBe(10);
    expect(counters).toMatchObject({ dumps: 1, blocksStored: 10 });
    const extra = dumpOf([...tokens, 41, 42, 43, 44], 100)[10]!;
    const r = views.applyEvents("a", {
      type: "events", epoch: 1, seq: 1,
      events: [{ t: "stored", parent: "109", blocks: [{ h: "110", l: extra.l }] }, { t: "removed", hashes: ["110", "109"] }],
    });
    expect(r).toEqual({ ok: true });
    expect(counters).toMatchObject({ eventsApplied: 2, blocksStored: 11, blocksRemoved: 2 });
    expect(views.index.workerBlockCount(a.slot)).toBe(9);
    views.applyEvents("a", { type: "events", epoch: 1, seq: 2, events: [{ t: "cleared" }] });
    expect(views.index.workerBlockCount(a.slot)).toBe(0);
  });

  it("a stored chain whose parent the index lacks asks for a resync and unsyncs the worker", () => {
    const { views, counters, join } = setup();
    join("a");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    const b = dumpOf(tokens, 100)[3]!;
    expect(views.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: "555", blocks: [{ h: b.h, l: b.l }] }] })).toEqual({
      ok: false, reason: "parent_not_found", resync: true,
    });
    expect(counters.dropReasons["parent_not_found"]).toBe(1);
    expect(views.isSynced("a")).toBe(false);
  });

  it("a dump beyond the block budget is cut, counted, and makes the worker approximate until one fits", () => {
    const { views, counters, join } = setup({ blockBudget: 6 });
    join("a");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    expect(views.index.size).toBe(6);
    expect(counters.dropReasons["block_budget"]).toBe(4);
    expect(views.isSynced("a")).toBe(true);
    expect(views.isExact("a")).toBe(false);
    expect(views.approximate.reasons("a")[0]).toMatch(/past its share of the index \(6 blocks guaranteed, 6 in the object\): 4 block\(s\) refused/);
    views.applyDump("a", { type: "dump", epoch: 1, seq: 1, blocks: dumpOf(tokens.slice(0, 20), 100) });
    expect(views.isExact("a")).toBe(true);
  });

  it("a relay gone makes a worker with blocks approximate and unsynced; one with none stays exact-but-unsynced", () => {
    const { views, join } = setup();
    join("a");
    join("b");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    views.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    views.relayGone("a");
    views.relayGone("b");
    views.relayGone("ghost");
    expect(views.isSynced("a")).toBe(false);
    expect(views.approximate.reasons("a")).toEqual(["relay disconnected: routing on the index's last copy of its blocks"]);
    expect(views.isSynced("b")).toBe(false);
    expect(views.approximate.has("b")).toBe(false);
  });

  it("overlaps: the index for event workers, routed chains for workers without events, recent routes for all", () => {
    const { views, join } = setup();
    const a = join("a");
    const b = join("b", false);
    const c = join("c");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens.slice(0, 24), 100) });
    views.applyDump("c", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    expect(views.overlaps([a, b, c], query(), 1_000)).toEqual([6, 0, 0]);
    // A route to b (no events): its blocks are assumed cached there; a route to c counts until events arrive.
    views.recordRoute(b, query(), 1_000);
    views.recordRoute(c, query().slice(0, 3), 1_000);
    expect(views.overlaps([a, b, c], query(), 1_001)).toEqual([6, 10, 3]);
    // Recent routes expire (PendingRoutes' TTL); the approximate index keeps b's for much longer.
    expect(views.overlaps([a, b, c], query(), 1_000 + views.pending.ttlMs + 1)).toEqual([6, 10, 0]);
  });

  it("overlaps: a hashes array whose length changed since its walk is walked again, at the same time and generation", () => {
    const { views, join } = setup();
    const a = join("a");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    const q = query();
    expect(views.overlaps([a], q, 1_000)).toEqual([10]);
    q.length = 4; // the caller's rule is not to change it; the guard catches a new length
    expect(views.overlaps([a], q, 1_000)).toEqual([4]);
  });

  it("resetting a worker forgets its blocks, recent routes and approximate reasons; removing frees its slot", () => {
    const { views, join, registry } = setup({ blockBudget: 6 });
    const a = join("a");
    views.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    views.recordRoute(a, query(), 1_000);
    expect(views.approximate.has("a")).toBe(true);
    views.resetWorker(a.slot, "a");
    expect(views.index.workerBlockCount(a.slot)).toBe(0);
    expect(views.approximate.has("a") || views.isSynced("a")).toBe(false);
    expect(views.overlaps([a], query(), 1_001)).toEqual([0]);
    views.applyDump("a", { type: "dump", epoch: 1, seq: 1, blocks: dumpOf(tokens.slice(0, 8), 100) });
    registry.remove("a");
    views.removeWorker(a.slot, "a");
    expect(views.index.size).toBe(0);
    expect(views.isSynced("a")).toBe(false);
  });
});
