import { beforeAll, describe, expect, it } from "vitest";
import { ExpositionBuilder, formatValue } from "../../../src/metrics/exposition.ts";
import { Histogram } from "../../../src/metrics/histogram.ts";
import { PoolRecorder } from "../../../src/metrics/pool-recorder.ts";
import { ReceiptSeries } from "../../../src/metrics/time-series.ts";
import { choiceReason } from "../../../src/metrics/decision-reason.ts";
import { cohortOf, hitRate } from "../../../src/metrics/pool-snapshot.ts";
import { renderMetrics } from "../../../src/metrics/pool-families.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { parsePrometheusText, PromParseError, sampleValue } from "../../helpers/prom-parser.ts";

beforeAll(() => initHashing());

describe("strict Prometheus parser (self-check)", () => {
  it("accepts a well-formed exposition and rejects common mistakes", () => {
    const good = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 3\n# HELP g G.\n# TYPE g gauge\ng -1.5\n';
    expect(sampleValue(parsePrometheusText(good), "a_total", { x: "1" })).toBe(3);
    const bad = [
      "# TYPE a_total counter\na_total 1\n", // no HELP
      '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 1', // no final newline
      "# HELP a_total A.\n# TYPE a_total counter\na_total -1\n", // negative counter
      "# HELP a A.\n# TYPE a counter\na 1\n", // counter without _total
      "# HELP g G.\n# TYPE g gauge\ng 1\ng 2\n", // duplicate series
      '# HELP g G.\n# TYPE g gauge\ng{x="a\\q"} 1\n', // bad escape
      "# HELP g G.\n# TYPE g gauge\n# HELP h H.\n# TYPE h gauge\nh 1\ng 1\n", // family not contiguous
      '# HELP h H.\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n', // not cumulative
      '# HELP h H.\n# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n', // no +Inf
    ];
    for (const b of bad) expect(() => parsePrometheusText(b), b).toThrow(PromParseError);
  });
});

