// Suite "index": the routing index (src/block-index/radix-index.ts via RoutingCore) at 64 workers and 1 M
// indexed (worker, block) entries: find-matches latency, event ingestion rate, memory per block.
import { rng, summarize, zipf } from "../lib/stats.mjs";
import { topSelfTime } from "../lib/profile.mjs";
import { barChart } from "../lib/svg.mjs";
import { measureKeptWalkCosts, measureRouteCall, measureRouteSteps, slopePer1k } from "../lib/route-call.mjs";
import { interleavedChats } from "../lib/interleaved-chats.mjs";

const gc = globalThis.gc ?? (() => {});
/** This process's minor page faults so far (first touches of fresh pages). */
const minorFaults = () => process.resourceUsage().minorPageFault;
/** 1000 → "1 000" (the tables' digit grouping). */
const spaced = (n) => n.toLocaleString("en").replaceAll(",", " ");
// JS heap plus ArrayBuffer backing stores (typed-array storage lives outside the JS heap).
const heap = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};

/**
 * What a first touch of a fresh 4 KiB page costs on this machine: a 64 MiB typed array (fresh pages
 * from the allocator, as the index's grown tables get them) written once per page, minus the same
 * loop over the now-resident pages; three rounds, the median. Per page fault, as counted by the OS.
 */
function firstTouchCost() {
  const PAGE = 4096;
  const rounds = [];
  for (let r = 0; r < 3; r++) {
    const a = new Uint8Array(64 << 20);
    const f0 = minorFaults();
    let t = performance.now();
    for (let i = 0; i < a.length; i += PAGE) a[i] = 1;
    const fresh = performance.now() - t;
    const faults = minorFaults() - f0;
    t = performance.now();
    for (let i = 0; i < a.length; i += PAGE) a[i] = 2;
    const resident = performance.now() - t;
    rounds.push({ usPerFault: ((fresh - resident) * 1000) / Math.max(1, faults), faults });
    gc();
  }
  rounds.sort((x, y) => x.usPerFault - y.usPerFault);
  return rounds[1];
}

