/**
 * Receipts calibrate the load-back bandwidth: a request routed to a worker holding its prefix in
 * host memory keeps its predicted load-back; the time to prefill done, measured at settle, gives the
 * measured one, and enough of them replace the configured bandwidth in the TTFT cost.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { DEFAULT_TIER_COST } from "../../../src/selection/tier-cost.ts";
import { TIER_CALIBRATION_MIN_SAMPLES } from "../../../src/selection/tier-calibration.ts";
import { renderMetrics } from "../../../src/metrics/pool-families.ts";

beforeAll(() => initHashing());

const B = 16;
const tokens = Array.from({ length: 64 * B }, (_, i) => (i * 7919) % 50_000);
const BYTES = tokens.length * DEFAULT_TIER_COST.kvBytesPerToken;

function hostOnlyWorker(now: () => number) {
  const core = new RoutingCore({ blockSize: B, random: () => 0.5, now, cost: "ttft" });
  core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
  const rows = localBlockHashes(tokens, B).map((l, i) => ({ h: String(100 + i), p: i === 0 ? null : String(99 + i), l: localHashToHex(l), tier: "CPU_PINNED" as const }));
  core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: rows });
  return core;
}

describe("load-back calibration through RoutingCore", () => {
  it("a settled receipt records predicted and measured load-back and moves the host estimate", () => {
    let now = 1_000_000;
    const core = hostOnlyWorker(() => now);
    // The worker's link: 1 GB/s, where the configuration says 37.
    const trueLoadMs = Math.round((BYTES / 1e9) * 1000);
    const serve = () => {
      const d = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length });
      expect(d).toMatchObject({ workerId: "a", hostBlocks: 64 });
      now += trueLoadMs;
      core.markPrefillDone(d!.receiptId);
      now += 500; // decoding: after prefill done, not part of the sample
      const r = core.settle({ receiptId: d!.receiptId, promptTokens: tokens.length, cachedTokens: tokens.length, outcome: "ok" });
      now += 6_000; // past the pending window (5 s), which would count the prefix as GPU overlap
      return r.receipt!;
    };
    const first = serve();
    expect(first.predictedTtftMs).toBeGreaterThan(0);
    expect(first.measuredTtftMs).toBe(trueLoadMs);
    expect(first.loadBack).toMatchObject({ tier: "host", bytes: BYTES });
    expect(first.loadBack!.predictedMs).toBeCloseTo((BYTES / 37e9) * 1000, 6);
    expect(first.loadBack!.measuredMs).toBeGreaterThan(trueLoadMs - 2);
    expect(core.stats().tierLoadBack!.host).toMatchObject({ accepted: 1, estimatedGbps: null, gbps: 37 });
    for (let i = 1; i < TIER_CALIBRATION_MIN_SAMPLES; i++) serve();
    const host = core.stats().tierLoadBack!.host;
    expect(host.estimatedGbps).not.toBeNull();
    expect(host.gbps).toBeGreaterThan(0.97);
    expect(host.gbps).toBeLessThan(1.03);
    // The cost now prices the host hit at the measured bandwidth.
    const next = core.peek({ localHashes: localBlockHashes(tokens, B), isl: tokens.length });
    expect(next.candidates[0]!.cost).toBeGreaterThan(trueLoadMs - 2);
    const text = renderMetrics([{ model: "m", snapshot: core.metricsSnapshot() }]);
    expect(text).toMatch(/kvedge_tier_loadback_estimate_ratio\{model="m",tier="host"\} \d/);
    expect(text).toMatch(/kvedge_tier_loadback_samples_total\{model="m",tier="host",result="accepted"\} 8/);
    expect(text).toMatch(/kvedge_tier_loadback_bytes_per_second\{model="m",tier="host",source="configured"\} 37000000000/);
  });

  it("a request without prefill done, or not ok, calibrates nothing", () => {
    let now = 1_000_000;
    const core = hostOnlyWorker(() => now);
    const d1 = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length })!;
    now += 100;
    expect(core.settle({ receiptId: d1.receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" }).receipt!.loadBack!.measuredMs).toBeNull();
    now += 6_000;
    const d2 = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length })!;
    now += 100;
    core.markPrefillDone(d2.receiptId);
    core.settle({ receiptId: d2.receiptId, promptTokens: null, cachedTokens: null, outcome: "error" });
    expect(core.stats().tierLoadBack!.host).toMatchObject({ accepted: 0, rejected: 0 });
  });
});
