#!/usr/bin/env node
// The routing index's route + settle when many long chats take turns (bench/lib/interleaved-chats.mjs,
// the index bench's "many long chats taking turns" rows): RoutingCore in process, WORKERS workers,
// CHATS chats of MINB..MAXB blocks (block 16) behind a 32-block system prompt, TURNS turns of NEW
// blocks in shuffled order, each routed and settled, the clock TICK ms a route; STORE=1: the picked
// worker stores the new turn; CAP: each worker evicts its least recently used chats past CAP blocks (a
// GPU's KV); BUDGET: the index's block budget (small: workers go approximate); KVEVENTS=0: workers
// without KV events (each chat routed once before the turns); INSTR=1: time per function (pending
// routes, approximate index, walks, load) and pending routes' share of the routes' time. Prints per-route ms.
// Usage: CHATS=200 MINB=2000 MAXB=6400 CAP=45000 INSTR=1 node scripts/route-interleaved.mjs
import { interleavedChats } from "../bench/lib/interleaved-chats.mjs";
import { summarize } from "../bench/lib/stats.mjs";
const env = (k, d) => (process.env[k] !== undefined ? Number(process.env[k]) : d);
const CHATS = env("CHATS", 200), MINB = env("MINB", 2000), MAXB = env("MAXB", 6400), WORKERS = env("WORKERS", 12);
const TURNS = env("TURNS", 300), NEW = env("NEW", 64), STORE = env("STORE", 1), TICK = env("TICK", 1), BUDGET = env("BUDGET", 0);
const CAP = env("CAP", 0), KVEVENTS = env("KVEVENTS", 1);
const { ApproxIndex } = await import("../src/block-index/approx-index.ts");
const { RadixIndex } = await import("../src/block-index/radix-index.ts");
const recs = {}; const acc = { record: 0, approxMatch: 0, exactFind: 0, recordCalls: 0, maxRecord: 0 };
const wrap = (proto, name, key) => { const f = proto[name]; proto[name] = function (...a) { const t = performance.now(); try { return f.apply(this, a); } finally { const d = performance.now() - t; acc[key] += d; if (key === "record" || key === "pAdd") (recs[key] ??= []).push(d); if (key === "record") { acc.recordCalls++; acc.maxRecord = Math.max(acc.maxRecord, d); } } }; };
const { PendingRoutes } = await import("../src/block-index/pending-routes.ts");
const { LoadTracker } = await import("../src/load/load-tracker.ts");
const { LoadSync } = await import("../src/routing-index/load-sync.ts");
for (const k of ["pAdd", "pOverlaps", "loadAdd", "loadRelease", "shared"]) acc[k] = 0;
if (process.env.INSTR) { wrap(RadixIndex.prototype, "findMatches", "exactFind"); wrap(PendingRoutes.prototype, "add", "pAdd"); wrap(PendingRoutes.prototype, "overlaps", "pOverlaps"); wrap(LoadSync.prototype, "add", "loadAdd"); wrap(LoadSync.prototype, "release", "loadRelease"); wrap(LoadTracker.prototype, "sharedPrefixes", "shared"); wrap(ApproxIndex.prototype, "record", "record"); wrap(ApproxIndex.prototype, "match", "approxMatch"); }
const r = await interleavedChats({
  chats: CHATS, minBlocks: MINB, maxBlocks: MAXB, workers: WORKERS, turns: TURNS, newBlocks: NEW, store: STORE !== 0, tickMs: TICK, blockBudget: BUDGET, capBlocks: CAP, kvEvents: KVEVENTS !== 0,
  onTurnsStart: () => { for (const k in acc) acc[k] = 0; for (const k in recs) delete recs[k]; },
});
const s = r.routeMs;
const totalRouteMs = r.samples.reduce((a, b) => a + b, 0);
console.log(JSON.stringify({ CHATS, MINB, MAXB, WORKERS, TURNS, STORE, KVEVENTS, setupMs: Math.round(r.setupMs), p50ms: +s.p50.toFixed(3), p90ms: +s.p90.toFixed(3), p99ms: +s.p99.toFixed(3), maxms: +s.max.toFixed(3), sizes: r.core.sizes(), refusedSends: r.refusedSends, totalRouteMs: +totalRouteMs.toFixed(0), acc: Object.fromEntries(Object.entries(acc).map(([k, v]) => [k, +v.toFixed(1)])), recordP50: recs.record ? +summarize(recs.record).p50.toFixed(2) : null, pAddP50: recs.pAdd ? +summarize(recs.pAdd).p50.toFixed(2) : null, pendingShare: process.env.INSTR ? +((acc.pAdd + acc.pOverlaps) / totalRouteMs).toFixed(3) : null, approx: r.approximateWorkers }));