export default {
  name: "index",
  title: "Routing index: find matches, ingestion, memory",
  async run(ctx) {
    // zod as workerd runs it: without its compiled fast path (workerd forbids code generation).
    (await import("zod")).z.config({ jitless: true });
    const { RoutingCore } = await import("../../src/routing-index/routing-core.ts");
    const { RadixIndex } = await import("../../src/block-index/radix-index.ts");
    const { localHashToHex, RelayEventsSchema } = await import("../../src/relay-wire/relay-protocol.ts");
    const { parseRelayMessage } = await import("../../src/relay-wire/relay-message.ts");
    const WORKERS = 64;
    // --quick builds a quarter of the index: the 1 M-block figures come from full runs.
    const TOTAL = ctx.tiny ? 20_000 : ctx.quick ? 250_000 : 1_000_000;
    const CHAIN = 64;
    const random = rng(0x1dec5);
    const u64 = () => (BigInt(Math.floor(random() * 2 ** 32)) << 32n) | BigInt(Math.floor(random() * 2 ** 32));
    // 400 popular prompts (Zipf) replicated on several workers, the rest unique per worker; every
    // chain starts with one of 32 shared system-prompt prefixes of 8 blocks.
    const prefixes = Array.from({ length: 32 }, () => Array.from({ length: 8 }, u64));
    const popular = Array.from({ length: 400 }, () => Array.from({ length: CHAIN - 8 }, u64));
    const pickPrefix = zipf(32, 1.1, random);
    const pickPopular = zipf(400, 1.0, random);
    let engineSeq = 1n;
    const chainOf = (w) => {
      const pre = prefixes[pickPrefix()];
      const rest = random() < 0.3 ? popular[pickPopular()] : Array.from({ length: CHAIN - 8 }, u64);
      return pre.concat(rest);
    };

    const newCore = () => {
      // 1 M entries is above an object's default block budget (src/block-index/block-budget.ts): the suite
      // measures the index itself at that size, so the budget is lifted here.
      // The suite times the radix index itself too, so it hands the core the index it then reads.
      const index = new RadixIndex();
      const core = new RoutingCore({ blockSize: 16, random, now: () => Date.now(), blockBudget: 1 << 23, indexBudgetBytes: Infinity, index });
      for (let w = 0; w < WORKERS; w++) {
        const id = `w${w}`;
        core.hello({ type: "hello", workerId: id, url: `http://10.0.0.${w}:30000`, blockSize: 16, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
        core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
      }
      return Object.assign(core, { index });
    };

    // --- memory + bulk build through applyEvents ---------------------------------------------------
    ctx.progress(0.02, "index build 1M blocks");
    const h0 = heap();
    const core = newCore();
    const chains = [];
    let buildMs = 0;
    // Add 64-block chains round-robin until the index holds TOTAL (worker, block) entries (prefix
    // blocks a worker already holds add no entry, so the count is checked, not assumed).
    for (let round = 0, before = -1; core.index.size < TOTAL; round++) {
      if (core.index.size === before) throw new Error(`index build stalled at ${core.index.size} entries (budget refusals: ${core.sizes().blocksRefused})`);
      before = core.index.size;
      for (let w = 0; w < WORKERS && core.index.size < TOTAL; w++) {
        const events = [];
        for (let e = 0; e < 4; e++) {
          const c = chainOf(w);
          if (w < 8 && chains.length < 2000) chains.push({ w, c });
          // Engine hashes are unique per (worker, position): a decimal int64 as SGLang sends them.
          events.push({ t: "stored", parent: null, blocks: c.map((l) => ({ h: String(engineSeq++ * 7919n), l: localHashToHex(l) })) });
        }
        const t = performance.now();
        const r = core.applyEvents(`w${w}`, { type: "events", epoch: 1, seq: round, events });
        buildMs += performance.now() - t;
        if (!r.ok) throw new Error(r.reason);
      }
      ctx.progress(0.02 + (0.3 * core.index.size) / TOTAL, "index build 1M blocks");
    }
    const h1 = heap();
    const entries = core.index.size;
    // Public API only: the index implementation is being reworked independently.
    const nodes = typeof core.index.nodeCount === "number" ? core.index.nodeCount : null;
    const inner = null;
    const storageBytes = typeof core.index.storageBytes === "function" ? core.index.storageBytes() : null;
    const bytesPerBlock = (h1 - h0) / entries;

    // --- find matches -----------------------------------------------------------------------------
    ctx.progress(0.35, "index find matches");
    const scores = new Int32Array(WORKERS);
    const popularQuery = prefixes[0].concat(popular[0]);
    const queries = {
      "popular (many workers, 64 deep)": () => popularQuery,
      "single worker, 64 deep": (i) => chains[i % chains.length].c,
      miss: () => Array.from({ length: 64 }, u64),
    };
    const missQ = Array.from({ length: 200 }, () => Array.from({ length: 64 }, u64));
    const fm = {};
    const iters = ctx.tiny ? 2_000 : ctx.quick ? 20_000 : 200_000;
    for (let i = 0; i < 20_000; i++) core.index.findMatches(chains[i % chains.length].c, scores); // JIT
    for (const [name, q] of Object.entries(queries)) {
      const qs = name === "miss" ? missQ : Array.from({ length: 200 }, (_, i) => q(i));
      const samples = new Float64Array(iters);
      for (let i = 0; i < iters; i++) {
        const query = qs[i % qs.length];
        const t = performance.now();
        core.index.findMatches(query, scores);
        samples[i] = (performance.now() - t) * 1000;
      }
      const t = performance.now();
      for (let i = 0; i < iters; i++) core.index.findMatches(qs[i % qs.length], scores);
      const s = summarize(samples);
      fm[name] = { p50us: s.p50, p99us: s.p99, meanUsBatched: ((performance.now() - t) * 1000) / iters, matchedWorkers: (core.index.findMatches(qs[0], scores), scores.filter((x) => x > 0).length) };
    }
    // Timer cost, for reading the µs figures.
    const tt = new Float64Array(100_000);
    for (let i = 0; i < tt.length; i++) {
      const t = performance.now();
      tt[i] = (performance.now() - t) * 1000;
    }
    const timerUs = summarize(tt).p50;
    // Full decision (find matches + scoring 64 workers + load + receipt).
    const routeSamples = new Float64Array(ctx.tiny ? 1000 : ctx.quick ? 5000 : 50_000);
    for (let i = 0; i < routeSamples.length; i++) {
      const q = chains[i % chains.length].c;
      const t = performance.now();
      const d = core.route({ localHashes: q, isl: 1024 });
      core.settle({ receiptId: d.receiptId, promptTokens: 1024, cachedTokens: 0, outcome: "ok" });
      routeSamples[i] = (performance.now() - t) * 1000;
    }
    const route = summarize(routeSamples);
    const fmProfile = await topSelfTime(() => {
      for (let i = 0; i < iters; i++) core.index.findMatches(chains[i % chains.length].c, scores);
    }, 6);

    // --- one route call by prompt length (bench/lib/route-call.mjs) ------------------------------
    ctx.progress(0.55, "index route call by prompt length");
    const routeBudget = ctx.tiny ? 0.05 : ctx.quick ? 0.3 : 1;
    const routeCall = await measureRouteCall({ budget: routeBudget });
    const routeCallApprox = await measureRouteCall({ budget: routeBudget, approximateWorker: true });
    // --tiny: the churn on 300 chats of 400 blocks, still more than the memo keeps (128 walks, 64 Ki blocks), a sixteenth of the blocks to insert.
    const keptWalkCosts = await measureKeptWalkCosts(ctx.tiny ? 3 : ctx.quick ? 9 : 21, ctx.tiny ? { chats: 300, blocks: 400 } : undefined);
    const routeSteps = await measureRouteSteps(102_400, ctx.tiny ? 20 : ctx.quick ? 100 : 400);

    // --- many long chats taking turns (bench/lib/interleaved-chats.mjs) ------------------------------
    // Each route another chat's next turn, where the route call above routes one chat again and again.
    // --quick halves the chats' length and the workers' KV, --tiny takes a tenth (smoke test).
    ctx.progress(0.57, "index chats taking turns");
    const scale = ctx.tiny ? 0.1 : ctx.quick ? 0.5 : 1;
    const chatShape = { minBlocks: 2000 * scale, maxBlocks: 6400 * scale, turns: ctx.tiny ? 80 : 300 };
    const capBlocks = 45_000 * scale;
    // An index budget below the chats' blocks: every worker past its share, marked approximate.
    const approxBudget = 400_000 * scale;
    // Few enough chats that the approximate index holds them all (no prune): next turns.
    const noEventsChats = 50;
    const chats = 200;
    // Only figures are kept: a pool of ~0.5 M entries left alive would slow the ingestion runs' GCs.
    const turnsOf = async (opts) => {
      const r = await interleavedChats({ ...chatShape, ...opts });
      return { routeMs: r.routeMs, setupMs: r.setupMs, workers: r.core.workers().length, approximateWorkers: r.approximateWorkers, refusedSends: r.refusedSends, sizes: r.core.sizes() };
    };
    const chatsTakingTurns = {
      shape: { ...chatShape, chats, capBlocks, approxBudget, noEventsChats },
      exact: await turnsOf({ chats, capBlocks }),
      approximate: await turnsOf({ chats, capBlocks, blockBudget: approxBudget }),
      withoutKvEvents: await turnsOf({ chats: noEventsChats, turns: 2 * chatShape.turns, kvEvents: false }),
    };
    const { exact: turnsExact, approximate: turnsApprox, withoutKvEvents: turnsNoEvents } = chatsTakingTurns;
    if (turnsExact.approximateWorkers !== 0) throw new Error(`chats taking turns: ${turnsExact.approximateWorkers} workers approximate with the default budget`);
    if (turnsApprox.approximateWorkers !== turnsApprox.workers) throw new Error(`chats taking turns: ${turnsApprox.approximateWorkers} of ${turnsApprox.workers} workers approximate at a budget of ${approxBudget} blocks`);
    const turnsRow = (metric, r) => ({ metric, value: `${r.routeMs.p50.toFixed(2)} / ${r.routeMs.p99.toFixed(2)} / ${r.routeMs.max.toFixed(1)}`, unit: "ms", goal: "", pass: null });
    const count = (n) => n.toLocaleString("en").replaceAll(",", " ");

    // --- ingestion --------------------------------------------------------------------------------
    ctx.progress(0.6, "index event ingestion");
    const ingestBlocks = ctx.tiny ? 20_000 : ctx.quick ? 150_000 : 1_000_000;
    // Relay batches: 8 events per message, each a 32-block chain (a prompt's uncached tail). The
    // frames are kept as JSON text, as they arrive, and parsed a slice at a time outside the timed
    // loop: a million live block objects would make every GC that the index's own buffer growth
    // triggers (external memory pressure) mark a fixture heap an index object never has.
    const makeFrames = (count) => {
      const frames = [];
      const removeFrames = [];
      let made = 0;
      while (made < count) {
        const w = frames.length % WORKERS;
        const events = [];
        const rem = [];
        for (let e = 0; e < 8 && made < count; e++) {
          const blocks = Array.from({ length: 32 }, () => ({ h: String(engineSeq++ * 7919n), l: localHashToHex(u64()) }));
          made += blocks.length;
          events.push({ t: "stored", parent: null, blocks });
          rem.push({ t: "removed", hashes: blocks.map((b) => b.h).reverse() });
        }
        frames.push({ w: `w${w}`, json: JSON.stringify({ type: "events", epoch: 1, seq: frames.length, events }) });
        removeFrames.push({ w: `w${w}`, json: JSON.stringify({ type: "events", epoch: 1, seq: frames.length, events: rem }) });
      }
      return { frames, removeFrames };
    };
    const { frames, removeFrames } = makeFrames(ingestBlocks);
    // Steady state: a full object keeps storing new blocks while the engine evicts old ones.
    // Whole frames (256 blocks), so that each evicted frame of the fill is replaced block for block.
    const churnBlocks = Math.floor(ingestBlocks / 4 / 256) * 256;
    const churn = makeFrames(churnBlocks);
    const parsed = (list) => list.map(({ w, json }) => ({ w, m: JSON.parse(json) }));
    // Wall time and this process's CPU time (all threads: GC and compiler work the loop causes
    // count) of applyEvents alone: on a shared box other jobs stretch the wall clock of a CPU-bound
    // loop, not its CPU time (the goal is judged on both; a one-object index is single-threaded).
    const cpuMs = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    const SLICE = 64;
    const ingest = (core, list) => {
      let wallMs = 0;
      let cpu = 0;
      let faults = 0;
      for (let i = 0; i < list.length; i += SLICE) {
        const slice = parsed(list.slice(i, i + SLICE));
        const f0 = minorFaults();
        const t0 = performance.now();
        const c0 = cpuMs();
        for (const { w, m } of slice) core.applyEvents(w, m);
        wallMs += performance.now() - t0;
        cpu += cpuMs() - c0;
        faults += minorFaults() - f0;
      }
      return { wallMs, cpuMs: cpu, faults };
    };
    let ing = newCore();
    // Setup garbage (the fixture's construction, earlier phases) is collected before, not during.
    gc();
    const stored = ingest(ing, frames);
    const filled = ing.index.size;
    gc();
    // Steady state: the full object stores new chains while the oldest are evicted (as SGLang's LRU
    // does at capacity), frame for frame; its size stays put, so its memory is already touched. A
    // long-lived index object runs like this after its first fill, which pays each fresh page's
    // first touch (13–16 µs per 4 KiB page on this VM). Stores and evictions are timed apart.
    gc();
    const restored = { wallMs: 0, cpuMs: 0 };
    const evicted = { wallMs: 0, cpuMs: 0 };
    for (let i = 0; i < churn.frames.length; i += SLICE) {
      const ev = ingest(ing, removeFrames.slice(i, Math.min(i + SLICE, churn.frames.length)));
      const st = ingest(ing, churn.frames.slice(i, i + SLICE));
      evicted.wallMs += ev.wallMs;
      evicted.cpuMs += ev.cpuMs;
      restored.wallMs += st.wallMs;
      restored.cpuMs += st.cpuMs;
    }
    if (ing.index.size !== filled) throw new Error(`steady state holds ${ing.index.size} of ${filled} entries`);
    gc();
    const removed = ingest(ing, [...removeFrames.slice(churn.frames.length), ...churn.removeFrames]);
    if (ing.index.size !== 0) throw new Error(`ingestion left ${ing.index.size} entries`);
    const storeMs = stored.wallMs;
    const storeCpuMs = stored.cpuMs;
    // The same fill into a new empty object once the emptied one is gone: its pages are the
    // process's to reuse (as in a runtime process that has hosted other objects), so what is left
    // is the index's own work; the fresh fill above also pays the machine's first touch per page.
    ing = null;
    gc();
    const refilled = ingest(newCore(), frames);
    const removeMs = removed.wallMs;
    const removeCpuMs = removed.cpuMs;
    // What the Durable Object does before applyEvents: JSON.parse + validation of the frame
    // (parseRelayMessage: events in the schema's exact shape checked directly), and for reference
    // the same frames through zod alone (RelayEventsSchema, jitless as in workerd).
    const json = frames.slice(0, Math.min(frames.length, 500)).map((f) => f.json);
    const blocksOf = (m) => m.events.reduce((a, e) => a + e.blocks.length, 0);
    let t = performance.now();
    let parsedBlocks = 0;
    for (const s of json) {
      const r = parseRelayMessage(JSON.parse(s));
      if (!r.success) throw new Error("bench frame refused");
      parsedBlocks += blocksOf(r.data);
    }
    const parseMs = performance.now() - t;
    t = performance.now();
    let zodBlocks = 0;
    for (const s of json) zodBlocks += blocksOf(RelayEventsSchema.parse(JSON.parse(s)));
    const zodParseRate = (zodBlocks / (performance.now() - t)) * 1000;
    const storeRate = (ingestBlocks / storeMs) * 1000;
    const removeRate = (ingestBlocks / removeMs) * 1000;
    const storeCpuRate = (ingestBlocks / storeCpuMs) * 1000;
    const removeCpuRate = (ingestBlocks / removeCpuMs) * 1000;
    const refillRate = (churnBlocks / restored.wallMs) * 1000;
    const refillCpuRate = (churnBlocks / restored.cpuMs) * 1000;
    const parseRate = (parsedBlocks / parseMs) * 1000;
    const pageTouch = firstTouchCost();
    const profiled = parsed(frames.slice(0, Math.min(frames.length, 1500)));
    const ingProfile = await topSelfTime(() => {
      const c2 = newCore();
      for (const { w, m } of profiled) c2.applyEvents(w, m);
    }, 8);

    // --- memory reference points: what each piece of a block costs on its own in V8 -----------------
    ctx.progress(0.9, "index memory reference");
    const ref = {};
    const N = ctx.tiny || ctx.quick ? 10_000 : 200_000;
    const measure = (name, build) => {
      const a = heap();
      const keep = build();
      const b = heap();
      ref[name] = +((b - a) / N).toFixed(1);
      return keep;
    };
    measure("Map<decimal int64 string, object> entry", () => {
      const m = new Map();
      const o = {};
      for (let i = 0; i < N; i++) m.set(String(BigInt(i) * 7919n + 1000000000000000000n), o);
      return m;
    });
    measure("BigInt (64-bit) value", () => Array.from({ length: N }, (_, i) => BigInt(i) * 0x9e3779b97f4an + (1n << 62n)));
    measure("node object {key,parent,children,workers:[slot]}", () => {
      const a = new Array(N);
      for (let i = 0; i < N; i++) a[i] = { key: 0n, parent: null, children: null, workers: [i & 63] };
      return a;
    });
    measure("Map<bigint, node> with one entry (children of a chain node)", () => {
      const a = new Array(N);
      for (let i = 0; i < N; i++) a[i] = new Map([[1n, null]]);
      return a;
    });

    const summary = [
      { metric: `findMatches p50 / p99, 64-block query, ${WORKERS} workers, ${(entries / 1e6).toFixed(2)} M blocks (popular prefix)`, value: `${fm["popular (many workers, 64 deep)"].p50us.toFixed(2)} / ${fm["popular (many workers, 64 deep)"].p99us.toFixed(2)}`, unit: "µs", goal: "p99 ≤ 10", pass: fm["popular (many workers, 64 deep)"].p99us <= 10 },
      { metric: "findMatches p50 / p99, one worker's 64-block prompt", value: `${fm["single worker, 64 deep"].p50us.toFixed(2)} / ${fm["single worker, 64 deep"].p99us.toFixed(2)}`, unit: "µs", goal: "p99 ≤ 10", pass: fm["single worker, 64 deep"].p99us <= 10 },
      { metric: "RoutingCore.route p50 / p99 (match + score 64 workers)", value: `${route.p50.toFixed(1)} / ${route.p99.toFixed(1)}`, unit: "µs", goal: "", pass: null },
      {
        metric: "route + settle, a chat's next turn at 1k / 32k / 100k tokens (12 workers holding long chats, block 16; the turn's history on one worker, routed there a moment before, its last turn stored again since)",
        value: `${routeCall["1k"].routeSettleUs.toFixed(1)} / ${routeCall["32k"].routeSettleUs.toFixed(1)} / ${routeCall["100k"].routeSettleUs.toFixed(1)}`,
        unit: "µs",
        goal: "",
        pass: null,
      },
      { metric: "route + settle: growth per 1k prompt tokens (1k → 100k); with a worker in approximate mode", value: `${slopePer1k(routeCall, "routeSettleUs").toFixed(2)}; ${slopePer1k(routeCallApprox, "routeSettleUs").toFixed(2)}`, unit: "µs per 1k tokens", goal: "", pass: null },
      {
        metric: `radix index with / without the walk memo where no kept walk serves (paired rounds): 32-block queries, memo full; ingestion along kept paths; turns of ${spaced(keptWalkCosts.churn.shape.chats)} chats of ${spaced(keptWalkCosts.churn.shape.blocks)} blocks`,
        value: `${keptWalkCosts.shortQueries.ratio.toFixed(3)} / ${keptWalkCosts.ingestionOnKeptPaths.ratio.toFixed(3)} / ${keptWalkCosts.churn.ratio.toFixed(3)}`,
        unit: "× (memo / plain)",
        goal: "",
        pass: null,
      },
      {
        metric: "admission's peek + route + settle at 1k / 32k / 100k tokens (a first pick with an affinity key)",
        value: `${routeCall["1k"].peekRouteSettleUs.toFixed(1)} / ${routeCall["32k"].peekRouteSettleUs.toFixed(1)} / ${routeCall["100k"].peekRouteSettleUs.toFixed(1)}`,
        unit: "µs",
        goal: "",
        pass: null,
      },
      turnsRow(
        `route + settle p50 / p99 / max, many long chats taking turns: ${chats} chats of ${count(chatShape.minBlocks)}–${count(chatShape.maxBlocks)} blocks (block 16) behind a shared system prompt, a 64-block turn 1 ms apart in shuffled order; ${turnsExact.workers} workers with KV events, each evicting least recently used chats past ${count(capBlocks)} blocks`,
        turnsExact,
      ),
      turnsRow(`route + settle p50 / p99 / max, the same with an index budget of ${count(approxBudget)} blocks: all ${turnsApprox.workers} workers approximate`, turnsApprox),
      turnsRow(`route + settle p50 / p99 / max, next turns of ${noEventsChats} such chats on ${turnsNoEvents.workers} workers without KV events (the approximate index; each chat routed once before)`, turnsNoEvents),
      { metric: "ingestion, first fill of an empty object (fresh memory): stored block events/s (applyEvents), per wall / CPU second", value: `${(storeRate / 1e6).toFixed(2)} M / ${(storeCpuRate / 1e6).toFixed(2)} M`, unit: "blocks/s", goal: "≥ 2 M", pass: Math.min(storeRate, storeCpuRate) >= 2e6 },
      { metric: `ingestion, first fill: its first touches of fresh pages, ${(stored.faults / 1e3).toFixed(1)} k page faults × ${pageTouch.usPerFault.toFixed(1)} µs (this machine, per 4 KiB page)`, value: `${((100 * stored.faults * pageTouch.usPerFault) / 1000 / storeMs).toFixed(0)} % of its wall time`, unit: "", goal: "", pass: null },
      { metric: `ingestion, the same first fill into memory the process reused (a new object after the first was freed; ${(refilled.faults / 1e3).toFixed(1)} k page faults), per wall / CPU second`, value: `${(ingestBlocks / refilled.wallMs / 1e3).toFixed(2)} M / ${(ingestBlocks / refilled.cpuMs / 1e3).toFixed(2)} M`, unit: "blocks/s", goal: "", pass: null },
      { metric: "ingestion, steady state (a full object storing while evicting): stored block events/s, per wall / CPU second", value: `${(refillRate / 1e6).toFixed(2)} M / ${(refillCpuRate / 1e6).toFixed(2)} M`, unit: "blocks/s", goal: "≥ 2 M", pass: Math.min(refillRate, refillCpuRate) >= 2e6 },
      { metric: "ingestion: removed block events/s, per wall / CPU second", value: `${(removeRate / 1e6).toFixed(2)} M / ${(removeCpuRate / 1e6).toFixed(2)} M`, unit: "blocks/s", goal: "", pass: null },
      { metric: "relay frame JSON.parse + validation as the index object does it (zod alone, jitless)", value: `${(parseRate / 1e6).toFixed(2)} M (${(zodParseRate / 1e6).toFixed(2)} M)`, unit: "blocks/s", goal: "", pass: null },
      { metric: "memory per indexed block (heap delta / entries)", value: bytesPerBlock.toFixed(0), unit: "bytes", goal: "≤ 100", pass: bytesPerBlock <= 100 },
    ];
    const plot = barChart({
      title: "Routing index vs goals (value / goal; ≤ 1 meets the goal)",
      unit: "measured ÷ goal",
      log: true,
      goal: { value: 1, label: "goal" },
      bars: [
        { label: "findMatches p99 (popular)", value: fm["popular (many workers, 64 deep)"].p99us / 10 },
        { label: "findMatches p99 (one worker)", value: fm["single worker, 64 deep"].p99us / 10 },
        { label: "2 M/s ÷ ingestion rate", value: 2e6 / storeRate },
        { label: "bytes per block ÷ 100", value: bytesPerBlock / 100 },
      ],
    });
    return {
      summary,
      details: {
        workers: WORKERS,
        entries,
        uniqueNodes: nodes,
        innerNodes: inner,
        buildMs,
        bytesPerBlock,
        bytesPerUniqueNode: nodes ? (h1 - h0) / nodes : null,
        storageBytesReported: storageBytes,
        heapDeltaBytes: h1 - h0,
        rssBytes: process.memoryUsage().rss,
        arrayBuffersBytes: process.memoryUsage().arrayBuffers,
        findMatches: fm,
        timerOverheadUs: timerUs,
        routeUs: route,
        routeCall: { byLength: routeCall, withApproximateWorker: routeCallApprox, keptWalkCosts, stepsAt100kUs: routeSteps },
        chatsTakingTurns,
        pageTouch,
        ingestion: { blocks: ingestBlocks, firstFillFaults: stored.faults, reusedFill: refilled, storeRate, removeRate, storeCpuRate, removeCpuRate, refillRate, refillCpuRate, parseRate, zodParseRate },
        profiles: { findMatches: fmProfile, ingestion: ingProfile },
        memoryReferenceBytesEach: ref,
      },
      plots: [{ file: "index.svg", svg: plot }],
    };
  },
};
