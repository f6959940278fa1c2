// Suite "routing": routing policies replayed on traces shaped like published workloads (multi-turn
// chat with think time, agent loops, document QA, the Mooncake trace's shape, multi-turn vision chat
// with repeated images and videos; bench/routing/traces.mjs)
// against simulated SGLang workers on the GPU-calibrated cost model (one H200 per worker,
// bench/calibration), at the KV capacity an H200 holds for the model (bench/routing/kv-capacity.mjs)
// and swept below it. Every configuration runs on several seeds (trace and router randomness);
// figures are the mean over seeds ± their standard deviation.
// Per policy: token hit rate ÷ the infinite-cache ceiling, goodput at the TTFT SLO, TTFT p50/p99 on
// the worker, and end-to-end TTFT with the edge's measured overhead added (bench/routing/edge-overhead.mjs).
// The media-blind peers (text-prefix, url-keyed) run on the traces with media only: elsewhere they
// make kvedge's and session-sticky's choices.
import { TRACES, TRACE_PARAMS, traceShape, mediaShape } from "../routing/traces.mjs";
import { simulate, infiniteCacheHits, POLICIES, MEDIA_BLIND_POLICIES, LLMD_WEIGHTS, PAGE } from "../routing/sim.mjs";
import { RELAY_LAG_MS, SLO_FACTOR, SLO_FLOOR_MS, replaySetup, seedFigure, sloMs } from "../routing/replay-setup.mjs";
import { loadEdgeOverhead, edgeOverheadMs } from "../routing/edge-overhead.mjs";
import { acrossSeeds, mean, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

/** Share of the fleet's GPU time the trace's prefill would take with a perfect (infinite, shared) cache. */
const TARGET_LOAD = 0.4;
/** Shortest window over which the sessions of a paced trace start (s). */
const MIN_START_WINDOW_S = 120;
/** Traces whose sessions are paced by think or tool time, not by an arrival rate. */
const PACED = new Set(["chat", "agent", "vision"]);
/** Traces whose prompts carry media. */
const MEDIA_TRACES = new Set(["vision"]);
const policiesFor = (name) => (MEDIA_TRACES.has(name) ? POLICIES : POLICIES.filter((p) => !MEDIA_BLIND_POLICIES.includes(p)));

const SIZES = {
  // sessions per trace (agent: loops of tens of steps; docqa, mooncake: one request each)
  tiny: { workers: 2, seeds: [1], capacities: [1], sessions: { chat: 20, agent: 2, docqa: 20, mooncake: 30, vision: 12 } },
  quick: { workers: 4, seeds: [1, 2, 3], capacities: [1, 0.1], sessions: { chat: 60, agent: 4, docqa: 80, mooncake: 120, vision: 40 } },
  full: { workers: 4, seeds: [1, 2, 3], capacities: [1, 0.25, 0.1], sessions: { chat: 300, agent: 12, docqa: 200, mooncake: 300, vision: 100 } },
};

export default {
  name: "routing",
  title: "Routing policies on published-shape traces (calibrated H200 workers, real KV capacity, several seeds)",
  async run(ctx) {
    const { timing, prefillMs, size, kv } = await replaySetup(ctx, SIZES);
    const edge = loadEdgeOverhead();

    // Ideal prefill (the ceiling's hit, nothing queued) of each request: the load scale and the SLO.
    const idealPrefill = (trace, hits) => trace.map((r) => prefillMs(timing, r.tokens.length - hits[r.id], hits[r.id]));
    const loadOf = (trace, ideal) => ideal.reduce((a, b) => a + b, 0) / (size.workers * Math.max(1, trace[trace.length - 1].at - trace[0].at));
    const makeTrace = (name, seed) => {
      // Session start rate for the target load: a probe at 1 session/s, then scaled (load ∝ rate
      // while sessions are short against the start window). Sessions paced by think or tool time
      // (chat, agent) start over at least MIN_START_WINDOW_S, so they overlap as live traffic does
      // rather than arriving at once; their load is then what that many sessions give (reported).
      const gen = TRACES[name];
      const sessions = size.sessions[name];
      const probe = gen({ seed, sessions, rate: 1 });
      const probeLoad = loadOf(probe, idealPrefill(probe, infiniteCacheHits(probe).hits));
      const rate = Math.min(TARGET_LOAD / probeLoad, PACED.has(name) ? sessions / MIN_START_WINDOW_S : Infinity);
      const trace = gen({ seed, sessions, rate });
      const { hits, workingSetTokens } = infiniteCacheHits(trace);
      const ideal = idealPrefill(trace, hits);
      return { trace, hits, workingSetTokens, ideal, rate, load: loadOf(trace, ideal) };
    };

    const names = Object.keys(TRACES);
    const total = names.reduce((n, name) => n + policiesFor(name).length, 0) * size.seeds.length * size.capacities.length;
    let done = 0;
    const out = {};
    for (const name of names) {
      const policies = policiesFor(name);
      const perSeed = [];
      for (const seed of size.seeds) {
        ctx.progress(done / total, `routing ${name} seed ${seed}: trace`);
        const t = makeTrace(name, seed);
        const totalTokens = t.trace.reduce((s, r) => s + r.tokens.length, 0);
        const ceiling = t.hits.reduce((a, b) => a + b, 0) / totalTokens;
        const slo = t.ideal.map(sloMs);
        const span = (t.trace[t.trace.length - 1].at - t.trace[0].at) / 1000;
        // A session's first request meets a cold edge (nothing of it cached in the isolate), a follow-up a warm one.
        const seen = new Set();
        const warm = t.trace.map((r) => (seen.has(r.session) ? true : (seen.add(r.session), false)));
        const hasMedia = t.trace.map((r) => r.mediaUrl != null);
        const runs = {};
        for (const factor of size.capacities) {
          const capacityTokens = Math.round(kv.tokens * factor);
          const rows = {};
          for (const policy of policies) {
            ctx.progress(done++ / total, `routing ${name} seed ${seed} ${factor}× KV: ${policy}`);
            const { results, served } = simulate(t.trace, { policy, workers: size.workers, capacityTokens, timing, lagMs: RELAY_LAG_MS, seed });
            const cached = results.reduce((s, r) => s + r.cached, 0);
            const ttft = summarize(results.map((r) => r.ttft));
            const e2e = summarize(results.map((r) => r.ttft + edgeOverheadMs(edge, r.tokens, warm[r.id], hasMedia[r.id])));
            const met = results.filter((r) => r.ttft <= slo[r.id]).length;
            rows[policy] = {
              hitRate: cached / totalTokens,
              hitOfCeiling: cached / totalTokens / ceiling,
              goodputRps: met / span,
              sloAttainment: met / results.length,
              ttftP50: ttft.p50,
              ttftP99: ttft.p99,
              e2eTtftP50: e2e.p50,
              e2eTtftP99: e2e.p99,
              maxOverMeanServed: Math.max(...served) / mean(served),
            };
          }
          runs[factor] = rows;
        }
        const media = MEDIA_TRACES.has(name) ? { media: mediaShape(t.trace) } : {};
        perSeed.push({ seed, shape: { ...traceShape(t.trace), ...media, workingSetTokens: t.workingSetTokens }, ceiling, load: t.load, sessionRatePerS: t.rate, offeredRps: t.trace.length / span, runs });
      }
      // Mean ± sd over seeds per capacity and policy.
      const byCapacity = {};
      for (const factor of size.capacities) {
        byCapacity[factor] = {};
        for (const policy of policies) {
          const m = {};
          for (const key of Object.keys(perSeed[0].runs[factor][policy])) m[key] = acrossSeeds(perSeed.map((s) => s.runs[factor][policy][key]));
          byCapacity[factor][policy] = m;
        }
      }
      out[name] = {
        params: TRACE_PARAMS[name],
        policies,
        ceiling: acrossSeeds(perSeed.map((s) => s.ceiling)),
        load: acrossSeeds(perSeed.map((s) => s.load)),
        workingSetTokens: acrossSeeds(perSeed.map((s) => s.shape.workingSetTokens)),
        seeds: perSeed,
        byCapacity,
      };
    }

    const f = seedFigure(size.seeds.length);
    const summary = [];
    const top = size.capacities[0];
    for (const name of names) {
      const o = out[name];
      const shape = o.seeds[0].shape;
      summary.push({
        metric: `${name}: trace (seed ${o.seeds[0].seed}) — requests, input mean / p90 / max, follow-up prefix share p10–p90; working set ÷ fleet KV; ideal-prefill load; infinite-cache ceiling`,
        value: `${shape.requests}, ${shape.inputTokens.mean} / ${shape.inputTokens.p90} / ${shape.inputTokens.max} tok, ${shape.followUpPrefixShare.p10 ?? "–"}–${shape.followUpPrefixShare.p90 ?? "–"}; ${(o.workingSetTokens.mean / (size.workers * kv.tokens)).toFixed(2)}; ${f(o.load, 2)}; ${f(o.ceiling, 1, 100)} %`,
        unit: "",
        goal: "",
        pass: null,
      });
      if (shape.media) {
        const m = shape.media;
        summary.push({
          metric: `${name}: media (seed ${o.seeds[0].seed}) — attachments, share repeating earlier content, of those under a URL not seen before, media share of prompt tokens`,
          value: `${m.attachments}, ${(100 * m.repeatShare).toFixed(1)} %, ${(100 * m.repeatUnderOtherUrlShare).toFixed(1)} %, ${(100 * m.mediaTokenShare).toFixed(1)} %`,
          unit: "",
          goal: "",
          pass: null,
        });
      }
      for (const policy of o.policies) {
        const r = o.byCapacity[top][policy];
        summary.push({
          metric: `${name} ${top}× KV: ${policy} — hit ÷ ceiling, goodput, SLO met, TTFT p50 / p99, e2e p50 / p99`,
          value: `${f(r.hitOfCeiling, 2)}, ${f(r.goodputRps, 2)} req/s, ${f(r.sloAttainment, 1, 100)} %, ${f(r.ttftP50)} / ${f(r.ttftP99)} ms, ${f(r.e2eTtftP50)} / ${f(r.e2eTtftP99)} ms`,
          unit: "",
          goal: "",
          pass: null,
        });
      }
      for (const factor of size.capacities.slice(1)) {
        const rows = o.byCapacity[factor];
        summary.push({
          metric: `${name} ${factor}× KV: goodput req/s (TTFT p99 ms) — ${o.policies.join(" ; ")}`,
          value: o.policies.map((p) => `${rows[p].goodputRps.mean.toFixed(2)} (${rows[p].ttftP99.mean.toFixed(0)})`).join(" ; "),
          unit: "",
          goal: "",
          pass: null,
        });
      }
      // The goals, judged on the mean over seeds at every capacity.
      const losses = [];
      const p99Losses = [];
      for (const factor of size.capacities) {
        const rows = o.byCapacity[factor];
        const bestOther = Math.max(...o.policies.filter((p) => p !== "kvedge").map((p) => rows[p].goodputRps.mean));
        if (rows.kvedge.goodputRps.mean < bestOther) losses.push(`${factor}×: ${rows.kvedge.goodputRps.mean.toFixed(2)} < ${bestOther.toFixed(2)}`);
        if (rows.kvedge.ttftP99.mean > rows["least-loaded"].ttftP99.mean) p99Losses.push(`${factor}×: ${rows.kvedge.ttftP99.mean.toFixed(0)} > ${rows["least-loaded"].ttftP99.mean.toFixed(0)}`);
      }
      summary.push({ metric: `${name}: kvedge goodput the best of all policies at every KV size`, value: losses.length ? losses.join("; ") : "yes", unit: "", goal: "best", pass: losses.length === 0 });
      summary.push({ metric: `${name}: kvedge TTFT p99 ≤ least-loaded's at every KV size`, value: p99Losses.length ? p99Losses.join("; ") : "yes", unit: "", goal: "≤", pass: p99Losses.length === 0 });
    }

    const plots = [
      {
        file: "routing-hit-rate.svg",
        svg: barChart({
          title: `Prefix-cache hit rate ÷ infinite-cache ceiling, ${size.workers} H200 workers, ${top}× KV (${(kv.tokens / 1e6).toFixed(2)} M tokens each)`,
          unit: "× ceiling",
          goal: { value: 1, label: "ceiling" },
          bars: names.flatMap((n) => out[n].policies.map((p) => ({ label: `${n} ${p}`, value: out[n].byCapacity[top][p].hitOfCeiling.mean, group: n }))),
        }),
      },
      {
        file: "routing-goodput.svg",
        svg: barChart({
          title: `Goodput at the TTFT SLO (max(${SLO_FLOOR_MS / 1000} s, ${SLO_FACTOR}× ideal prefill)), ${top}× KV, mean of ${size.seeds.length} seeds`,
          unit: "requests/s meeting the SLO",
          bars: names.flatMap((n) => out[n].policies.map((p) => ({ label: `${n} ${p}`, value: out[n].byCapacity[top][p].goodputRps.mean, group: n }))),
        }),
      },
      {
        file: "routing-ttft.svg",
        svg: barChart({
          title: `TTFT p99 on the worker, ${top}× KV, mean of ${size.seeds.length} seeds`,
          unit: "ms",
          log: true,
          bars: names.flatMap((n) => out[n].policies.map((p) => ({ label: `${n} ${p}`, value: Math.max(1, out[n].byCapacity[top][p].ttftP99.mean), group: n }))),
        }),
      },
    ];
    return {
      summary,
      details: {
        policies: POLICIES,
        llmdWeights: LLMD_WEIGHTS,
        workers: size.workers,
        seeds: size.seeds,
        pageSize: PAGE,
        relayLagMs: RELAY_LAG_MS,
        targetLoad: TARGET_LOAD,
        slo: { floorMs: SLO_FLOOR_MS, factorOfIdealPrefill: SLO_FACTOR },
        kvCapacity: { ...kv, factors: size.capacities },
        edgeOverhead: edge,
        timing,
        traces: out,
      },
      plots,
    };
  },
};
