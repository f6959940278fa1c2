// Growing conversations through the real edge (part of the "edge" suite): many live conversations
// in one isolate, their turns interleaved round-robin, each request the whole history plus what the
// turn adds, until the history passes `targetTokens`:
//   chat   a user question (~300 tokens) and, on the next turn, the answer (~3000 tokens);
//   agent  an assistant tool call and its tool output (~10000 tokens), then the next call;
//   vision a user question with an image each turn (one of four, 1024–1920 px), the answer (~1500 tokens).
// Requests go one at a time (a shared two-core box would otherwise measure contention), so
// "concurrent" means interleaved in one isolate: every conversation's state competes for the
// isolate's caches. Per turn, overhead = edge − direct as in the rest of the suite, and the same
// body through the proxy floor (bench/edge/turn-sends.mjs: the worker sees the body once first;
// edge, floor and direct take turns in every order). CPU per send from /proc at ns resolution
// (every thread's schedstat), each edge-process send read apart with its waitUntil tail: the edge's
// workerd process (the edge isolate, its runtime, its side of the routing-index RPCs), beside it
// that process's main thread alone (the isolate and its event loop, without V8's background compile
// and GC thread); the same for the proxy floor, and kvedge's own = edge − floor per turn; the
// routing index's process (route, settle, and the relay's KV-event ingest for the turn's sends,
// the floor's RPCs taken out) apart. Reuse: the share of turns whose earlier messages came from the turn chain
// (x-kvedge-prompt-reused-messages, admin callers).
// Cache hit rates: the isolate's own counters (GET /admin/edge-caches) before and after each run.
import { nativeWorkerdPid, processAndMainThreadCpuMs, processCpuPreciseMs } from "../lib/process-cpu.mjs";
import { summarize } from "../lib/stats.mjs";
import { measuredSends } from "./turn-sends.mjs";

/** History bins (tokens) the figures are reported in; the goals are set at 32k and 100k. */
export const HISTORY_BINS = [
  ["≤8k", 0, 8_000],
  ["8–24k", 8_000, 24_000],
  ["24–40k (32k)", 24_000, 40_000],
  ["40–80k", 40_000, 80_000],
  ["80–120k (100k)", 80_000, 120_000],
];

/**
 * Runs `runs` passes of the workload. `io`: { edge, direct, floor (URLs), admin, body(messages),
 * fresh(tokens), image(i) → a content part, timedPost, edgePid, indexPid (the index's own process),
 * edgeCaches() → GET /admin/edge-caches }. Returns per-kind, per-bin figures.
 */
export async function runConversations(ctx, io, { runs, perKind, targetTokens }) {
  const samples = [];
  const cacheRuns = [];
  const edgePid = nativeWorkerdPid(io.edgePid);
  const indexPid = nativeWorkerdPid(io.indexPid);
  const cpu = () => {
    const e = processAndMainThreadCpuMs(edgePid);
    return { edge: e.process, edgeIsolate: e.mainThread, index: processCpuPreciseMs(indexPid) };
  };
  let sent = 0;
  for (let run = 0; run < runs; run++) {
    const convs = [];
    for (const kind of ["chat", "agent", "vision"]) for (let i = 0; i < perKind[kind]; i++) convs.push({ kind, id: `${kind}-${run}-${i}`, messages: [{ role: "system", content: `You are assistant ${i}. Keep answers grounded in the conversation.` }], turn: 0, done: false });
    const caches0 = await io.edgeCaches();
    let promptTokens = 0;
    let round = 0;
    while (convs.some((c) => !c.done)) {
      ctx.progress?.(0, `edge conversations: run ${run + 1}/${runs}, round ${round++}`);
      for (const c of convs) {
        if (c.done) continue;
        extend(c, io);
        const b = io.body(c.messages);
        const urls = { edge: io.edge, floor: io.floor, direct: io.direct };
        const m = await measuredSends({ i: sent++, send: (t) => io.timedPost(urls[t], b, false, t === "edge" ? io.admin : {}), cpu, pids: [edgePid, indexPid] });
        const { edge: e, direct: d } = m;
        const tokens = JSON.parse(d.text).usage?.prompt_tokens ?? Number(e.headers.get("x-kvedge-total-blocks")) * 16;
        promptTokens += tokens;
        const reused = Number(e.headers.get("x-kvedge-prompt-reused-messages") ?? 0);
        samples.push({ kind: c.kind, run, tokens, overhead: e.total - d.total, edge: e.total, reused: reused > 0, first: c.turn === 0, edgeCpu: m.edgeCpu, edgeIsolateCpu: m.edgeIsolateCpu, floorCpu: m.floorCpu, floorIsolateCpu: m.floorIsolateCpu, ownCpu: m.edgeCpu - m.floorCpu, indexCpu: m.indexCpu });
        c.turn++;
        if (tokens >= targetTokens) c.done = true;
      }
    }
    cacheRuns.push(cacheFigures(caches0, await io.edgeCaches(), promptTokens));
  }
  return { ...summarizeConversations(samples), caches: cacheRuns };
}

