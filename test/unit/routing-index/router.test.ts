/**
 * Routing alone (src/routing-index/router.ts), over real parts and no RoutingCore: the worker with
 * the longest cached prefix wins, the request's uncached prefill is added as load, the receipt is
 * pending until settled, peek() decides the same with no side effect, exclusions and no-worker.
 */
import { PrefillWatch } from "../../../src/routing-index/prefill-watch.ts";
import { beforeAll, describe, expect, it } from "vitest";
import { Router, type RouterOptions } from "../../../src/routing-index/router.ts";
import { BlockViews } from "../../../src/routing-index/block-views.ts";
import { LoadSync } from "../../../src/routing-index/load-sync.ts";
import { ReceiptBook } from "../../../src/routing-index/receipts.ts";
import { WorkerRegistry } from "../../../src/routing-index/worker-registry.ts";
import { emptyIndexCounters } from "../../../src/routing-index/pool-metrics.ts";
import { LoadTracker } from "../../../src/load/load-tracker.ts";
import { PoolRecorder } from "../../../src/metrics/pool-recorder.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { PrefillRates } from "../../../src/routing-index/prefill-rates.ts";

beforeAll(() => initHashing());

const tokens = Array.from({ length: 40 }, (_, i) => i + 1);
const hashes = () => localBlockHashes(tokens, 4);

function pool(workers: Record<string, number>, opts: Partial<RouterOptions> = {}) {
  const now = opts.now ?? (() => 1_000);
  const registry = new WorkerRegistry(4, now);
  const counters = emptyIndexCounters();
  const views = new BlockViews(registry, counters);
  const load = new LoadTracker();
  const loadSync = new LoadSync(load, registry, true, now);
  const receipts = new ReceiptBook();
  const metrics = new PoolRecorder();
  for (const [id, cachedBlocks] of Object.entries(workers)) {
    const r = registry.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    if (!r.ok) throw new Error(r.reason);
    views.addSlot(r.worker.slot);
    const blocks = hashes().slice(0, cachedBlocks).map((l, i) => ({ h: String(100 + i), p: i === 0 ? null : String(99 + i), l: localHashToHex(l) }));
    views.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks });
  }
  const prefillWatch = new PrefillWatch();
  const router = new Router({ registry, views, load, loadSync, prefillWatch, rates: new PrefillRates(10_000, null), receipts, metrics, counters }, { random: () => 0, cost: "blocks", ...opts, now });
  return { router, registry, views, load, loadSync, prefillWatch, receipts, metrics, counters };
}

