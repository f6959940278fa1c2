/**
 * What operators see of one pool, alone (src/routing-index/pool-metrics.ts and cohort.ts): worker
 * rows joining registry, block views and load; the snapshot's counters as a copy; receipts as
 * predicted vs actual tokens; the cohort verdict over the workers that are up.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { emptyIndexCounters, poolMetricsSnapshot, workerRows } from "../../../src/routing-index/pool-metrics.ts";
import { contractDigestOf, poolCohort } from "../../../src/routing-index/cohort.ts";
import { BlockViews } from "../../../src/routing-index/block-views.ts";
import { ReceiptBook } from "../../../src/routing-index/receipts.ts";
import { WorkerRegistry } from "../../../src/routing-index/worker-registry.ts";
import { LoadTracker } from "../../../src/load/load-tracker.ts";
import { PoolRecorder } from "../../../src/metrics/pool-recorder.ts";
import { SGLANG_CONTRACT_KEY, contractDigest } from "../../../src/layout/index.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";
import { PrefillRates } from "../../../src/routing-index/prefill-rates.ts";

beforeAll(() => initHashing());

function parts(contracts: Record<string, unknown>) {
  const registry = new WorkerRegistry(4, () => 77);
  const counters = emptyIndexCounters();
  const views = new BlockViews(registry, counters, { blockBudget: 1000 });
  const load = new LoadTracker();
  for (const [id, contract] of Object.entries(contracts)) {
    const r = registry.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 2, modelName: "m", contract, kvEvents: true }, id);
    if (!r.ok) throw new Error(r.reason);
    views.addSlot(r.worker.slot);
  }
  return { registry, counters, views, load, rates: new PrefillRates(10_000, null), receipts: new ReceiptBook(), metrics: new PoolRecorder() };
}

describe("pool metrics", () => {
  it("a worker row joins its record, the blocks the index holds, its sync state and its load", () => {
    const p = parts({ a: null, b: null });
    const blocks = localBlockHashes(Array.from({ length: 12 }, (_, i) => i), 4).map((l, i) => ({ h: String(i + 1), p: i ? String(i) : null, l: localHashToHex(l) }));
    p.views.applyDump("b", { type: "dump", epoch: 2, seq: 0, blocks });
    p.load.add({ receiptId: "r", slot: p.registry.slotOf("b"), prefillTokens: 30, decodeBlocks: 9, startedAt: 0, prefillDone: false });
    const rows = workerRows(p.registry, p.views, p.load, p.rates, 100);
    expect(rows.map((w) => [w.workerId, w.blocks, w.synced, w.activeRequests])).toEqual([["a", 0, false, 0], ["b", 3, true, 1]]);
    expect(rows[1]).toMatchObject({ url: "http://b", epoch: 2, lastSeen: 77, activePrefillTokens: 30, activeDecodeBlocks: 9, approximate: false, approximateReasons: [], quarantined: false });
    expect(rows[1]).not.toHaveProperty("slot");
  });

  it("the snapshot copies the counters, sizes the budget for the pool's slots, and turns receipts into tokens", () => {
    const p = parts({ a: null });
    p.counters.eventsDropped = 2;
    p.counters.dropReasons["stale_epoch"] = 2;
    p.receipts.settle({ receiptId: "r1", workerId: "a", at: 5, promptTokens: 10, totalBlocks: 3, predictedOverlapBlocks: 3, blockSize: 4, actualCachedTokens: 8, outcome: "ok", fallbackReason: null, traceId: "4bf92f3577b34da6a3ce929d0e0e4736" });
    const s = poolMetricsSnapshot(p, 1234);
    expect(s).toMatchObject({ at: 1234, blockSize: 4, indexedBlocks: 0, blockBudget: p.views.budget.limitFor(1), activeRequests: 0 });
    expect(s.counters).toEqual({ ...emptyIndexCounters(), eventsDropped: 2, dropReasons: { stale_epoch: 2 } });
    p.counters.dropReasons["stale_epoch"] = 9;
    expect(s.counters.dropReasons["stale_epoch"]).toBe(2);
    // Predicted cached tokens are capped by the prompt (3 blocks × 4 > 10 tokens).
    expect(s.recentReceipts).toEqual([{ at: 5, workerId: "a", outcome: "ok", promptTokens: 10, predictedCachedTokens: 10, actualCachedTokens: 8, fallbackReason: null, traceId: "4bf92f3577b34da6a3ce929d0e0e4736" }]);
    expect(s.drift).toEqual([{ workerId: "a", driftEwma: 0.2, drifting: false }]);
    expect(s.cohort).toMatchObject({ state: "no_contract", exactMedia: false });
  });

  it("the cohort: workers that are up agree on one valid contract, or exact media routing is off", () => {
    const published = { [SGLANG_CONTRACT_KEY]: fixtureContract("qwen2_5_vl") };
    const other = { [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") };
    expect(contractDigestOf(published)).toBe(contractDigest(fixtureContract("qwen2_5_vl")));
    expect(contractDigestOf(null)).toBeNull();
    expect(contractDigestOf([published])).toBeNull();
    expect(contractDigestOf({ [SGLANG_CONTRACT_KEY]: { nope: 1 } })).toBeNull();
    expect(poolCohort([{ status: "up", contract: published }, { status: "up", contract: published }])).toMatchObject({ ok: true });
    expect(poolCohort([{ status: "up", contract: published }, { status: "up", contract: other }])).toMatchObject({ ok: false, reason: "contract_disagreement" });
    // A worker that is not up has no say.
    expect(poolCohort([{ status: "up", contract: published }, { status: "down", contract: other }])).toMatchObject({ ok: true });
    expect(poolCohort([{ status: "down", contract: published }])).toMatchObject({ ok: false, reason: "no_contract" });
    const p = parts({ a: published, b: published });
    expect(poolMetricsSnapshot(p, 0).cohort).toMatchObject({ state: "agree", exactMedia: true, digests: 1 });
  });
});
