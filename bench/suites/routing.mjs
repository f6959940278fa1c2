// Suite "routing": routing quality on a seeded synthetic workload replayed against simulated SGLang
// workers, on two worker cost models side by side: "calibrated" (SGLang's prefill-first scheduler,
// 8192-token chunked prefill and a batched decode step, costs measured on an H200 — bench/calibration)
// and "linear" (one serial prefill lane at 12k tokens/s: the model the router's ttft cost assumes,
// used before calibration). Per policy: hit rate, TTFT p50/p99, throughput. The oracle knows every
// cache and queue and picks the least TTFT under the worker's true cost model (not the router's).
// Half the requests are streamed. Sensitivity (calibrated): prefill rate ±50 % at the same
// arrivals, a more skewed / a uniform workload, every / no request streamed, so a default that wins
// only in one corner shows.
import { makeTrace } from "../routing/trace.mjs";
import { simulate, infiniteCacheHitRate, POLICIES } from "../routing/sim.mjs";
import { summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

const SENSITIVITY_POLICIES = ["kvedge", "kvedge-blocks", "least-loaded", "round-robin", "oracle"];
/** Fraction of the trace's requests that are streamed (the rest are answered whole). */
const STREAM_SHARE = 0.5;

function measure(trace, policy, cfg, timing) {
  const t = performance.now();
  const { results, served } = simulate(trace, { policy, workers: cfg.workers, capacityTokens: cfg.capacityTokens, timing });
  const totalTokens = trace.reduce((s, r) => s + r.tokens.length, 0);
  const cached = results.reduce((s, r) => s + r.cached, 0);
  const best = results.reduce((s, r) => s + r.best, 0);
  const ttft = summarize(results.map((r) => r.ttft));
  const mean = served.reduce((a, b) => a + b, 0) / served.length;
  const span = (Math.max(...results.map((r) => r.finishAt)) - Math.min(...results.map((r) => r.arrivedAt))) / 1000;
  const byKind = {};
  for (const r of results) {
    const b = (byKind[r.kind] ??= { n: 0, tokens: 0, cached: 0 });
    b.n++;
    b.tokens += r.tokens;
    b.cached += r.cached;
  }
  return {
    hitRate: cached / totalTokens,
    bestAvailableHitRate: best / totalTokens,
    ttftP50: ttft.p50,
    ttftP99: ttft.p99,
    ttftMean: ttft.mean,
    // Completed requests per second of simulated time (first arrival to last finish).
    throughputRps: results.length / span,
    outputTokensPerSec: results.reduce((s, r) => s + r.outputTokens, 0) / span,
    maxOverMean: Math.max(...served) / mean,
    served,
    hitRateByKind: Object.fromEntries(Object.entries(byKind).map(([kk, b]) => [kk, +(b.cached / b.tokens).toFixed(4)])),
    simSeconds: (performance.now() - t) / 1000,
  };
}

const fmt = (r) => `${(100 * r.hitRate).toFixed(1)} %, ${r.ttftP50.toFixed(0)} / ${r.ttftP99.toFixed(0)} ms, ${r.throughputRps.toFixed(2)} req/s`;

export default {
  name: "routing",
  title: "Routing quality on a synthetic workload (calibrated and linear worker models)",
  async run(ctx) {
    const { initHashing } = await import("../../src/util/hash.ts");
    await initHashing();
    const { fixtureContract } = await import("../../test/fixtures/models/load.ts");
    const { layoutImageItem, layoutVideoItem } = await import("../../src/layout/index.ts");
    const { TIMING_PRESETS, prefillMs } = await import("../../services/sglang-sim/timing.ts");
    const c = fixtureContract("qwen3_vl");
    // Span lengths from the real layout of typical inputs.
    const imagePads = [
      [640, 480],
      [1024, 768],
      [1280, 720],
      [1920, 1080],
    ].map(([width, height]) => {
      const r = layoutImageItem(c, { width, height });
      if (!r.ok) throw new Error(r.detail);
      return r.geometry.padCount;
    });
    const videoPads = [
      [20, 30, 1280, 720],
      [60, 30, 1280, 720],
      [120, 25, 854, 480],
    ].map(([secs, fps, width, height]) => {
      const r = layoutVideoItem(c, { totalFrames: secs * fps, avgFps: fps, width, height });
      if (!r.ok) throw new Error(r.detail);
      return r.geometry.padCount;
    });

    const cfg = ctx.tiny
      ? { workers: 4, requests: 150, capacityTokens: 60_000 }
      : ctx.quick
        ? { workers: 4, requests: 300, capacityTokens: 80_000 }
        : { workers: 8, requests: 3000, capacityTokens: 150_000 };
    const sens = ctx.tiny ? cfg : ctx.quick ? cfg : { workers: 8, requests: 1500, capacityTokens: 150_000 };
    const models = { calibrated: TIMING_PRESETS["h200-7b"], linear: TIMING_PRESETS["h100-8b"] };
    // Arrival rate per model and workload: with no cache at all the fleet would be ~75 % busy with prefill.
    const gapFor = (timing, skew, workers) => {
      const probe = makeTrace({ seed: 42, requests: 400, meanGapMs: 1, imagePads, videoPads, skew });
      const meanPrefill = probe.reduce((s, r) => s + prefillMs(timing, r.tokens.length), 0) / probe.length;
      return meanPrefill / (0.75 * workers);
    };
    const runs = [];
    for (const [model, timing] of Object.entries(models)) runs.push({ name: model, model, timing, skew: 1, cfg, policies: POLICIES });
    const calGap = gapFor(models.calibrated, 1, sens.workers);
    if (!ctx.tiny) {
      runs.push({ name: "calibrated, prefill rate +50 %", model: "calibrated", timing: { ...models.calibrated, prefillScale: 1 / 1.5 }, skew: 1, cfg: sens, gap: calGap, policies: SENSITIVITY_POLICIES });
      runs.push({ name: "calibrated, prefill rate −50 %", model: "calibrated", timing: { ...models.calibrated, prefillScale: 2 }, skew: 1, cfg: sens, gap: calGap, policies: SENSITIVITY_POLICIES });
      runs.push({ name: "calibrated, skewed workload (Zipf ×1.5)", model: "calibrated", timing: models.calibrated, skew: 1.5, cfg: sens, policies: SENSITIVITY_POLICIES });
      runs.push({ name: "calibrated, uniform workload", model: "calibrated", timing: models.calibrated, skew: 0, cfg: sens, policies: SENSITIVITY_POLICIES });
      // Half the requests are streamed in the runs above; the index learns an unstreamed request's
      // prefill is over only from the worker's own KV events (routing-core.ts), a streamed one's also
      // from the edge at its first output.
      runs.push({ name: "calibrated, every request streamed", model: "calibrated", timing: models.calibrated, skew: 1, streamShare: 1, cfg: sens, policies: SENSITIVITY_POLICIES });
      runs.push({ name: "calibrated, no request streamed", model: "calibrated", timing: models.calibrated, skew: 1, streamShare: 0, cfg: sens, policies: SENSITIVITY_POLICIES });
    }
    const totalSims = runs.reduce((s, r) => s + r.policies.length, 0);
    let k = 0;
    const out = {};
    for (const run of runs) {
      const meanGapMs = run.gap ?? gapFor(run.timing, run.skew, run.cfg.workers);
      const trace = makeTrace({ seed: 42, requests: run.cfg.requests, meanGapMs, imagePads, videoPads, skew: run.skew, streamShare: run.streamShare ?? STREAM_SHARE });
      const rows = {};
      for (const policy of run.policies) {
        ctx.progress(k++ / totalSims, `routing ${run.name}: ${policy}`);
        rows[policy] = measure(trace, policy, run.cfg, run.timing);
      }
      out[run.name] = { config: { ...run.cfg, skew: run.skew, streamShare: run.streamShare ?? STREAM_SHARE, meanGapMs, timing: run.timing }, ceiling: infiniteCacheHitRate(trace), policies: rows };
    }

    const summary = [];
    for (const p of POLICIES) {
      const cal = out.calibrated.policies[p];
      const lin = out.linear.policies[p];
      summary.push({ metric: `${p}: hit, TTFT p50 / p99, throughput — calibrated ; linear`, value: `${fmt(cal)} ; ${fmt(lin)}`, unit: "", goal: "", pass: null });
    }
    const others = POLICIES.filter((p) => !p.startsWith("kvedge") && p !== "oracle" && p !== "index+ttft");
    for (const model of ["calibrated", "linear"]) {
      const rows = out[model].policies;
      const kv = rows.kvedge;
      const bestOther = Math.min(...others.map((p) => rows[p].ttftP50));
      const bestOtherP99 = Math.min(...others.map((p) => rows[p].ttftP99));
      summary.push({
        metric: `${model}: kvedge (ttft) TTFT vs best non-kvedge, non-oracle policy (p50, p99)`,
        value: `${kv.ttftP50.toFixed(0)} vs ${bestOther.toFixed(0)}, ${kv.ttftP99.toFixed(0)} vs ${bestOtherP99.toFixed(0)} ms`,
        unit: "",
        goal: "best",
        pass: kv.ttftP50 <= bestOther && kv.ttftP99 <= bestOtherP99,
      });
      summary.push({
        metric: `${model}: hit rate ÷ oracle, cost ttft ; blocks`,
        value: `${(kv.hitRate / rows.oracle.hitRate).toFixed(3)} ; ${(rows["kvedge-blocks"].hitRate / rows.oracle.hitRate).toFixed(3)}`,
        unit: "",
        goal: "",
        pass: null,
      });
    }
    const cal = out.calibrated.policies;
    const winner = cal.kvedge.ttftP50 <= cal["kvedge-blocks"].ttftP50 && cal.kvedge.ttftP99 <= cal["kvedge-blocks"].ttftP99 ? "ttft" : "blocks";
    summary.push({ metric: "default cost that wins on the calibrated model (TTFT p50 and p99)", value: winner, unit: "", goal: "ttft (the shipped default)", pass: winner === "ttft" });
    for (const run of runs.slice(2)) {
      const rows = out[run.name].policies;
      summary.push({
        metric: `sensitivity ${run.name}: TTFT p50/p99 ms — ttft ; blocks ; least-loaded ; oracle`,
        value: ["kvedge", "kvedge-blocks", "least-loaded", "oracle"].map((p) => `${rows[p].ttftP50.toFixed(0)}/${rows[p].ttftP99.toFixed(0)}`).join(" ; "),
        unit: "",
        goal: "",
        pass: null,
      });
    }
    summary.push({ metric: "workload ceiling (one infinite cache)", value: `${(100 * out.calibrated.ceiling).toFixed(1)} %`, unit: "", goal: "", pass: null });

    const plots = [
      {
        file: "routing-hit-rate.svg",
        svg: barChart({
          title: `Prefix-cache hit rate (token-weighted), ${cfg.workers} workers, ${cfg.requests} requests`,
          unit: "% of prompt tokens served from cache",
          goal: { value: 100 * out.calibrated.ceiling, label: "infinite-cache ceiling" },
          bars: POLICIES.flatMap((p) => [
            { label: `${p} calibrated`, value: 100 * out.calibrated.policies[p].hitRate, group: "calibrated" },
            { label: `${p} linear`, value: 100 * out.linear.policies[p].hitRate, group: "linear" },
          ]),
        }),
      },
      ...["calibrated", "linear"].map((model) => ({
        file: `routing-ttft-${model}.svg`,
        svg: barChart({
          title: `TTFT, ${model} worker model (${model === "calibrated" ? "H200-measured costs, chunked prefill, batched decode" : "h100-8b: serial lane, 12k tok/s"})`,
          unit: "ms",
          log: true,
          bars: POLICIES.flatMap((p) => [
            { label: `${p} p50`, value: out[model].policies[p].ttftP50, group: "p50" },
            { label: `${p} p99`, value: out[model].policies[p].ttftP99, group: "p99" },
          ]),
        }),
      })),
    ];
    return { summary, details: { pageSize: 16, relayLagMs: 10, seed: 42, runs: out }, plots };
  },
};
