// Suite "routing": routing policies replayed on traces shaped like published workloads (multi-turn
// chat with think time, agent loops, document QA, the Mooncake trace's shape, multi-turn vision chat
// with repeated images and videos; bench/routing/traces.mjs) against simulated SGLang workers on the
// GPU-calibrated cost model (one H200 per worker, bench/calibration), at the KV capacity SGLang's
// defaults give the model on an H200 (bench/routing/kv-capacity.mjs) and swept below it. Traces are
// sized so that their working set (what an infinite cache would hold) exceeds the fleet's KV at the
// real size (chat and agent excepted, SIZES), and brought to the same ideal-prefill load (TARGET_LOAD) where
// their sessions can reach it (paced sessions starting within MIN_START_WINDOW_S; chat's cannot, its
// load is reported). Every configuration runs on several seeds
// (trace, router and edge-overhead randomness); figures are the mean over seeds ± their standard
// deviation, and kvedge against another policy is a tie where the per-seed differences do not set
// them apart (compare()).
// Per policy: token hit rate ÷ the infinite-cache ceiling, goodput at the TTFT SLO judged on
// end-to-end TTFT (worker TTFT + the edge's overhead drawn per request from the edge suite's measured
// distribution, bench/routing/edge-overhead.mjs), TTFT p50/p99 on the worker and end to end.
// The media-blind peers (text-prefix, url-keyed) run on the traces with media only: elsewhere they
// make kvedge's and session-sticky's choices.
import { TRACES, TRACE_PARAMS, traceShape, mediaShape } from "../routing/traces.mjs";
import { simulate, infiniteCacheHits, POLICIES, MEDIA_BLIND_POLICIES, LLMD_WEIGHTS, PAGE } from "../routing/sim.mjs";
import { RELAY_LAG_MS, SLO_FACTOR, SLO_FLOOR_MS, replaySetup, seedFigure, sloMs } from "../routing/replay-setup.mjs";
import { loadEdgeOverhead, sampleEdgeOverheads } from "../routing/edge-overhead.mjs";
import { acrossSeeds, mean, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

/**
 * Ideal-prefill load every trace is brought to: the prefill its requests would take with a perfect
 * (infinite, shared) cache and nothing queued, ÷ the fleet's GPU time, over the central arrivals
 * (LOAD_WINDOW_TAIL of them left out at each end: the ramp-up and drain of paced sessions).
 */
const TARGET_LOAD = 0.4;
const LOAD_WINDOW_TAIL = 0.1;
/** Shortest window over which the sessions of a paced trace start (s): they overlap as live traffic does rather than arriving at once. */
const MIN_START_WINDOW_S = 30;
/** Traces whose sessions are paced by think or tool time, not by an arrival rate. */
const PACED = new Set(["chat", "agent", "vision"]);
/** Traces whose prompts carry media. */
const MEDIA_TRACES = new Set(["vision"]);
const policiesFor = (name) => (MEDIA_TRACES.has(name) ? POLICIES : POLICIES.filter((p) => !MEDIA_BLIND_POLICIES.includes(p)));
/** A difference below this share of the other policy's mean is a tie whatever the seeds say. */
const TIE_FLOOR = 0.01;

// Sessions per trace (agent: loops of tens of steps; docqa, mooncake: one request each). Full:
// working sets ≥ 1× the fleet's KV at the real size on docqa, mooncake and vision; chat (~2.6k tokens
// a session) and agent (~100k a loop) would need ~1 500 sessions and ~40 loops, beyond this host's
// budget for the suite (a replay costs ~linear in prompt tokens: chat at 1× alone would be ~23 M
// prompt tokens per replay); their working-set ratios are reported.
const SIZES = {
  tiny: { workers: 2, seeds: [1], capacities: [1], sessions: { chat: 20, agent: 2, docqa: 20, mooncake: 30, vision: 12 }, documents: 30 },
  quick: { workers: 2, seeds: [1, 2, 3], capacities: [1, 0.5], sessions: { chat: 150, agent: 4, docqa: 120, mooncake: 150, vision: 60 }, documents: 90 },
  full: { workers: 2, seeds: [1, 2, 3], capacities: [1, 0.5], sessions: { chat: 300, agent: 12, docqa: 400, mooncake: 700, vision: 260 }, documents: 300 },
};

/**
 * A part of the suite, for working on one trace (a full run takes ~9 min): comma lists in
 * KVEDGE_ROUTING_TRACES, _SEEDS, _CAPACITIES and _POLICIES (kvedge and least-loaded are always kept:
 * the verdicts need them) narrow the mode's size; unset, the whole suite runs. An unknown name or a
 * value that is not a positive number stops the run (a typo would otherwise run nothing); a narrowed
 * run is refused in bench/results (scripts/bench.mjs), where it would replace the committed figures.
 * KVEDGE_ROUTING_LEARN_PREFILL_RATE (0 or 1) sets RoutingCore's learnPrefillRate for the index's
 * policies (refused there too); each run then records the rates learned per worker (learnedRates).
 */
function narrowed(size, env = process.env) {
  const list = (name, valid) => {
    const v = env[name];
    if (!v) return null;
    const items = v.split(",").map((x) => x.trim()).filter(Boolean);
    const bad = items.filter((x) => !valid(x));
    if (items.length === 0 || bad.length > 0) throw new Error(`${name}: ${bad.length > 0 ? `unknown ${bad.join(", ")}` : "empty list"}`);
    return items;
  };
  const positive = (x) => Number.isFinite(Number(x)) && Number(x) > 0;
  const seeds = list("KVEDGE_ROUTING_SEEDS", (x) => Number.isInteger(Number(x)) && Number(x) > 0)?.map(Number) ?? null;
  const capacities = list("KVEDGE_ROUTING_CAPACITIES", positive)?.map(Number) ?? null;
  const traces = list("KVEDGE_ROUTING_TRACES", (x) => Object.hasOwn(TRACES, x));
  const policies = list("KVEDGE_ROUTING_POLICIES", (x) => POLICIES.includes(x));
  // A setting the committed run does not take (header).
  const learn = env.KVEDGE_ROUTING_LEARN_PREFILL_RATE;
  if (learn !== undefined && learn !== "0" && learn !== "1") throw new Error("KVEDGE_ROUTING_LEARN_PREFILL_RATE: 0 or 1");
  const learnPrefillRate = learn === undefined ? null : learn === "1";
  const narrowing = seeds || capacities || traces || policies || learnPrefillRate !== null ? { seeds, capacities, traces, policies, learnPrefillRate } : null;
  return {
    ...size,
    ...(seeds ? { seeds } : {}),
    ...(capacities ? { capacities } : {}),
    traces,
    policies: policies ? [...new Set(["kvedge", "least-loaded", ...policies])] : null,
    learnPrefillRate,
    narrowing,
  };
}

/** Ideal-prefill load of requests arriving at `at` (ms) with ideal prefill `ideal` (ms), over the central arrivals. */
function windowLoad(at, ideal, workers) {
  const order = at.map((_, i) => i).sort((a, b) => at[a] - at[b]);
  const lo = Math.floor(LOAD_WINDOW_TAIL * order.length);
  const hi = Math.max(lo + 1, Math.ceil((1 - LOAD_WINDOW_TAIL) * order.length) - 1);
  let work = 0;
  for (let k = lo; k < hi; k++) work += ideal[order[k]];
  return work / (workers * Math.max(1, at[order[hi]] - at[order[lo]]));
}

/**
 * kvedge (`a`) against another policy (`b`) on one metric, per seed (same trace, same seed: paired):
 * "tie" when the mean difference is within the differences' standard deviation over seeds or under
 * TIE_FLOOR of b's mean, else "better" or "worse" for kvedge.
 */
function compare(a, b, higherIsBetter) {
  const d = acrossSeeds(a.runs.map((x, i) => x - b.runs[i]));
  if (Math.abs(d.mean) <= Math.max(d.sd, TIE_FLOOR * Math.abs(b.mean))) return "tie";
  return d.mean > 0 === higherIsBetter ? "better" : "worse";
}

export default {
  name: "routing",
  title: "Routing policies on published-shape traces (calibrated H200 workers, real KV capacity, several seeds)",
  async run(ctx) {
    const setup = await replaySetup(ctx, SIZES);
    const { timing, prefillMs, encoderMs, kv } = setup;
    const size = narrowed(setup.size);
    const policiesOf = (name) => policiesFor(name).filter((p) => !size.policies || size.policies.includes(p));
    const edge = loadEdgeOverhead();
    const fleetKv = size.workers * kv.tokens;

    // Ideal prefill (the ceiling's hit, nothing queued) of each request: the load scale and the SLO. It
    // includes the vision tower's forward for media past the hit, as the workers charge it (worker-model.mjs).
    const idealPrefill = (trace, hits) => trace.map((r) => prefillMs(timing, r.tokens.length - hits[r.id], hits[r.id]) + encoderMs(timing, r.media ?? [], hits[r.id]));
    const generate = (name, seed, rate) => TRACES[name]({ seed, sessions: size.sessions[name], rate, ...(name === "docqa" ? { documents: size.documents } : {}) });
    const makeTrace = (name, seed) => {
      // The session start rate for the target load, from the trace generated at 1 session/s: the
      // generators draw the same numbers at every rate, so a rate only rescales session starts; a
      // paced session's later requests keep their offsets from its start (think and tool time),
      // other arrivals all scale. The trace at the chosen rate is that one re-timed (its requests
      // re-ordered by arrival). Paced sessions start over at least MIN_START_WINDOW_S; where that
      // caps the rate, the load is what that many sessions give (reported).
      const probe = generate(name, seed, 1);
      const probeIdeal = idealPrefill(probe, infiniteCacheHits(probe).hits);
      const first = new Map();
      for (const r of probe) if (!first.has(r.session)) first.set(r.session, r.at);
      const start = probe.map((r) => (PACED.has(name) ? first.get(r.session) : r.at));
      const atFor = (rate) => probe.map((r, i) => start[i] / rate + (r.at - start[i]));
      const loadAt = (rate) => windowLoad(atFor(rate), probeIdeal, size.workers);
      let rate;
      if (!PACED.has(name)) rate = TARGET_LOAD / loadAt(1);
      else {
        const max = size.sessions[name] / MIN_START_WINDOW_S;
        if (loadAt(max) <= TARGET_LOAD) rate = max;
        else {
          let lo = Math.log(max) - Math.log(1e4);
          let hi = Math.log(max);
          for (let k = 0; k < 40; k++) {
            const m = (lo + hi) / 2;
            if (loadAt(Math.exp(m)) < TARGET_LOAD) lo = m;
            else hi = m;
          }
          rate = Math.exp(hi);
        }
      }
      const at = atFor(rate);
      const trace = probe
        .map((r, i) => ({ ...r, at: at[i] }))
        .sort((a, b) => a.at - b.at)
        .map((r, id) => ({ ...r, id }));
      const { hits, workingSetTokens } = infiniteCacheHits(trace);
      const ideal = idealPrefill(trace, hits);
      return { trace, hits, workingSetTokens, ideal, rate, load: windowLoad(trace.map((r) => r.at), ideal, size.workers) };
    };

    const names = Object.keys(TRACES).filter((n) => !size.traces || size.traces.includes(n));
    const total = names.reduce((n, name) => n + policiesOf(name).length, 0) * size.seeds.length * size.capacities.length;
    let done = 0;
    const out = {};
    for (const name of names) {
      const policies = policiesOf(name);
      const perSeed = [];
      for (const seed of size.seeds) {
        ctx.progress(done / total, `routing ${name} seed ${seed}: trace`);
        const t = makeTrace(name, seed);
        const totalTokens = t.trace.reduce((s, r) => s + r.tokens.length, 0);
        const ceiling = t.hits.reduce((a, b) => a + b, 0) / totalTokens;
        const slo = t.ideal.map(sloMs);
        const span = (t.trace[t.trace.length - 1].at - t.trace[0].at) / 1000;
        // The edge's overhead per request, drawn once per seed: every policy meets the same draws.
        const edgeMs = sampleEdgeOverheads(edge, t.trace, seed);
        const edgeQ = summarize(edgeMs);
        const runs = {};
        const learnedRates = {};
        for (const factor of size.capacities) {
          const capacityTokens = Math.round(kv.tokens * factor);
          const rows = {};
          for (const policy of policies) {
            ctx.progress(done++ / total, `routing ${name} seed ${seed} ${factor}× KV: ${policy}`);
            const { results, served, learnedPrefillRates } = simulate(t.trace, { policy, workers: size.workers, capacityTokens, timing, lagMs: RELAY_LAG_MS, seed, ...(size.learnPrefillRate !== null ? { learnPrefillRate: size.learnPrefillRate } : {}) });
            const cached = results.reduce((s, r) => s + r.cached, 0);
            const ttft = summarize(results.map((r) => r.ttft));
            const e2eOf = results.map((r) => r.ttft + edgeMs[r.id]);
            const e2e = summarize(e2eOf);
            const met = results.filter((r, k) => e2eOf[k] <= slo[r.id]).length;
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
            // Per worker, the prefill rate kvedge's index learned (tokens/s; the replay's hellos report none).
            if (learnedPrefillRates?.some((r) => r !== null)) (learnedRates[factor] ??= {})[policy] = learnedPrefillRates.map((r) => (r === null ? null : Math.round(r)));
          }
          runs[factor] = rows;
        }
        const media = MEDIA_TRACES.has(name) ? { media: mediaShape(t.trace) } : {};
        perSeed.push({
          seed,
          shape: { ...traceShape(t.trace), ...media, workingSetTokens: t.workingSetTokens, workingSetOfFleetKv: t.workingSetTokens / fleetKv },
          ceiling,
          load: t.load,
          sessionRatePerS: t.rate,
          offeredRps: t.trace.length / span,
          edgeOverheadMs: { p50: edgeQ.p50, p99: edgeQ.p99, mean: edgeQ.mean },
          runs,
          learnedRates,
        });
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
        workingSetOfFleetKv: acrossSeeds(perSeed.map((s) => s.shape.workingSetOfFleetKv)),
        offeredRps: acrossSeeds(perSeed.map((s) => s.offeredRps)),
        edgeOverheadP50: acrossSeeds(perSeed.map((s) => s.edgeOverheadMs.p50)),
        edgeOverheadP99: acrossSeeds(perSeed.map((s) => s.edgeOverheadMs.p99)),
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
        metric: `${name}: trace (seed ${o.seeds[0].seed}) — requests, input mean / p90 / max, follow-up prefix share p10–p90; working set ÷ fleet KV (${size.workers} × ${(kv.tokens / 1e6).toFixed(2)} M tokens); ideal-prefill load; offered req/s; infinite-cache ceiling; edge overhead drawn p50 / p99 ms; policies`,
        value: `${shape.requests}, ${shape.inputTokens.mean} / ${shape.inputTokens.p90} / ${shape.inputTokens.max} tok, ${shape.followUpPrefixShare.p10 ?? "–"}–${shape.followUpPrefixShare.p90 ?? "–"}; ${f(o.workingSetOfFleetKv, 2)}; ${f(o.load, 2)}; ${f(o.offeredRps, 2)}; ${f(o.ceiling, 1, 100)} %; ${f(o.edgeOverheadP50, 1)} / ${f(o.edgeOverheadP99, 1)}; ${o.policies.length}`,
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
          metric: `${name} ${top}× KV: ${policy} — hit ÷ ceiling, goodput at the SLO (end to end), SLO met, TTFT p50 / p99 worker, end to end`,
          value: `${f(r.hitOfCeiling, 2)}, ${f(r.goodputRps, 2)} req/s, ${f(r.sloAttainment, 1, 100)} %, ${f(r.ttftP50)} / ${f(r.ttftP99)} ms, ${f(r.e2eTtftP50)} / ${f(r.e2eTtftP99)} ms`,
          unit: "",
          goal: "",
          pass: null,
        });
      }
      for (const factor of size.capacities.slice(1)) {
        const rows = o.byCapacity[factor];
        summary.push({
          metric: `${name} ${factor}× KV: goodput req/s (end-to-end TTFT p99 ms) — ${o.policies.join(" ; ")}`,
          value: o.policies.map((p) => `${rows[p].goodputRps.mean.toFixed(2)} (${rows[p].e2eTtftP99.mean.toFixed(0)})`).join(" ; "),
          unit: "",
          goal: "",
          pass: null,
        });
      }
      // The issue's goals at every capacity, kvedge against each other policy per seed (compare()):
      // "best" only where it is ahead of every other policy; a tie says with which.
      const goodput = [];
      const p99 = [];
      let behind = false;
      let p99Behind = false;
      for (const factor of size.capacities) {
        const rows = o.byCapacity[factor];
        const others = o.policies.filter((p) => p !== "kvedge");
        const verdict = Object.fromEntries(others.map((p) => [p, compare(rows.kvedge.goodputRps, rows[p].goodputRps, true)]));
        const ahead = others.filter((p) => verdict[p] === "worse");
        const ties = others.filter((p) => verdict[p] === "tie");
        const k = rows.kvedge.goodputRps.mean.toFixed(2);
        if (ahead.length) {
          behind = true;
          goodput.push(`${factor}×: behind ${ahead.map((p) => `${p} (${k} < ${rows[p].goodputRps.mean.toFixed(2)})`).join(", ")}`);
        } else if (ties.length) goodput.push(`${factor}×: tie with ${ties.length === others.length ? "all" : ties.join(", ")} (${k} req/s)`);
        else goodput.push(`${factor}×: best (${k} req/s)`);
        const v = compare(rows.kvedge.e2eTtftP99, rows["least-loaded"].e2eTtftP99, false);
        if (v === "worse") p99Behind = true;
        p99.push(`${factor}×: ${v === "better" ? "lower" : v === "tie" ? "tie" : "higher"} (${rows.kvedge.e2eTtftP99.mean.toFixed(0)} vs ${rows["least-loaded"].e2eTtftP99.mean.toFixed(0)} ms)`);
      }
      summary.push({ metric: `${name}: kvedge goodput at the SLO against every other policy, per KV size (best / tie within the seed spread / behind)`, value: goodput.join("; "), unit: "", goal: "best or tie", pass: !behind });
      summary.push({ metric: `${name}: kvedge end-to-end TTFT p99 against least-loaded's, per KV size (lower / tie / higher)`, value: p99.join("; "), unit: "", goal: "lower or tie", pass: !p99Behind });
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
          title: `Goodput at the end-to-end TTFT SLO (max(${SLO_FLOOR_MS / 1000} s, ${SLO_FACTOR}× ideal prefill)), ${top}× KV, mean of ${size.seeds.length} seeds`,
          unit: "requests/s meeting the SLO",
          bars: names.flatMap((n) => out[n].policies.map((p) => ({ label: `${n} ${p}`, value: out[n].byCapacity[top][p].goodputRps.mean, group: n }))),
        }),
      },
      {
        file: "routing-ttft.svg",
        svg: barChart({
          title: `End-to-end TTFT p99 (worker + edge), ${top}× KV, mean of ${size.seeds.length} seeds`,
          unit: "ms",
          log: true,
          bars: names.flatMap((n) => out[n].policies.map((p) => ({ label: `${n} ${p}`, value: Math.max(1, out[n].byCapacity[top][p].e2eTtftP99.mean), group: n }))),
        }),
      },
    ];
    return {
      summary,
      details: {
        policies: size.policies ? POLICIES.filter((p) => size.policies.includes(p)) : POLICIES,
        // The env narrowing this run took (null: the whole suite); its figures are not the committed run's.
        narrowing: size.narrowing,
        llmdWeights: LLMD_WEIGHTS,
        workers: size.workers,
        seeds: size.seeds,
        pageSize: PAGE,
        relayLagMs: RELAY_LAG_MS,
        targetLoad: TARGET_LOAD,
        loadWindowTail: LOAD_WINDOW_TAIL,
        minStartWindowS: MIN_START_WINDOW_S,
        tie: { rule: "kvedge against another policy per seed: a tie when |mean difference| ≤ max(sd of the differences over seeds, tieFloor × the other's mean)", tieFloor: TIE_FLOOR },
        slo: { floorMs: SLO_FLOOR_MS, factorOfIdealPrefill: SLO_FACTOR, judgedOn: "end-to-end TTFT: worker TTFT + the edge overhead drawn for the request" },
        kvCapacity: { ...kv, factors: size.capacities, fleetTokens: fleetKv },
        edgeOverhead: edge,
        timing,
        traces: out,
      },
      plots,
    };
  },
};