describe("ExpositionBuilder", () => {
  it("renders HELP/TYPE once per family, merges samples across writers, escapes label values", () => {
    const b = new ExpositionBuilder();
    b.counter("kvedge_x_total", "Help with \\ and\nnewline.").set({ model: 'a"b\\c\nd' }, 1);
    b.gauge("kvedge_g", "G.").set({}, 0.25);
    b.counter("kvedge_x_total", "ignored").set({ model: "second" }, 2);
    const text = b.render();
    expect(text.match(/# TYPE kvedge_x_total/g)).toHaveLength(1);
    const fams = parsePrometheusText(text);
    expect(fams.get("kvedge_x_total")!.help).toBe("Help with \\ and\nnewline.");
    expect(sampleValue(fams, "kvedge_x_total", { model: 'a"b\\c\nd' })).toBe(1);
    expect(sampleValue(fams, "kvedge_x_total", { model: "second" })).toBe(2);
    expect(sampleValue(fams, "kvedge_g")).toBe(0.25);
  });

  it("histograms come out cumulative with +Inf = count", () => {
    const h = new Histogram([1, 5, 10]);
    for (const v of [0, 1, 2, 7, 100, Number.NaN]) h.observe(v);
    const b = new ExpositionBuilder();
    b.histogram("kvedge_h", "H.").histogram({ model: "m" }, h.snapshot());
    const fams = parsePrometheusText(b.render());
    expect(sampleValue(fams, "kvedge_h_bucket", { le: "1" })).toBe(2);
    expect(sampleValue(fams, "kvedge_h_bucket", { le: "5" })).toBe(3);
    expect(sampleValue(fams, "kvedge_h_bucket", { le: "10" })).toBe(4);
    expect(sampleValue(fams, "kvedge_h_bucket", { le: "+Inf" })).toBe(5);
    expect(sampleValue(fams, "kvedge_h_sum")).toBe(110);
    expect(sampleValue(fams, "kvedge_h_count")).toBe(5);
  });

  it("refuses bad names, counters without _total and type conflicts", () => {
    const b = new ExpositionBuilder();
    expect(() => b.gauge("9bad", "x")).toThrow(RangeError);
    expect(() => b.counter("kvedge_requests", "x")).toThrow(RangeError);
    expect(() => b.gauge("kvedge_ok", "x").set({ "bad-label": "v" }, 1)).toThrow(RangeError);
    b.gauge("kvedge_same", "x");
    expect(() => b.histogram("kvedge_same", "x")).toThrow(TypeError);
    expect([formatValue(Infinity), formatValue(-Infinity), formatValue(NaN), formatValue(1e-7)]).toEqual(["+Inf", "-Inf", "NaN", "1e-7"]);
  });
});

describe("PoolRecorder", () => {
  const cands = [
    { workerId: "a", overlapBlocks: 3, cost: 10 },
    { workerId: "b", overlapBlocks: 0, cost: 20 },
  ];

  it("counts decisions by mode, fallbacks, retries and one final outcome per request", () => {
    const r = new PoolRecorder();
    r.routed({ at: 1, receiptId: "r1", workerId: "a", overlapBlocks: 3, totalBlocks: 4, isl: 64, fallbackReason: null, retry: false, candidates: cands });
    r.routed({ at: 2, receiptId: "r2", workerId: "b", overlapBlocks: 0, totalBlocks: 4, isl: 64, fallbackReason: "media_layout_unavailable", retry: true, candidates: cands });
    const base = { promptTokens: 64, predictedOverlapBlocks: 3, blockSize: 16, edgeOverheadMs: 4 };
    r.settled({ ...base, workerId: "a", outcome: "error", actualCachedTokens: null, retrying: true }, 10_000);
    r.settled({ ...base, workerId: "b", outcome: "ok", actualCachedTokens: 32, retrying: false }, 10_001);
    r.noWorker("audio");
    // A client that hung up mid-answer: counted as cancelled, not as the pool's error.
    r.settled({ ...base, workerId: "b", outcome: "cancelled", actualCachedTokens: null, retrying: false }, 10_002);
    const s = r.snapshot();
    expect(s.requests).toEqual({ ok: 1, error: 0, cancelled: 1, no_worker: 1 });
    expect(s.decisions).toEqual({ a: { exact: 1, text_prefix: 0 }, b: { exact: 0, text_prefix: 1 } });
    expect(s.fallbacks).toEqual({ media_layout_unavailable: 1, audio: 1 });
    expect(s.retries).toBe(1);
    expect(s.receipts["b"]).toEqual({ ok: 1, error: 0, cancelled: 1, unreported: 0, promptTokens: 64, predictedCachedTokens: 48, actualCachedTokens: 32 });
    expect(s.receipts["a"]!.error).toBe(1);
    expect(s.edgeOverheadSeconds.count).toBe(3);
    expect(s.edgeOverheadSeconds.sum).toBeCloseTo(0.012);
    expect(s.overlapBlocks.sum).toBe(3);
    expect(s.recentDecisions.map((d) => d.receiptId)).toEqual(["r2", "r1"]);
    expect(s.recentDecisions[0]!.reason).toMatch(/^retry after a failed worker; load outweighed prefix: a held 3\/4/);
  });

  it("a receipt without a cache report is counted but kept out of the hit rate", () => {
    const r = new PoolRecorder();
    r.settled({ workerId: "a", outcome: "ok", promptTokens: 100, predictedOverlapBlocks: 2, blockSize: 16, actualCachedTokens: null, retrying: false, edgeOverheadMs: null }, 0);
    const s = r.snapshot();
    expect(s.receipts["a"]).toMatchObject({ ok: 1, unreported: 1, promptTokens: 0 });
    expect(s.edgeOverheadSeconds.count).toBe(0);
  });

  it("caps free-form fallback reasons", () => {
    const r = new PoolRecorder();
    for (let i = 0; i < 100; i++) r.noWorker(`reason_${i}`);
    const f = r.snapshot().fallbacks;
    expect(Object.keys(f).length).toBe(65);
    expect(f["other"]).toBe(36);
  });
});

describe("helpers", () => {
  it("choiceReason names the deciding factor", () => {
    expect(choiceReason("a", [{ workerId: "a", overlapBlocks: 2, cost: 1 }], 4)).toMatch(/only candidate/);
    expect(choiceReason("a", [{ workerId: "a", overlapBlocks: 4, cost: 1 }, { workerId: "b", overlapBlocks: 1, cost: 5 }], 4)).toBe("longest cached prefix 4/4 blocks");
    expect(choiceReason("b", [{ workerId: "a", overlapBlocks: 0, cost: 9 }, { workerId: "b", overlapBlocks: 0, cost: 5 }], 4)).toMatch(/no cached prefix/);
    expect(choiceReason("b", [{ workerId: "a", overlapBlocks: 2, cost: 9 }, { workerId: "b", overlapBlocks: 2, cost: 5 }], 4)).toMatch(/tied with 1/);
  });

  it("cohortOf maps the index's verdict: exact media only when every up worker agrees", () => {
    const no = (reason: string) => ({ ok: false as const, reason });
    expect(cohortOf([], no("no_contract"))).toMatchObject({ state: "no_workers", exactMedia: false });
    expect(cohortOf([{ status: "up", contractDigest: "d1" }, { status: "up", contractDigest: null }], no("no_contract"))).toMatchObject({ state: "no_contract", exactMedia: false, digests: 1 });
    expect(cohortOf([{ status: "up", contractDigest: "d1" }, { status: "up", contractDigest: "d2" }], no("contract_disagreement"))).toMatchObject({ state: "disagree", digests: 2, reason: "contract_disagreement" });
    expect(cohortOf([{ status: "up", contractDigest: null }], no("invalid_contract"))).toMatchObject({ state: "invalid", reason: "invalid_contract" });
    expect(cohortOf([{ status: "up", contractDigest: "d1" }, { status: "down", contractDigest: "d2" }], { ok: true, digest: "c1" })).toMatchObject({ state: "agree", exactMedia: true, digest: "c1", digests: 1 });
  });

  it("ReceiptSeries buckets by interval and stays bounded", () => {
    const s = new ReceiptSeries(1000, 3);
    for (const t of [0, 500, 1500, 2500, 3500, 3600]) s.add(t, { ok: true, promptTokens: 10, predictedCachedTokens: 5, actualCachedTokens: 4 });
    const pts = s.snapshot();
    expect(pts.map((p) => [p.t, p.requests])).toEqual([[1000, 1], [2000, 1], [3000, 2]]);
  });
});

describe("RoutingCore → /metrics exposition", () => {
  function pool(model: string) {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5, now: () => 1_700_000_000_000 });
    for (const id of ["a", "b"])
      core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch: 1, modelName: model, contract: null, kvEvents: true }, id);
    const tokens = Array.from({ length: 16 }, (_, i) => i + 1);
    const hashes = localBlockHashes(tokens, 4);
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: hashes.map((l, i) => ({ h: String(i + 1), p: i ? String(i) : null, l: localHashToHex(l) })) });
    core.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: "999", blocks: [{ h: "50", l: "00000000000000aa" }] }] });
    return { core, hashes };
  }

  it("peek reports the pick without adding load, receipts or counters", () => {
    const { core, hashes } = pool("m");
    const p = core.peek({ localHashes: hashes, isl: 16 });
    expect(p).toMatchObject({ workerId: "a", overlapBlocks: 4, totalBlocks: 4, tiedWith: [] });
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.stats().counters.routed).toBe(0);
    expect(core.metricsSnapshot().recorder.recentDecisions).toHaveLength(0);
    expect(core.route({ localHashes: hashes, isl: 16 })!.workerId).toBe(p.workerId);
  });

  it("two pools scrape into one strictly valid exposition with per-model labels", () => {
    const p1 = pool("m1");
    const d = p1.core.route({ localHashes: p1.hashes, isl: 18, fallbackReason: null })!;
    p1.core.settle({ receiptId: d.receiptId, promptTokens: 18, cachedTokens: 16, outcome: "ok", edgeOverheadMs: 3 });
    const p2 = pool("m2");
    p2.core.setStatus("b", "down");
    const text = renderMetrics([
      { model: "m1", snapshot: p1.core.metricsSnapshot() },
      { model: "m2", snapshot: p2.core.metricsSnapshot() },
      { model: "m3", snapshot: null },
    ]);
    const f = parsePrometheusText(text);
    for (const name of f.keys()) expect(name).toMatch(/^kvedge_/);
    expect(sampleValue(f, "kvedge_pool_up", { model: "m3" })).toBe(0);
    expect(sampleValue(f, "kvedge_requests_total", { model: "m1", outcome: "ok" })).toBe(1);
    expect(sampleValue(f, "kvedge_routing_decisions_total", { model: "m1", worker: "a", mode: "exact" })).toBe(1);
    expect(sampleValue(f, "kvedge_routing_overlap_blocks_bucket", { model: "m1", le: "4" })).toBe(1);
    expect(sampleValue(f, "kvedge_routing_request_blocks_sum", { model: "m1" })).toBe(4);
    expect(sampleValue(f, "kvedge_receipt_predicted_cached_tokens_total", { model: "m1", worker: "a" })).toBe(16);
    expect(sampleValue(f, "kvedge_receipt_actual_cached_tokens_total", { model: "m1", worker: "a" })).toBe(16);
    expect(sampleValue(f, "kvedge_edge_overhead_seconds_bucket", { model: "m1", le: "0.005" })).toBe(1);
    expect(sampleValue(f, "kvedge_workers", { model: "m2", state: "down" })).toBe(1);
    expect(sampleValue(f, "kvedge_worker_blocks", { model: "m1", worker: "a" })).toBe(4);
    expect(sampleValue(f, "kvedge_index_blocks", { model: "m1" })).toBe(4);
    expect(sampleValue(f, "kvedge_index_gaps_total", { model: "m1" })).toBe(1);
    expect(sampleValue(f, "kvedge_index_events_dropped_total", { model: "m1", reason: "parent_not_found" })).toBe(1);
    expect(sampleValue(f, "kvedge_index_dumps_total", { model: "m2" })).toBe(2);
    expect(sampleValue(f, "kvedge_cohort_exact_media", { model: "m1" })).toBe(0);
    expect(sampleValue(f, "kvedge_cohort_state", { model: "m1", state: "no_contract" })).toBe(1);
    expect(f.get("kvedge_edge_overhead_seconds")!.type).toBe("histogram");
    expect(hitRate(p1.core.metricsSnapshot())).toBeCloseTo(16 / 18);
  });

  it("a removed worker's decision and receipt series go with it, and its late settlements do not bring them back; the pool's totals keep them", () => {
    const { core, hashes } = pool("m");
    const settled = core.route({ localHashes: hashes, isl: 16 })!;
    const late = core.route({ localHashes: hashes, isl: 16 })!;
    expect([settled.workerId, late.workerId]).toEqual(["a", "a"]);
    core.settle({ receiptId: settled.receiptId, promptTokens: 16, cachedTokens: 16, outcome: "ok" });
    expect(Object.keys(core.metricsSnapshot().recorder.receipts)).toEqual(["a"]);
    core.removeWorker("a");
    core.settle({ receiptId: late.receiptId, promptTokens: 16, cachedTokens: 16, outcome: "ok" });
    const snap = core.metricsSnapshot();
    expect(Object.keys(snap.recorder.decisions)).toEqual([]);
    expect(Object.keys(snap.recorder.receipts)).toEqual([]);
    expect(snap.recorder.requests["ok"]).toBe(2);
    const text = renderMetrics([{ model: "m", snapshot: snap }]);
    parsePrometheusText(text);
    expect(text).not.toContain('worker="a"');
    expect(text).toContain('worker="b"');
  });
});
