import { describe, expect, it } from "vitest";
import { mergeShardSnapshots, mergeShardWorkers } from "../../../src/metrics/merge-shards.ts";
import { PoolRecorder, type RoutedInput, type SettledInput } from "../../../src/metrics/pool-recorder.ts";
import { cohortOf, type IndexCounters, type PoolMetricsSnapshot, type WorkerView } from "../../../src/metrics/pool-snapshot.ts";
import { renderMetrics } from "../../../src/metrics/pool-families.ts";
import { SERIES_CAPACITY } from "../../../src/metrics/time-series.ts";
import { parsePrometheusText, sampleValue } from "../../helpers/prom-parser.ts";

const CANDS = [
  { workerId: "a", overlapBlocks: 3, cost: 10 },
  { workerId: "b", overlapBlocks: 0, cost: 20 },
];

function route(r: PoolRecorder, at: number, workerId: string, over: Partial<RoutedInput> = {}): void {
  r.routed({ at, receiptId: `r${at}`, workerId, overlapBlocks: 2, totalBlocks: 4, isl: 64, fallbackReason: null, retry: false, candidates: CANDS, ...over });
}

function settle(r: PoolRecorder, now: number, workerId: string, over: Partial<SettledInput> = {}): void {
  r.settled({ workerId, outcome: "ok", promptTokens: 64, predictedOverlapBlocks: 2, blockSize: 16, actualCachedTokens: 16, retrying: false, edgeOverheadMs: 3, ...over }, now);
}

function worker(workerId: string, over: Partial<WorkerView> = {}): WorkerView {
  return {
    workerId,
    url: `http://${workerId}`,
    status: "up",
    blocks: 0,
    synced: true,
    approximate: false,
    approximateReasons: [],
    quarantined: false,
    cacheFull: false,
    activeRequests: 0,
    activePrefillTokens: 0,
    activeDecodeBlocks: 0,
    contractDigest: null,
    kvEvents: true,
    epoch: 1,
    lastSeen: 1_700_000_000_000,
    ...over,
  };
}

function counters(over: Partial<IndexCounters> = {}): IndexCounters {
  return { eventsApplied: 0, blocksStored: 0, blocksRemoved: 0, eventsDropped: 0, dropReasons: {}, dumps: 0, routed: 0, settled: 0, expired: 0, receiptsRejected: 0, approxResets: 0, ...over };
}

/** A shard's snapshot around a real recorder; the index parts are what each shard would report. */
function shard(recorder: PoolRecorder, over: Partial<PoolMetricsSnapshot> = {}): PoolMetricsSnapshot {
  const workers = over.workers ?? [worker("a"), worker("b")];
  return {
    at: 1_700_000_000_000,
    blockSize: 16,
    indexedBlocks: 0,
    blockBudget: 600_000,
    activeRequests: 0,
    counters: counters(),
    workers,
    drift: [],
    cohort: cohortOf(workers, { ok: false, reason: "no_contract" }),
    recentReceipts: [],
    recorder: recorder.snapshot(),
    ...over,
  };
}

/** Three shards' recorders and one reference recorder that saw every shard's traffic. */
function traffic() {
  const recs = [new PoolRecorder(), new PoolRecorder(), new PoolRecorder()];
  const all = new PoolRecorder();
  const both = (i: number, f: (r: PoolRecorder) => void) => {
    f(recs[i]!);
    f(all);
  };
  both(0, (r) => route(r, 1_000, "a"));
  both(1, (r) => route(r, 2_000, "b", { fallbackReason: "media_layout_unavailable", overlapBlocks: 0, totalBlocks: 8 }));
  both(2, (r) => route(r, 3_000, "a", { retry: true, overlapBlocks: 4, totalBlocks: 4 }));
  both(0, (r) => route(r, 4_000, "b", { fallbackReason: "audio", overlapBlocks: 1, totalBlocks: 300 }));
  both(1, (r) => r.noWorker("audio"));
  both(0, (r) => settle(r, 10_000, "a"));
  both(1, (r) => settle(r, 10_500, "b", { outcome: "error", edgeOverheadMs: 40 }));
  both(2, (r) => settle(r, 20_000, "a", { actualCachedTokens: null }));
  both(2, (r) => settle(r, 21_000, "a", { promptTokens: 100, predictedOverlapBlocks: 10, actualCachedTokens: 80, edgeOverheadMs: 700 }));
  both(1, (r) => settle(r, 30_000, "b", { outcome: "error", retrying: true, edgeOverheadMs: null }));
  return { recs, all };
}