/**
 * The same workload with `inFlight` edge requests at a time (conversations take turns in `inFlight`
 * lanes; a conversation's next turn waits for its answer), edge requests only — under concurrency a
 * per-request edge − direct or CPU delta would mix requests, so this reports totals: edge requests
 * per second, each process's CPU per edge request (its CPU over the phase ÷ requests), edge latency
 * p50/p99, and the turn chain's hit share. A CPU per request near the one-at-a-time figure means
 * interleaved state costs the isolate no extra work.
 */
export async function runConcurrentConversations(ctx, io, { perKind, targetTokens }, inFlight) {
  const edgePid = nativeWorkerdPid(io.edgePid);
  const indexPid = io.indexPid ? nativeWorkerdPid(io.indexPid) : null;
  const convs = [];
  for (const kind of ["chat", "agent", "vision"]) for (let i = 0; i < perKind[kind]; i++) convs.push({ kind, id: `${kind}-c-${i}`, messages: [{ role: "system", content: `You are assistant ${i}. Keep answers grounded in the conversation.` }], turn: 0, done: false });
  const lanes = Array.from({ length: inFlight }, (_, k) => convs.filter((_, i) => i % inFlight === k));
  const latency = [];
  let hits = 0;
  let later = 0;
  const edge0 = processCpuPreciseMs(edgePid);
  const index0 = indexPid ? processCpuPreciseMs(indexPid) : NaN;
  const t0 = performance.now();
  await Promise.all(
    lanes.map(async (lane) => {
      while (lane.some((c) => !c.done)) {
        for (const c of lane) {
          if (c.done) continue;
          extend(c, io);
          const e = await io.timedPost(io.edge, io.body(c.messages), false, io.admin);
          latency.push(e.total);
          if (c.turn > 0) {
            later++;
            if (Number(e.headers.get("x-kvedge-prompt-reused-messages") ?? 0) > 0) hits++;
          }
          c.turn++;
          if (Number(e.headers.get("x-kvedge-total-blocks")) * 16 >= targetTokens) c.done = true;
        }
        ctx.progress?.(0, `edge conversations: ${inFlight} in flight, ${latency.length} requests`);
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const l = summarize(latency);
  return {
    inFlight,
    requests: latency.length,
    requestsPerSecond: latency.length / seconds,
    edgeCpuPerRequest: (processCpuPreciseMs(edgePid) - edge0) / latency.length,
    indexCpuPerRequest: indexPid ? (processCpuPreciseMs(indexPid) - index0) / latency.length : null,
    latencyP50: l.p50,
    latencyP99: l.p99,
    turnChainHitRate: later ? hits / later : null,
  };
}

/** One run's cache budgets and hit rates from the isolate's counters before (`a`) and after (`b`). */
function cacheFigures(a, b, promptTokens) {
  const d = (k, part) => b[part][k] - a[part][k];
  const budget = Object.fromEntries(b.caches.map((c) => [c.name, { maxBytes: c.maxBytes, bytesAtEnd: c.bytes, entriesAtEnd: c.entries }]));
  const prefixLookups = d("hits", "promptPrefix") + d("misses", "promptPrefix");
  const chainLookups = d("hits", "turnChain") + d("misses", "turnChain");
  return {
    budget,
    promptPrefixMaxTokens: b.promptPrefix.maxTokens,
    promptPrefixHitRate: prefixLookups ? d("hits", "promptPrefix") / prefixLookups : null,
    promptPrefixLookups: prefixLookups,
    promptPrefixBypassed: d("bypassed", "promptPrefix"),
    /** Tokens the prefix cache supplied ÷ all prompt tokens of the run's edge requests. */
    promptPrefixTokenHitRate: promptTokens ? d("reusedTokens", "promptPrefix") / promptTokens : null,
    promptPrefixEvictions: d("evictions", "promptPrefix"),
    turnChainHitRate: chainLookups ? d("hits", "turnChain") / chainLookups : null,
    turnChainLookups: chainLookups,
    turnChainEvictions: d("evictions", "turnChain"),
    turnChainMismatches: d("mismatches", "turnChain"),
  };
}

/** Appends what turn `c.turn` adds to conversation `c` (the turn shapes above; the budget-pressured pass takes the same). */
export function extend(c, io) {
  const m = c.messages;
  if (c.kind === "chat") {
    if (c.turn > 0) m.push({ role: "assistant", content: io.fresh(3000) });
    m.push({ role: "user", content: io.fresh(300) });
  } else if (c.kind === "agent") {
    if (c.turn === 0) m.push({ role: "user", content: `Investigate the repository and report. ${io.fresh(200)}` });
    else {
      const id = `call_${c.id}_${c.turn}`;
      m.push({ role: "assistant", content: "", tool_calls: [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/file-${c.turn}.ts` }) } }] });
      m.push({ role: "tool", tool_call_id: id, content: io.fresh(10_000) });
    }
  } else {
    if (c.turn > 0) m.push({ role: "assistant", content: io.fresh(1500) });
    m.push({ role: "user", content: [{ type: "text", text: io.fresh(100) }, io.image(c.turn)] });
  }
}

function summarizeConversations(samples) {
  const mean = (key) => samples.reduce((a, x) => a + x[key], 0) / Math.max(1, samples.length);
  // Every turn, every kind: the one-at-a-time figure the concurrent phase compares with.
  const out = { kinds: {}, perRun: {}, samples: samples.length, edgeCpuMeanPerRequest: mean("edgeCpu"), indexCpuMeanPerTurn: mean("indexCpu") };
  const warmIn = (ks, lo, hi) => ks.filter((s) => !s.first && s.reused && s.tokens > lo && s.tokens <= hi);
  for (const kind of ["chat", "agent", "vision"]) {
    const ks = samples.filter((s) => s.kind === kind);
    const reuse = ks.filter((s) => !s.first);
    const bins = {};
    for (const [name, lo, hi] of HISTORY_BINS) {
      // Every later turn in the bin, whether the turn chain held its history or not (what an edge
      // sees at this hit rate), and the hits alone (the warm turn the goals are set for).
      const all = ks.filter((s) => !s.first && s.tokens > lo && s.tokens <= hi);
      const warm = warmIn(ks, lo, hi);
      if (all.length === 0) continue;
      const allCpu = summarize(all.map((s) => s.edgeCpu));
      const allWall = summarize(all.map((s) => s.overhead));
      const mixed = { n: all.length, hitRate: warm.length / all.length, edgeCpuP50: allCpu.p50, edgeCpuP99: allCpu.p99, overheadP50: allWall.p50, overheadP99: allWall.p99 };
      if (warm.length === 0) {
        bins[name] = { n: 0, all: mixed };
        continue;
      }
      const o = summarize(warm.map((s) => s.overhead));
      const ec = summarize(warm.map((s) => s.edgeCpu));
      const iso = summarize(warm.map((s) => s.edgeIsolateCpu));
      const ic = summarize(warm.map((s) => s.indexCpu));
      const p50 = (key) => summarize(warm.map((s) => s[key])).p50;
      bins[name] = { n: warm.length, overheadP50: o.p50, overheadP99: o.p99, edgeCpuP50: ec.p50, edgeCpuP99: ec.p99, edgeCpuMean: ec.mean, edgeIsolateCpuP50: iso.p50, edgeIsolateCpuP99: iso.p99, floorCpuP50: p50("floorCpu"), floorIsolateCpuP50: p50("floorIsolateCpu"), ownCpuP50: p50("ownCpu"), indexCpuP50: ic.p50, indexCpuMean: ic.mean, all: mixed };
    }
    const w = ks.filter((s) => !s.first && s.reused);
    out.kinds[kind] = {
      turns: ks.length,
      reuseRate: reuse.length ? reuse.filter((s) => s.reused).length / reuse.length : null,
      bins,
      growthUsPer1kTokens: slopeUsPer1k(w, "overhead"),
      edgeCpuGrowthUsPer1kTokens: slopeUsPer1k(w, "edgeCpu"),
      floorCpuGrowthUsPer1kTokens: slopeUsPer1k(w, "floorCpu"),
      ownCpuGrowthUsPer1kTokens: slopeUsPer1k(w, "ownCpu"),
      edgeCpuGrowthTheilSenUsPer1kTokens: theilSenUsPer1k(w, "edgeCpu"),
      floorCpuGrowthTheilSenUsPer1kTokens: theilSenUsPer1k(w, "floorCpu"),
      ownCpuGrowthTheilSenUsPer1kTokens: theilSenUsPer1k(w, "ownCpu"),
    };
    // Per run: the warm turns at the goal sizes (32k, 100k bins), n and p50 / p99 of each.
    const runs = [...new Set(ks.map((s) => s.run))];
    const figures = (w) => {
      if (w.length === 0) return { n: 0, edgeCpuP50: null, edgeCpuP99: null, overheadP50: null };
      const ec = summarize(w.map((s) => s.edgeCpu));
      return { n: w.length, edgeCpuP50: ec.p50, edgeCpuP99: ec.p99, overheadP50: summarize(w.map((s) => s.overhead)).p50 };
    };
    out.perRun[kind] = runs.map((r) => {
      const rs = ks.filter((s) => s.run === r);
      return { at32k: figures(warmIn(rs, 24_000, 40_000)), at100k: figures(warmIn(rs, 80_000, 120_000)) };
    });
  }
  return out;
}

/**
 * Theil–Sen slope of `key` (ms) on history tokens over samples `w` (the median of the slopes of all
 * pairs whose histories differ): µs per 1k tokens. A few preempted turns (a p99 of 50 ms among 3 ms
 * turns) move least squares by ±10 µs per 1k; the median of pairwise slopes is the growth of the
 * typical turn, as the goals' other figures are p50s.
 */
function theilSenUsPer1k(w, key) {
  const slopes = [];
  for (let i = 0; i < w.length; i++)
    for (let j = i + 1; j < w.length; j++) {
      const dx = w[j].tokens - w[i].tokens;
      if (dx !== 0) slopes.push((w[j][key] - w[i][key]) / dx);
    }
  if (slopes.length === 0) return null;
  slopes.sort((a, b) => a - b);
  const m = slopes.length >> 1;
  const median = slopes.length % 2 ? slopes[m] : (slopes[m - 1] + slopes[m]) / 2;
  return median * 1000 * 1000;
}

/** Least squares of `key` (ms) on history tokens over samples `w`: µs per 1k tokens. */
function slopeUsPer1k(w, key) {
  if (w.length <= 2) return null;
  const mx = w.reduce((a, s) => a + s.tokens, 0) / w.length;
  const my = w.reduce((a, s) => a + s[key], 0) / w.length;
  const sxy = w.reduce((a, s) => a + (s.tokens - mx) * (s[key] - my), 0);
  const sxx = w.reduce((a, s) => a + (s.tokens - mx) ** 2, 0);
  return sxx > 0 ? (sxy / sxx) * 1000 * 1000 : null;
}
