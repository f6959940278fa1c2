// The budget-pressured pass of the edge suite: the growing conversations of conversations.mjs (the
// same turn shapes), but so many of them live in one isolate that their state outgrows the edge's
// caches (the turn chain's, the prompt prefix's, the media views'), so some later turns find their
// history evicted and pay for it whole. Every conversation starts at once; each step sends the next
// turn of one live conversation picked at random (seeded), so a conversation's turns are as far
// apart as the other conversations' traffic makes them, and the hit rate is what LRU gives at that
// working set, not one chosen. Isolate affinity is assumed: every turn of a conversation reaches
// this one isolate (in production a turn may reach another, which is a miss like the ones here).
// Edge requests only (no direct or floor send: the pass reports edge CPU, not overhead), one at a
// time; per send the edge process's CPU and its main thread's (turn-sends.mjs edgeSendCpu), and
// the isolate's cache counters (GET /admin/edge-caches) after it, so each turn's hits and misses
// are its own.
import { nativeWorkerdPid, processAndMainThreadCpuMs, processCpuPreciseMs } from "../lib/process-cpu.mjs";
import { rng, summarize } from "../lib/stats.mjs";
import { extend } from "./conversations.mjs";
import { edgeSendCpu } from "./turn-sends.mjs";

/** The 32k and 100k bins of conversations.mjs HISTORY_BINS, where the goals are set. */
const GOAL_BINS = [
  ["24–40k (32k)", 24_000, 40_000],
  ["80–120k (100k)", 80_000, 120_000],
];

/** Cache counters a turn moves: [report part, counter] → the turn's delta. */
const COUNTERS = {
  turnChainHits: ["turnChain", "hits"],
  turnChainMisses: ["turnChain", "misses"],
  prefixHits: ["promptPrefix", "hits"],
  prefixMisses: ["promptPrefix", "misses"],
  prefixReusedTokens: ["promptPrefix", "reusedTokens"],
  viewHits: ["mediaViews", "hits"],
  viewMisses: ["mediaViews", "misses"],
};

function deltas(a, b) {
  return Object.fromEntries(Object.entries(COUNTERS).map(([k, [part, c]]) => [k, b[part][c] - a[part][c]]));
}

/**
 * `io` as for runConversations (conversations.mjs); `perKind` { chat, agent, vision } conversations,
 * each until its history passes `targetTokens`. Returns per kind: turns, hit rates (turn chain,
 * prompt prefix lookups and tokens, media views), edge CPU over all later turns (hits and misses
 * together) and apart, the goal bins' blended figures; and the budgets, the live history at the
 * end, the caches' evictions.
 */