describe("mergeShardSnapshots", () => {
  it("returns a single snapshot unchanged and refuses none", () => {
    const r = new PoolRecorder();
    route(r, 1, "a");
    settle(r, 5, "a");
    const s = shard(r, { indexedBlocks: 7, drift: [{ workerId: "a", driftEwma: 0.2, drifting: false }] });
    const copy = structuredClone(s);
    expect(mergeShardSnapshots([s])).toEqual(copy);
    expect(() => mergeShardSnapshots([])).toThrow(Error);
  });

  it("recorder data merges to what one recorder seeing all shards' traffic reports", () => {
    const { recs, all } = traffic();
    const merged = mergeShardSnapshots(recs.map((r) => shard(r)));
    const ref = all.snapshot();
    // Lists are capped at what one index keeps, so the merge equals one recorder seeing everything.
    expect(merged.recorder).toEqual(ref);
    // Spot-check the sums explicitly, so the test does not only rest on the reference recorder.
    const m = merged.recorder;
    expect(m.requests).toEqual({ ok: 3, error: 1, cancelled: 0, no_worker: 1 });
    expect(m.decisions).toEqual({ a: { exact: 2, text_prefix: 0 }, b: { exact: 0, text_prefix: 2 } });
    expect(m.fallbacks).toEqual({ media_layout_unavailable: 1, audio: 2 });
    expect(m.retries).toBe(1);
    expect(m.receipts["a"]).toEqual({ ok: 3, error: 0, cancelled: 0, unreported: 1, promptTokens: 164, predictedCachedTokens: 32 + 100, actualCachedTokens: 96 });
    expect(m.receipts["b"]).toMatchObject({ ok: 0, error: 2 });
    expect(m.overlapBlocks.count).toBe(4);
    expect(m.overlapBlocks.sum).toBe(7);
    expect(m.requestBlocks.counts[m.requestBlocks.bounds.indexOf(4)]).toBe(2);
    expect(m.edgeOverheadSeconds.count).toBe(4);
    expect(m.edgeOverheadSeconds.sum).toBeCloseTo(0.746);
    expect(m.series.map((p) => [p.t, p.requests, p.errors])).toEqual([[10_000, 2, 1], [20_000, 2, 0], [30_000, 1, 1]]);
    expect(m.recentDecisions.map((d) => d.at)).toEqual([4_000, 3_000, 2_000, 1_000]);
  });

  it("sums index counters, drop reasons and indexed blocks; takes the max `at`", () => {
    const r = new PoolRecorder();
    const merged = mergeShardSnapshots([
      shard(r, { at: 5, indexedBlocks: 10, counters: counters({ eventsApplied: 3, dumps: 1, routed: 9, approxResets: 1, dropReasons: { parent_not_found: 1 } }) }),
      shard(r, { at: 9, indexedBlocks: 20, counters: counters({ eventsApplied: 4, blocksStored: 20, eventsDropped: 2, dropReasons: { parent_not_found: 1, stale_epoch: 1 } }) }),
      shard(r, { at: 7, indexedBlocks: 5, counters: counters({ blocksRemoved: 6, expired: 2, settled: 1, receiptsRejected: 3, dropReasons: { stale_epoch: 3 } }) }),
    ]);
    expect(merged.at).toBe(9);
    expect(merged.indexedBlocks).toBe(35);
    expect(merged.counters).toEqual({
      eventsApplied: 7,
      blocksStored: 20,
      blocksRemoved: 6,
      eventsDropped: 2,
      dropReasons: { parent_not_found: 2, stale_epoch: 4 },
      dumps: 1,
      routed: 9,
      settled: 1,
      expired: 2,
      receiptsRejected: 3,
      approxResets: 1,
    });
  });

  it("merges workers: registry and load from shard 0, blocks summed, synced only if all, lastSeen max, shard-only workers appended", () => {
    const r = new PoolRecorder();
    const s0 = shard(r, {
      activeRequests: 3,
      workers: [
        worker("a", { blocks: 10, activeRequests: 2, activePrefillTokens: 100, activeDecodeBlocks: 5, contractDigest: "d1", epoch: 4, lastSeen: 100 }),
        worker("b", { blocks: 1, status: "draining", activeRequests: 1, lastSeen: 300 }),
      ],
    });
    const s1 = shard(r, {
      activeRequests: 99,
      workers: [
        // A replica of the load that lags: shard 0's view wins.
        worker("a", { blocks: 7, activeRequests: 0, activePrefillTokens: 0, activeDecodeBlocks: 0, contractDigest: "stale", epoch: 3, lastSeen: 200, status: "down" }),
        worker("b", { blocks: 2, synced: false, lastSeen: 250 }),
      ],
    });
    const s2 = shard(r, {
      workers: [worker("a", { blocks: 3, lastSeen: 150 }), worker("c", { blocks: 4, synced: false, epoch: 2, activeRequests: 1, lastSeen: 50 })],
    });
    const merged = mergeShardSnapshots([s0, s1, s2]);
    expect(merged.activeRequests).toBe(3);
    expect(merged.cohort).toEqual(s0.cohort);
    expect(merged.workers.map((w) => w.workerId)).toEqual(["a", "b", "c"]);
    expect(merged.workers[0]).toEqual(
      worker("a", { blocks: 20, synced: true, activeRequests: 2, activePrefillTokens: 100, activeDecodeBlocks: 5, contractDigest: "d1", epoch: 4, lastSeen: 200 }),
    );
    expect(merged.workers[1]).toEqual(worker("b", { blocks: 3, synced: false, status: "draining", activeRequests: 1, lastSeen: 300 }));
    expect(merged.workers[2]).toEqual(worker("c", { blocks: 4, synced: false, epoch: 2, activeRequests: 1, lastSeen: 50 }));
  });

  it("a worker some shard has not met yet is not synced, even where every shard that knows it is", () => {
    const r = new PoolRecorder();
    const merged = mergeShardSnapshots([
      shard(r, { workers: [worker("a", { blocks: 2 }), worker("d", { blocks: 5 })] }),
      shard(r, { workers: [worker("a", { blocks: 1 })] }),
    ]);
    expect(merged.workers.map((w) => [w.workerId, w.blocks, w.synced])).toEqual([["a", 3, true], ["d", 5, false]]);
    expect(mergeShardWorkers([[worker("a", { blocks: 2 })], [worker("a", { blocks: 1 })]])[0]!.blocksPerShard).toEqual([2, 1]);
  });

  it("drift keeps each worker's largest EWMA and is drifting if any shard says so", () => {
    const r = new PoolRecorder();
    const merged = mergeShardSnapshots([
      shard(r, { drift: [{ workerId: "a", driftEwma: 0.1, drifting: false }, { workerId: "b", driftEwma: 0.5, drifting: false }] }),
      shard(r, { drift: [{ workerId: "a", driftEwma: 0.4, drifting: false }, { workerId: "b", driftEwma: 0.2, drifting: true }] }),
      shard(r, { drift: [{ workerId: "c", driftEwma: -0.3, drifting: false }] }),
    ]);
    expect(merged.drift).toEqual([
      { workerId: "a", driftEwma: 0.4, drifting: false },
      { workerId: "b", driftEwma: 0.5, drifting: true },
      { workerId: "c", driftEwma: -0.3, drifting: false },
    ]);
  });

  it("recent receipts and decisions merge newest first, capped at what one index keeps", () => {
    const receipt = (at: number, workerId: string) => ({ at, workerId, outcome: "ok" as const, promptTokens: 1, predictedCachedTokens: 0, actualCachedTokens: 0, fallbackReason: null, traceId: null });
    const r0 = new PoolRecorder();
    const r1 = new PoolRecorder();
    for (let i = 0; i < 60; i++) route(r0, i * 2, "a"); // keeps 50: at 20..118 (even)
    for (let i = 0; i < 10; i++) route(r1, 101 + i * 2, "b"); // at 101..119 (odd)
    const merged = mergeShardSnapshots([
      shard(r0, { recentReceipts: [receipt(30, "a"), receipt(10, "a")] }),
      shard(r1, { recentReceipts: [receipt(40, "b"), receipt(20, "b"), receipt(5, "b")] }),
      shard(new PoolRecorder(), { recentReceipts: [receipt(25, "c")] }),
    ]);
    expect(merged.recentReceipts.map((x) => [x.at, x.workerId])).toEqual([[40, "b"], [30, "a"], [25, "c"], [20, "b"], [10, "a"], [5, "b"]]);
    const at = merged.recorder.recentDecisions.map((d) => d.at);
    expect(at).toHaveLength(50);
    expect(at[0]).toBe(119);
    expect(at.slice(0, 4)).toEqual([119, 118, 117, 116]);
    expect([...at].sort((x, y) => y - x)).toEqual(at);
    // 50 newest of {20..118 even} ∪ {101..119 odd}: the oldest kept is 40.
    expect(at[49]).toBe(40);
  });

  it("series: same-interval points summed, ascending, capped at one series' capacity keeping the newest", () => {
    const r0 = new PoolRecorder();
    const r1 = new PoolRecorder();
    for (const t of [0, 10_000, 20_000]) settle(r0, t, "a");
    for (const t of [20_000, 30_000, 40_000]) settle(r1, t, "b", { promptTokens: 32, actualCachedTokens: 8 });
    const series = mergeShardSnapshots([shard(r0), shard(r1)]).recorder.series;
    expect(series.map((p) => p.t)).toEqual([0, 10_000, 20_000, 30_000, 40_000]);
    // Two shards each full (180 points over disjoint intervals): the newest 180 remain.
    const full0 = new PoolRecorder();
    const full1 = new PoolRecorder();
    for (let i = 0; i < SERIES_CAPACITY; i++) settle(full0, i * 20_000, "a");
    for (let i = 0; i < SERIES_CAPACITY; i++) settle(full1, i * 20_000 + 10_000, "b");
    const both = mergeShardSnapshots([shard(full0), shard(full1)]).recorder.series;
    expect(both).toHaveLength(SERIES_CAPACITY);
    expect(both[0]!.t).toBe(180 * 10_000);
    expect(both.at(-1)!.t).toBe((SERIES_CAPACITY - 1) * 20_000 + 10_000);
    expect(series[2]).toEqual({ t: 20_000, requests: 2, errors: 0, promptTokens: 96, predictedCachedTokens: 64, actualCachedTokens: 24 });
  });

  it("throws when histogram bounds differ between shards", () => {
    const a = shard(new PoolRecorder());
    const b = shard(new PoolRecorder());
    const bad = structuredClone(b);
    bad.recorder.overlapRatio = { bounds: [0, 0.5, 1], counts: [0, 0, 0], sum: 0, count: 0 };
    expect(() => mergeShardSnapshots([a, bad])).toThrow(/overlapRatio.*bounds differ/);
    const shifted = structuredClone(b);
    shifted.recorder.edgeOverheadSeconds.bounds[0] = 0.0001;
    expect(() => mergeShardSnapshots([a, shifted])).toThrow(Error);
    expect(() => mergeShardSnapshots([a, b])).not.toThrow();
  });

  it("does not mutate its inputs", () => {
    const { recs } = traffic();
    const shards = recs.map((r, i) => shard(r, { workers: [worker("a", { blocks: i + 1 }), worker(`only${i}`)], drift: [{ workerId: "a", driftEwma: i, drifting: i === 1 }] }));
    const before = structuredClone(shards);
    const merged = mergeShardSnapshots(shards);
    merged.workers[0]!.blocks = -1;
    merged.recorder.receipts["a"]!.ok = -1;
    merged.recorder.series[0]!.requests = -1;
    merged.recorder.overlapBlocks.counts[0] = -1;
    merged.counters.dropReasons["x"] = 1;
    expect(shards).toEqual(before);
  });

  it("renderMetrics accepts the merged snapshot and shows the pool-wide values", () => {
    const { recs } = traffic();
    const shards = [
      shard(recs[0]!, { indexedBlocks: 10, workers: [worker("a", { blocks: 6, activeRequests: 2 }), worker("b", { blocks: 4 })], counters: counters({ dropReasons: { parent_not_found: 1 } }) }),
      shard(recs[1]!, { indexedBlocks: 5, workers: [worker("a", { blocks: 5 }), worker("b", { blocks: 0 })], counters: counters({ dropReasons: { parent_not_found: 2 } }) }),
      shard(recs[2]!, { indexedBlocks: 2, workers: [worker("a", { blocks: 1 }), worker("c", { blocks: 1, status: "down" })] }),
    ];
    const f = parsePrometheusText(renderMetrics([{ model: "m", snapshot: mergeShardSnapshots(shards) }]));
    expect(sampleValue(f, "kvedge_pool_up", { model: "m" })).toBe(1);
    expect(sampleValue(f, "kvedge_index_blocks", { model: "m" })).toBe(17);
    expect(sampleValue(f, "kvedge_worker_blocks", { model: "m", worker: "a" })).toBe(12);
    expect(sampleValue(f, "kvedge_worker_blocks", { model: "m", worker: "c" })).toBe(1);
    expect(sampleValue(f, "kvedge_worker_active_requests", { model: "m", worker: "a" })).toBe(2);
    expect(sampleValue(f, "kvedge_workers", { model: "m", state: "down" })).toBe(1);
    expect(sampleValue(f, "kvedge_index_gaps_total", { model: "m" })).toBe(3);
    expect(sampleValue(f, "kvedge_requests_total", { model: "m", outcome: "ok" })).toBe(3);
    expect(sampleValue(f, "kvedge_routing_fallbacks_total", { model: "m", reason: "audio" })).toBe(2);
    expect(sampleValue(f, "kvedge_routing_overlap_blocks_count", { model: "m" })).toBe(4);
    expect(sampleValue(f, "kvedge_edge_overhead_seconds_bucket", { model: "m", le: "+Inf" })).toBe(4);
  });
  it("a worker whose cache is full on any shard is full in the merged row (shards judge fullness from their own chains)", () => {
    const rows = mergeShardWorkers([[worker("a"), worker("b", { cacheFull: true })], [worker("a", { cacheFull: true }), worker("b")]]);
    expect(rows.map((r) => [r.workerId, r.cacheFull])).toEqual([
      ["a", true],
      ["b", true],
    ]);
    expect(mergeShardWorkers([[worker("a")], [worker("a")]])[0]!.cacheFull).toBe(false);
  });
});
