// Suite "fleet-shapes": fleet shapes of the same GPU count, and DP ranks, on the GPU-calibrated
// worker model (bench/calibration, services/sglang-sim/timing.ts), never the router's own estimate.
// 1. Unified vs prefill/decode disaggregation: N unified workers against P prefill + D decode
//    (P + D = N) on the agent and chat traces (bench/routing/traces.mjs), the KV transfer time from
//    the model's KV geometry (bench/routing/kv-capacity.mjs) over swept bandwidths; kvedge routes
//    both (bench/fleet-shapes/shape-sim.mjs says how interference and transfer are modelled).
// 2. A DP pool (workers × attention-DP ranks): the rank-aware index against rank-blind routing
//    (bench/fleet-shapes/dp-sim.mjs).
// Every configuration runs on several seeds (trace and router randomness): mean ± sd over seeds.
import { TRACES, TRACE_PARAMS, traceShape } from "../routing/traces.mjs";
import { infiniteCacheHits } from "../routing/sim.mjs";
import { RELAY_LAG_MS, SLO_FACTOR, SLO_FLOOR_MS, replaySetup, seedFigure, sloMs } from "../routing/replay-setup.mjs";
import { simulateShape } from "../fleet-shapes/shape-sim.mjs";
import { simulateDp, DP_POLICIES } from "../fleet-shapes/dp-sim.mjs";
import { acrossSeeds, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

const TRACE_NAMES = ["agent", "chat"];

/** The quick and full runs' fleet: they differ in sessions only. */
const EIGHT_GPUS = {
  gpus: 8,
  shapes: [{ prefill: 4, decode: 4 }, { prefill: 2, decode: 6 }, { prefill: 6, decode: 2 }],
  bandwidths: [10, 25, 50],
  dp: { workers: 2, ranks: 4 },
  seeds: [1, 2, 3],
  startWindowS: { agent: 30, chat: 60 },
};
const SIZES = {
  tiny: { gpus: 2, shapes: [{ prefill: 1, decode: 1 }], bandwidths: [25], dp: { workers: 2, ranks: 2 }, seeds: [1], sessions: { agent: 2, chat: 20 }, startWindowS: { agent: 30, chat: 60 } },
  quick: { ...EIGHT_GPUS, sessions: { agent: 6, chat: 150 } },
  full: { ...EIGHT_GPUS, sessions: { agent: 12, chat: 300 } },
};

const shapeName = (s) => (s.unified !== undefined ? `${s.unified} unified` : `${s.prefill}P+${s.decode}D`);

/** TTFT, TPOT, throughput and goodput of one replay. */
function measure(results, slo, span, firstAt) {
  const ttft = summarize(results.map((r) => r.ttft));
  const tpot = summarize(results.filter((r) => r.outputTokens > 1).map((r) => (r.finishAt - r.arrivedAt - r.ttft) / (r.outputTokens - 1)));
  const outputTokens = results.reduce((s, r) => s + r.outputTokens, 0);
  const lastFinish = Math.max(...results.map((r) => r.finishAt));
  const met = results.filter((r) => r.ttft <= slo[r.id]).length;
  const promptTokens = results.reduce((s, r) => s + r.tokens, 0);
  return {
    hitRate: results.reduce((s, r) => s + r.cached, 0) / promptTokens,
    ttftP50: ttft.p50,
    ttftP99: ttft.p99,
    tpotP50: tpot.p50,
    tpotP99: tpot.p99,
    outputTokensPerS: outputTokens / ((lastFinish - firstAt) / 1000),
    goodputRps: met / span,
    sloAttainment: met / results.length,
    transferP50: summarize(results.map((r) => r.transferMs ?? 0)).p50,
  };
}

/** Mean ± sd over seeds of every metric, per configuration key. */
function aggregate(perSeed, keys) {
  const out = {};
  for (const key of keys) {
    out[key] = {};
    for (const m of Object.keys(perSeed[0][key])) out[key][m] = acrossSeeds(perSeed.map((s) => s[key][m]));
  }
  return out;
}

export default {
  name: "fleet-shapes",
  title: "Unified vs prefill/decode pools at the same GPU count, and rank-aware vs rank-blind routing on a DP pool (calibrated H200 workers, several seeds)",
  async run(ctx) {
    const { timing, prefillMs, size, kv } = await replaySetup(ctx, SIZES);
    const shapes = [{ unified: size.gpus }, ...size.shapes];
    const configs = shapes.flatMap((shape) => (shape.unified !== undefined ? [{ key: shapeName(shape), shape }] : size.bandwidths.map((gbps) => ({ key: `${shapeName(shape)} @${gbps} GB/s`, shape, gbps }))));
    const total = TRACE_NAMES.length * size.seeds.length * (configs.length + DP_POLICIES.length);
    let done = 0;
    const out = {};
    for (const name of TRACE_NAMES) {
      const shapeRuns = [];
      const dpRuns = [];
      const seeds = [];
      for (const seed of size.seeds) {
        const sessions = size.sessions[name];
        const trace = TRACES[name]({ seed, sessions, rate: sessions / size.startWindowS[name] });
        const { hits } = infiniteCacheHits(trace);
        const slo = trace.map((r) => sloMs(prefillMs(timing, r.tokens.length - hits[r.id], hits[r.id])));
        const firstAt = trace[0].at;
        const span = (trace[trace.length - 1].at - firstAt) / 1000;
        const ideal = trace.reduce((s, r) => s + prefillMs(timing, r.tokens.length - hits[r.id], hits[r.id]), 0);
        const totalTokens = trace.reduce((s, r) => s + r.tokens.length, 0);
        seeds.push({
          seed,
          shape: traceShape(trace),
          offeredRps: trace.length / span,
          offeredOutputTokensPerS: trace.reduce((s, r) => s + r.output.length, 0) / span,
          idealPrefillLoad: ideal / (size.gpus * span * 1000),
          ceiling: hits.reduce((a, b) => a + b, 0) / totalTokens,
        });
        const rows = {};
        for (const c of configs) {
          ctx.progress(done++ / total, `fleet-shapes ${name} seed ${seed}: ${c.key}`);
          const { results } = simulateShape(trace, { shape: c.shape, capacityTokens: kv.tokens, timing, bytesPerToken: kv.bytesPerToken, transferGBps: c.gbps, lagMs: RELAY_LAG_MS, seed });
          rows[c.key] = measure(results, slo, span, firstAt);
        }
        shapeRuns.push(rows);
        const dpRows = {};
        for (const policy of DP_POLICIES) {
          ctx.progress(done++ / total, `fleet-shapes ${name} seed ${seed}: DP ${policy}`);
          const { results } = simulateDp(trace, { policy, ...size.dp, capacityTokens: kv.tokens, timing, lagMs: RELAY_LAG_MS, seed });
          dpRows[policy] = measure(results, slo, span, firstAt);
        }
        dpRuns.push(dpRows);
      }
      out[name] = {
        params: TRACE_PARAMS[name],
        sessions: size.sessions[name],
        startWindowS: size.startWindowS[name],
        seeds,
        offeredRps: acrossSeeds(seeds.map((s) => s.offeredRps)),
        idealPrefillLoad: acrossSeeds(seeds.map((s) => s.idealPrefillLoad)),
        ceiling: acrossSeeds(seeds.map((s) => s.ceiling)),
        shapes: aggregate(shapeRuns, configs.map((c) => c.key)),
        dp: aggregate(dpRuns, DP_POLICIES),
      };
    }

    const f = seedFigure(size.seeds.length);
    const row = (metric, value, extra = {}) => ({ metric, value, unit: "", goal: "", pass: null, ...extra });
    const summary = [];
    for (const name of TRACE_NAMES) {
      const o = out[name];
      const s0 = o.seeds[0].shape;
      summary.push(row(`${name}: trace — sessions, requests (seed ${o.seeds[0].seed}), input mean / p90 tok, offered req/s, ideal-prefill load on ${size.gpus} GPUs, infinite-cache ceiling`, `${o.sessions}, ${s0.requests}, ${s0.inputTokens.mean} / ${s0.inputTokens.p90}, ${f(o.offeredRps, 2)}, ${f(o.idealPrefillLoad, 2)}, ${f(o.ceiling, 1, 100)} %`));
      for (const c of configs) {
        const r = o.shapes[c.key];
        summary.push(row(`${name} ${c.key}: TTFT p50 / p99, TPOT p50 / p99, output tok/s, goodput at the TTFT SLO, hit rate`, `${f(r.ttftP50)} / ${f(r.ttftP99)} ms, ${f(r.tpotP50, 1)} / ${f(r.tpotP99, 1)} ms, ${f(r.outputTokensPerS)}, ${f(r.goodputRps, 2)} req/s (${f(r.sloAttainment, 1, 100)} %), ${f(r.hitRate, 1, 100)} %`));
      }
      for (const p of DP_POLICIES) {
        const r = o.dp[p];
        summary.push(row(`${name} DP ${size.dp.workers}×${size.dp.ranks} ${p}: hit rate, TTFT p50 / p99, goodput`, `${f(r.hitRate, 1, 100)} %, ${f(r.ttftP50)} / ${f(r.ttftP99)} ms, ${f(r.goodputRps, 2)} req/s`));
      }
      const aware = o.dp["rank-aware"];
      const blind = o.dp["rank0-index"];
      summary.push(row(`${name}: DP rank-aware hit rate > rank-blind (rank 0 index + SGLang round robin)`, `${(100 * aware.hitRate.mean).toFixed(1)} % vs ${(100 * blind.hitRate.mean).toFixed(1)} %`, { goal: ">", pass: aware.hitRate.mean > blind.hitRate.mean }));
    }

    const unifiedKey = shapeName(shapes[0]);
    const plots = [
      {
        file: "fleet-shapes-ttft.svg",
        svg: barChart({
          title: `TTFT p99, ${size.gpus} GPUs: unified vs prefill/decode at swept KV bandwidth, mean of ${size.seeds.length} seeds`,
          unit: "ms",
          log: true,
          bars: TRACE_NAMES.flatMap((n) => configs.map((c) => ({ label: `${n} ${c.key}`, value: Math.max(1, out[n].shapes[c.key].ttftP99.mean), group: n }))),
        }),
      },
      {
        file: "fleet-shapes-goodput.svg",
        svg: barChart({
          title: `Goodput at the TTFT SLO (max(${SLO_FLOOR_MS / 1000} s, ${SLO_FACTOR}× ideal prefill)), ${size.gpus} GPUs, mean of ${size.seeds.length} seeds`,
          unit: "requests/s meeting the SLO",
          bars: TRACE_NAMES.flatMap((n) => configs.map((c) => ({ label: `${n} ${c.key}`, value: out[n].shapes[c.key].goodputRps.mean, group: n }))),
        }),
      },
      {
        file: "fleet-shapes-dp.svg",
        svg: barChart({
          title: `DP pool ${size.dp.workers} workers × ${size.dp.ranks} ranks: prefix-cache hit rate by rank policy, mean of ${size.seeds.length} seeds`,
          unit: "% of prompt tokens",
          bars: TRACE_NAMES.flatMap((n) => DP_POLICIES.map((p) => ({ label: `${n} ${p}`, value: 100 * out[n].dp[p].hitRate.mean, group: n }))),
        }),
      },
    ];
    return {
      summary,
      details: {
        gpus: size.gpus,
        unified: unifiedKey,
        configs: configs.map((c) => c.key),
        bandwidthsGBps: size.bandwidths,
        dp: { ...size.dp, policies: DP_POLICIES },
        seeds: size.seeds,
        relayLagMs: RELAY_LAG_MS,
        slo: { floorMs: SLO_FLOOR_MS, factorOfIdealPrefill: SLO_FACTOR },
        kvCapacity: kv,
        timing,
        traces: out,
      },
      plots,
    };
  },
};
