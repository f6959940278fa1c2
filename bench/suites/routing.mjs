// Suite "routing": routing quality on a seeded synthetic workload replayed against simulated
// SGLang caches: hit rate, modeled TTFT and load balance per policy, against an oracle.
import { makeTrace } from "../routing/trace.mjs";
import { simulate, infiniteCacheHitRate, POLICIES } from "../routing/sim.mjs";
import { summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

export default {
  name: "routing",
  title: "Routing quality on a synthetic workload",
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
    const timing = TIMING_PRESETS["h100-8b"];
    // Pick the arrival rate so that with no cache at all the fleet would be ~75 % busy with prefill.
    const probe = makeTrace({ seed: 42, requests: 400, meanGapMs: 1, imagePads, videoPads });
    const meanPrefill = probe.reduce((s, r) => s + prefillMs(timing, r.tokens.length), 0) / probe.length;
    const meanGapMs = meanPrefill / (0.75 * cfg.workers);
    const trace = makeTrace({ seed: 42, requests: cfg.requests, meanGapMs, imagePads, videoPads });
    const totalTokens = trace.reduce((s, r) => s + r.tokens.length, 0);
    ctx.progress(0.05, "routing ceiling");
    const ceiling = infiniteCacheHitRate(trace);

    const rows = {};
    let k = 0;
    for (const policy of POLICIES) {
      ctx.progress(0.1 + (0.9 * k++) / POLICIES.length, `routing ${policy}`);
      const t = performance.now();
      const { results, served } = simulate(trace, { policy, workers: cfg.workers, capacityTokens: cfg.capacityTokens, timing });
      const cached = results.reduce((s, r) => s + r.cached, 0);
      const best = results.reduce((s, r) => s + r.best, 0);
      const ttft = summarize(results.map((r) => r.ttft));
      const mean = served.reduce((a, b) => a + b, 0) / served.length;
      const byKind = {};
      for (const r of results) {
        const b = (byKind[r.kind] ??= { n: 0, tokens: 0, cached: 0 });
        b.n++;
        b.tokens += r.tokens;
        b.cached += r.cached;
      }
      rows[policy] = {
        hitRate: cached / totalTokens,
        bestAvailableHitRate: best / totalTokens,
        ttftP50: ttft.p50,
        ttftP99: ttft.p99,
        ttftMean: ttft.mean,
        maxOverMean: Math.max(...served) / mean,
        served,
        hitRateByKind: Object.fromEntries(Object.entries(byKind).map(([kk, b]) => [kk, +(b.cached / b.tokens).toFixed(4)])),
        simSeconds: (performance.now() - t) / 1000,
      };
    }
    const kv = rows.kvedge;
    const oracleHit = rows.oracle.hitRate;
    const atMomentRatio = kv.hitRate / kv.bestAvailableHitRate;
    const ratio = kv.hitRate / oracleHit;
    const others = POLICIES.filter((p) => p !== "kvedge" && p !== "kvedge-blocks" && p !== "oracle" && p !== "index+ttft");
    const bestOther = Math.min(...others.map((p) => rows[p].ttftP50));
    const bestOtherP99 = Math.min(...others.map((p) => rows[p].ttftP99));
    const summary = POLICIES.map((p) => ({
      metric: `${p}: hit rate, TTFT p50 / p99, max/mean load`,
      value: `${(100 * rows[p].hitRate).toFixed(1)} %, ${rows[p].ttftP50.toFixed(0)} / ${rows[p].ttftP99.toFixed(0)} ms, ${rows[p].maxOverMean.toFixed(2)}`,
      unit: "",
      goal: "",
      pass: null,
    }));
    summary.push({
      metric: "kvedge hit rate ÷ oracle policy (omniscient, TTFT-greedy)",
      value: `${ratio.toFixed(3)} (${(100 * kv.hitRate).toFixed(1)} / ${(100 * oracleHit).toFixed(1)} %)`,
      unit: "",
      goal: "≥ 0.97",
      pass: ratio >= 0.97,
    });
    const kb = rows["kvedge-blocks"];
    summary.push({
      metric: "kvedge with cost \"blocks\" (Dynamo's, decode weight 1) hit rate ÷ oracle policy",
      value: `${(kb.hitRate / oracleHit).toFixed(3)} (${(100 * kb.hitRate).toFixed(1)} / ${(100 * oracleHit).toFixed(1)} %)`,
      unit: "",
      goal: "",
      pass: null,
    });
    summary.push({
      metric: "kvedge hit rate ÷ best cached prefix on any worker at each arrival",
      value: `${atMomentRatio.toFixed(3)} (${(100 * kv.hitRate).toFixed(1)} / ${(100 * kv.bestAvailableHitRate).toFixed(1)} %)`,
      unit: "",
      goal: "(≥ 0.97)",
      pass: atMomentRatio >= 0.97,
    });
    summary.push({
      metric: "kvedge TTFT vs best non-oracle alternative (p50, p99)",
      value: `${kv.ttftP50.toFixed(0)} vs ${bestOther.toFixed(0)}, ${kv.ttftP99.toFixed(0)} vs ${bestOtherP99.toFixed(0)} ms`,
      unit: "",
      goal: "best",
      pass: kv.ttftP50 <= bestOther && kv.ttftP99 <= bestOtherP99,
    });
    summary.push({ metric: "workload ceiling (one infinite cache)", value: `${(100 * ceiling).toFixed(1)} %`, unit: "", goal: "", pass: null });
    const plots = [
      {
        file: "routing-hit-rate.svg",
        svg: barChart({
          title: `Prefix-cache hit rate (token-weighted), ${cfg.workers} workers, ${cfg.requests} requests`,
          unit: "% of prompt tokens served from cache",
          goal: { value: 100 * ceiling, label: "infinite-cache ceiling" },
          bars: POLICIES.map((p) => ({ label: p, value: 100 * rows[p].hitRate })),
        }),
      },
      {
        file: "routing-ttft.svg",
        svg: barChart({
          title: "Modeled TTFT (simulator timing h100-8b)",
          unit: "ms",
          log: true,
          bars: POLICIES.flatMap((p) => [
            { label: `${p} p50`, value: rows[p].ttftP50, group: "p50" },
            { label: `${p} p99`, value: rows[p].ttftP99, group: "p99" },
          ]),
        }),
      },
    ];
    return {
      summary,
      details: { config: { ...cfg, pageSize: 16, timing: "h100-8b", relayLagMs: 10, meanGapMs, seed: 42 }, totalTokens, ceiling, oracleHit, ratio, atMomentRatio, policies: rows },
      plots,
    };
  },
};
