// Suite "scale-out": the routing index past one object and one region (docs/scale.md). A seeded
// global trace against 1 024 in-process simulated workers in 3 regions, routed with region-aware
// selection by (a) one unsharded index, (b) a sharded index behind one RoutingCore (must decide
// identically), (c) N shard objects with replicated load (1, 2, 4, 8). Reports routing decisions/s
// of the busiest object, p99 decision latency and hit rate against the unsharded index.
// Alone: `npx node bench/suites/scale-out.mjs [--quick|--tiny] [--json]`.
import { pathToFileURL } from "node:url";
import { summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

const SHARDS = [1, 2, 4, 8];
/** Load deltas between shard objects: batched and delivered within 5 ms (same-location DO RPC). */
const SYNC_MS = 5;

function figures(r, decisions) {
  const busiest = Math.max(...r.busyMs.total);
  const total = r.busyMs.total.reduce((a, b) => a + b, 0);
  const lat = summarize(Array.from(r.latencyMs, (ms) => ms * 1000));
  const meanDecisions = decisions / r.perShardDecisions.length;
  return {
    layout: r.layout,
    shards: r.shards,
    decisionsPerSec: (decisions / busiest) * 1000,
    /** All objects' work on one core (what a single machine running every shard would see). */
    decisionsPerSecOneCore: (decisions / total) * 1000,
    p50us: lat.p50,
    p99us: lat.p99,
    hitRate: r.hitRate,
    predictedHitRate: r.predictedHitRate,
    crossRegionShare: r.crossRegionShare,
    shardImbalance: Math.max(...r.perShardDecisions) / meanDecisions,
    perShardDecisions: r.perShardDecisions,
    busyMs: r.busyMs,
    indexSizes: r.indexSizes,
  };
}

const suite = {
  name: "scale-out",
  title: "Sharded index, replicated load, regions: 1 024 simulated workers",
  async run(ctx) {
    const { initHashing } = await import("../../src/util/hash.ts");
    await initHashing();
    const { makeScaleTrace } = await import("../scale/trace.mjs");
    const { runScale } = await import("../scale/sim.mjs");
    const { TIMING_PRESETS } = await import("../../services/sglang-sim/timing.ts");
    const cfg = ctx.tiny
      ? { workers: 1024, requests: 800, tenants: 400, capacityTokens: 32_000 }
      : ctx.quick
        ? { workers: 1024, requests: 6000, tenants: 1500, capacityTokens: 32_000 }
        : { workers: 1536, requests: 30_000, tenants: 5000, capacityTokens: 32_000 };
    const timing = TIMING_PRESETS["h100-8b"];
    // Arrivals so that with no cache at all the fleet would be ~50 % busy with prefill.
    const probe = makeScaleTrace({ seed: 99, requests: 2000, tenants: cfg.tenants, meanGapMs: 1 });
    const meanTokens = probe.reduce((s, r) => s + r.tokens.length, 0) / probe.length;
    const meanGapMs = ((meanTokens / timing.prefillTokensPerSec) * 1000) / (0.5 * cfg.workers);
    const trace = makeScaleTrace({ seed: 42, requests: cfg.requests, tenants: cfg.tenants, meanGapMs });
    // Replicated load is exchanged every SYNC_MS; the last runs measure what staleness costs.
    const runs = [
      ["single", 1, 0],
      ...SHARDS.filter((n) => n > 1).map((n) => ["central", n, 0]),
      ...SHARDS.filter((n) => n > 1).map((n) => ["replicated", n, SYNC_MS]),
      ...(ctx.tiny ? [] : [0, 20].map((ms) => ["replicated", 8, ms])),
    ];
    const out = { config: { ...cfg, meanGapMs, meanTokens, syncMs: SYNC_MS, lagMs: 10 }, layouts: [] };
    let base = null;
    for (const [i, [layout, shards, syncMs]] of runs.entries()) {
      const label = `scale-out ${layout} ×${shards}${layout === "replicated" ? ` sync ${syncMs} ms` : ""}`;
      ctx.progress(i / runs.length, label);
      const r = runScale(trace, {
        workers: cfg.workers,
        layout,
        shards,
        capacityTokens: cfg.capacityTokens,
        timing,
        syncMs,
        onProgress: (f) => ctx.progress((i + f) / runs.length, label),
      });
      const f = figures(r, trace.length);
      f.syncMs = syncMs;
      if (layout === "single") base = r;
      f.identicalToSingle = base ? r.decisions.every((w, k) => w === base.decisions[k]) : null;
      f.hitRateDelta = f.hitRate - base.hitRate;
      f.hitRateRelDelta = f.hitRateDelta / base.hitRate;
      out.layouts.push(f);
    }
    const single = out.layouts[0];
    const repl = [single, ...out.layouts.filter((l) => l.layout === "replicated" && l.syncMs === SYNC_MS)];
    const rising = repl.every((l, k) => k === 0 || l.decisionsPerSec > repl[k - 1].decisionsPerSec);
    const summary = [
      ...out.layouts.map((l) => ({
        metric: `${l.layout === "single" ? "unsharded index" : l.layout === "central" ? `sharded index ×${l.shards}, one load object` : `${l.shards} shard objects, load replicated within ${l.syncMs} ms`}: decisions/s of busiest object (p99 decision µs; hit rate Δ)`,
        value: `${(l.decisionsPerSec / 1e3).toFixed(2)} k (${l.p99us.toFixed(0)} µs; ${(l.hitRate * 100).toFixed(2)} %${l.layout === "single" ? "" : `, ${l.hitRateDelta >= 0 ? "+" : ""}${(l.hitRateDelta * 100).toFixed(2)} pt`})`,
        unit: "",
        goal: l.layout === "central" ? "identical decisions" : l.layout === "replicated" ? "|Δhit| ≤ 1 pt" : "",
        pass: l.layout === "central" ? l.identicalToSingle : l.layout === "replicated" ? Math.abs(l.hitRateDelta) <= 0.01 : null,
      })),
      { metric: "decisions/s rise with shard count (1 → 2 → 4 → 8 shard objects)", value: repl.map((l) => (l.decisionsPerSec / 1e3).toFixed(2)).join(" → ") + " k", unit: "/s", goal: "rising", pass: rising },
    ];
    const plot = barChart({
      title: `Routing decisions/s of the busiest object (${cfg.workers} workers, 3 regions)`,
      unit: "decisions/s",
      bars: repl.map((l) => ({ label: l.layout === "single" ? "unsharded" : `${l.shards} shards`, value: l.decisionsPerSec })),
    });
    return { summary, details: out, plots: [{ file: "scale-out.svg", svg: plot }] };
  },
};
export default suite;

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  const ctx = { quick: args.includes("--quick") || args.includes("--tiny"), tiny: args.includes("--tiny"), progress: (f, label) => process.stderr.write(`\r${label ?? ""} ${(f * 100).toFixed(0)}%   `) };
  const r = await suite.run(ctx);
  process.stderr.write("\n");
  if (args.includes("--json")) console.log(JSON.stringify(r.details, null, 2));
  else {
    for (const s of r.summary) console.log(`${s.pass === true ? "ok  " : s.pass === false ? "NO  " : "    "}${s.metric}: ${s.value}${s.goal ? `  [goal: ${s.goal}]` : ""}`);
    console.log("\nlayout      shards sync  dec/s(busiest)  dec/s(1 core)  p50µs  p99µs  hit%    Δpt   Δrel%  imbalance  cross-region");
    for (const l of r.details.layouts)
      console.log(
        `${l.layout.padEnd(11)} ${String(l.shards).padStart(6)} ${String(l.syncMs).padStart(4)}  ${l.decisionsPerSec.toFixed(0).padStart(14)}  ${l.decisionsPerSecOneCore.toFixed(0).padStart(13)}  ${l.p50us.toFixed(0).padStart(5)}  ${l.p99us.toFixed(0).padStart(5)}  ${(l.hitRate * 100).toFixed(2).padStart(5)}  ${(l.hitRateDelta * 100).toFixed(2).padStart(5)}  ${(l.hitRateRelDelta * 100).toFixed(2).padStart(5)}  ${l.shardImbalance.toFixed(2).padStart(9)}  ${(l.crossRegionShare * 100).toFixed(1)} %`,
      );
  }
}