describe("Router", () => {
  it("routes to the longest cached prefix and adds only the uncached prefill as load", () => {
    const { router, load, loadSync, counters, registry } = pool({ a: 3, b: 8 });
    const d = router.route({ localHashes: hashes(), isl: 42 })!;
    expect(d).toMatchObject({ workerId: "b", url: "http://b", overlapBlocks: 8, totalBlocks: 10, blockSize: 4 });
    expect(d.receiptId).toMatch(/^r[0-9a-z]+-0$/);
    expect(d.candidates.map((c) => [c.workerId, c.overlapBlocks])).toEqual([["a", 3], ["b", 8]]);
    const slot = registry.slotOf("b");
    expect(load.prefillTokens(slot)).toBe(42 - 8 * 4);
    expect(load.decodeBlocks(slot)).toBe(11); // ceil(42 / 4)
    expect(counters.routed).toBe(1);
    expect(loadSync.takeOps()).toMatchObject([{ op: "add", id: d.receiptId, workerId: "b", prefillTokens: 10, decodeBlocks: 11 }]);
    // The next identical request sees the first one's chain on b as recently routed.
    expect(router.route({ localHashes: hashes(), isl: 42 })!.receiptId).toMatch(/-1$/);
  });

  it("settles a pending receipt once: load freed, receipt with the worker's cached tokens, counters", () => {
    const { router, load, receipts, counters, metrics } = pool({ a: 10 });
    const d = router.route({ localHashes: hashes(), isl: 40, fallbackReason: "no_contract" })!;
    const s = router.settle({ receiptId: d.receiptId, promptTokens: 41, cachedTokens: 36, outcome: "ok", edgeOverheadMs: 3 });
    expect(s.receipt).toEqual({
      receiptId: d.receiptId, workerId: "a", at: 1_000, promptTokens: 41, totalBlocks: 10, predictedOverlapBlocks: 10, blockSize: 4,
      actualCachedTokens: 36, outcome: "ok", fallbackReason: "no_contract", traceId: null,
    });
    expect(s.drift).toBe(false);
    expect(s.released).toBe(true);
    expect(load.size).toBe(0);
    expect(counters.settled).toBe(1);
    expect(receipts.recent()).toHaveLength(1);
    expect(metrics.snapshot().requests["ok"]).toBe(1);
    expect(router.settle({ receiptId: d.receiptId, promptTokens: 41, cachedTokens: 36, outcome: "ok" })).toEqual({ drift: false, receipt: null, released: false });
    expect(counters.settled).toBe(1);
  });

  it("peek decides like route with no load, receipt or counter, and names the ties", () => {
    const { router, load, counters, metrics } = pool({ a: 5, b: 5, c: 1 });
    const p = router.peek({ localHashes: hashes(), isl: 40 });
    expect(p).toMatchObject({ overlapBlocks: 5, totalBlocks: 10, blockSize: 4 });
    expect(p.tiedWith).toHaveLength(1);
    expect([p.workerId, ...p.tiedWith].sort()).toEqual(["a", "b"]);
    expect(load.size + counters.routed).toBe(0);
    expect(metrics.snapshot().recentDecisions).toHaveLength(0);
    expect(router.route({ localHashes: hashes(), isl: 40 })!.workerId).toBe(p.workerId);
  });

  it("excluded and down workers are not candidates; with none left there is no decision", () => {
    const { router, registry, metrics, counters } = pool({ a: 10, b: 0 });
    expect(router.route({ localHashes: hashes(), isl: 40, exclude: ["a"] })!.workerId).toBe("b");
    registry.setStatus("b", "down");
    expect(router.route({ localHashes: hashes(), isl: 40, exclude: ["a"], fallbackReason: "invalid_contract" })).toBeNull();
    expect(router.peek({ localHashes: hashes(), isl: 40, exclude: ["a"] })).toEqual({ workerId: null, overlapBlocks: 0, hostBlocks: 0, totalBlocks: 10, blockSize: 4, candidates: [], tiedWith: [] });
    expect(metrics.snapshot().requests["no_worker"]).toBe(1);
    expect(metrics.snapshot().fallbacks["invalid_contract"]).toBe(1);
    expect(counters.routed).toBe(1);
  });

  it("expires load the edge never settled, once it is older than the tracker's staleMs", () => {
    let t = 1_000;
    const { router, load, counters } = pool({ a: 0 }, { now: () => t });
    router.route({ localHashes: hashes(), isl: 40 });
    t += load.staleMs + 2_000;
    router.route({ localHashes: hashes(), isl: 40 });
    expect(counters.expired).toBe(1);
    expect(load.size).toBe(1);
  });

  it("keeps the request's trace id with its receipt", () => {
    const { router, receipts } = pool({ a: 0 });
    const traced = router.route({ localHashes: hashes(), isl: 40, traceId: "4bf92f3577b34da6a3ce929d0e0e4736" })!;
    const untraced = router.route({ localHashes: hashes(), isl: 40 })!;
    expect(router.settle({ receiptId: traced.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" }).receipt?.traceId).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(router.settle({ receiptId: untraced.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" }).receipt?.traceId).toBeNull();
    expect(receipts.recent().map((r) => r.traceId)).toEqual([null, "4bf92f3577b34da6a3ce929d0e0e4736"]);
  });

  it("keeps at most 10 000 pending receipts, dropping the oldest", () => {
    const { router } = pool({ a: 0 });
    const first = router.route({ localHashes: hashes().slice(0, 1), isl: 4 })!;
    for (let i = 0; i < 10_000; i++) router.route({ localHashes: hashes().slice(0, 1), isl: 4 });
    expect(router.settle({ receiptId: first.receiptId, promptTokens: 4, cachedTokens: 0, outcome: "ok" }).receipt).toBeNull();
  });
});

describe("receipt drift", () => {
  const receipt = (predictedBlocks: number, cached: number) => ({
    receiptId: "r",
    workerId: "w",
    at: 0,
    promptTokens: 1024,
    totalBlocks: 64,
    predictedOverlapBlocks: predictedBlocks,
    blockSize: 16,
    actualCachedTokens: cached,
    outcome: "ok" as const,
    fallbackReason: null,
    traceId: null,
  });

  it("each receipt weighs at most 1 either way, so one cold request cannot mute drift alerting", () => {
    const book = new ReceiptBook();
    book.settle(receipt(0, 304)); // the index knew nothing, the worker had 304 tokens
    expect(book.stats()[0]!.driftEwma).toBe(-1);
    // Then the index over-predicts every time (predicted 32 blocks, nothing cached): drift within a dozen.
    let n = 0;
    while (!book.stats()[0]!.drifting && n < 100) {
      book.settle(receipt(32, 0));
      n++;
    }
    expect(n).toBeLessThanOrEqual(15);
  });
});