export async function runPressuredConversations(ctx, io, { perKind, targetTokens, seed }) {
  const edgePid = nativeWorkerdPid(io.edgePid);
  const indexPid = nativeWorkerdPid(io.indexPid);
  const cpu = () => {
    const e = processAndMainThreadCpuMs(edgePid);
    return { edge: e.process, edgeIsolate: e.mainThread, index: processCpuPreciseMs(indexPid) };
  };
  const random = rng(seed);
  const convs = [];
  for (const kind of ["chat", "agent", "vision"]) for (let i = 0; i < perKind[kind]; i++) convs.push({ kind, id: `${kind}-p-${i}`, messages: [{ role: "system", content: `You are assistant ${i}. Keep answers grounded in the conversation.` }], turn: 0, done: false, tokens: 0 });
  const first = await io.edgeCaches();
  let before = first;
  const samples = [];
  for (let live = convs.filter((c) => !c.done); live.length > 0; live = convs.filter((c) => !c.done)) {
    if (samples.length % 20 === 0) ctx.progress?.(0, `edge conversations, budget-pressured: ${samples.length} turns, ${live.length} conversations live`);
    const c = live[Math.floor(random() * live.length)];
    extend(c, io);
    const b = io.body(c.messages);
    const sent = await edgeSendCpu(() => io.timedPost(io.edge, b, false, io.admin), cpu, [edgePid, indexPid]);
    const after = await io.edgeCaches();
    const e = sent.response;
    c.tokens = JSON.parse(e.text).usage?.prompt_tokens ?? Number(e.headers.get("x-kvedge-total-blocks")) * 16;
    const d = deltas(before, after);
    before = after;
    samples.push({ kind: c.kind, first: c.turn === 0, tokens: c.tokens, hit: Number(e.headers.get("x-kvedge-prompt-reused-messages") ?? 0) > 0, edgeCpu: sent.process, edgeIsolateCpu: sent.mainThread, wall: e.total, ...d });
    c.turn++;
    if (c.tokens >= targetTokens) c.done = true;
  }
  const last = await io.edgeCaches();
  return {
    perKind,
    targetTokens,
    turns: samples.length,
    /** Every conversation's history at the end, summed: the state the caches were asked to hold. */
    liveHistoryTokensAtEnd: convs.reduce((a, c) => a + c.tokens, 0),
    budgets: Object.fromEntries(last.caches.map((x) => [x.name, { maxBytes: x.maxBytes, bytesAtEnd: x.bytes, entriesAtEnd: x.entries }])),
    promptPrefixMaxTokens: last.promptPrefix.maxTokens,
    evictions: { turnChain: last.turnChain.evictions - first.turnChain.evictions, promptPrefix: last.promptPrefix.evictions - first.promptPrefix.evictions },
    kinds: Object.fromEntries(["chat", "agent", "vision"].filter((k) => perKind[k] > 0).map((kind) => [kind, kindFigures(samples.filter((s) => s.kind === kind))])),
  };
}

const rate = (hits, misses) => (hits + misses > 0 ? hits / (hits + misses) : null);
const sum = (xs, key) => xs.reduce((a, s) => a + s[key], 0);

/**
 * Edge CPU p50 / p99 / mean (process and main thread) and wall p50 / p99 over turns `xs`, with their
 * turn-chain hit share. The mean over hits and misses together is h·warm + (1 − h)·cold, the CPU an
 * edge spends per turn at this hit rate; the p50 sits among the hits while they are the majority.
 */
function cpuFigures(xs) {
  if (xs.length === 0) return { n: 0 };
  const e = summarize(xs.map((s) => s.edgeCpu));
  const t = summarize(xs.map((s) => s.edgeIsolateCpu));
  const w = summarize(xs.map((s) => s.wall));
  return { n: xs.length, hitRate: xs.filter((s) => s.hit).length / xs.length, edgeCpuP50: e.p50, edgeCpuP99: e.p99, edgeCpuMean: e.mean, edgeIsolateCpuP50: t.p50, edgeIsolateCpuP99: t.p99, wallP50: w.p50, wallP99: w.p99 };
}

function kindFigures(ks) {
  // First turns are excluded, as in the all-hits pass (a new conversation has nothing to find).
  const later = ks.filter((s) => !s.first);
  return {
    turns: ks.length,
    turnChainHitRate: later.length ? later.filter((s) => s.hit).length / later.length : null,
    turnChainLookupHitRate: rate(sum(later, "turnChainHits"), sum(later, "turnChainMisses")),
    promptPrefixHitRate: rate(sum(later, "prefixHits"), sum(later, "prefixMisses")),
    promptPrefixTokenHitRate: sum(later, "tokens") ? sum(later, "prefixReusedTokens") / sum(later, "tokens") : null,
    viewHashHitRate: rate(sum(later, "viewHits"), sum(later, "viewMisses")),
    all: cpuFigures(later),
    hits: cpuFigures(later.filter((s) => s.hit)),
    misses: cpuFigures(later.filter((s) => !s.hit)),
    bins: Object.fromEntries(GOAL_BINS.map(([name, lo, hi]) => [name, cpuFigures(later.filter((s) => s.tokens > lo && s.tokens <= hi))])),
  };
}
