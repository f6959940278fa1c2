#!/usr/bin/env node
// The routing index's route + settle when many long chats take turns (the index bench's route call
// routes one chat again and again, which hands its pending chain over): RoutingCore in process, 12
// workers, CHATS chats of MINB..MAXB blocks (block 16) behind a 32-block system prompt, turns in
// shuffled order, each routed and settled, the clock 1 ms a route; STORE=1: the picked worker stores
// the new turn; CAP: each worker evicts its least recently used chats past CAP blocks (a GPU's KV);
// INSTR=1: time per function (pending routes, approximate index, walks, load) and pending routes'
// share of the routes' time. Prints per-route ms.
// Usage: CHATS=200 MINB=2000 MAXB=6400 CAP=45000 INSTR=1 node scripts/route-interleaved.mjs
import { hashesFrom, routePool } from "../bench/lib/route-call.mjs";
import { rng, summarize } from "../bench/lib/stats.mjs";
const env = (k, d) => (process.env[k] !== undefined ? Number(process.env[k]) : d);
const CHATS = env("CHATS", 200), MINB = env("MINB", 2000), MAXB = env("MAXB", 6400), WORKERS = env("WORKERS", 12);
const TURNS = env("TURNS", 300), NEW = env("NEW", 64), STORE = env("STORE", 1), TICK = env("TICK", 1), BUDGET = env("BUDGET", 0);
const BLOCK = 16;
const { ApproxIndex } = await import("../src/block-index/approx-index.ts");
const { RadixIndex } = await import("../src/block-index/radix-index.ts");
const recs = {}; const acc = { record: 0, approxMatch: 0, exactFind: 0, recordCalls: 0, maxRecord: 0 };
const wrap = (proto, name, key) => { const f = proto[name]; proto[name] = function (...a) { const t = performance.now(); try { return f.apply(this, a); } finally { const d = performance.now() - t; acc[key] += d; if (key === "record" || key === "pAdd") (recs[key] ??= []).push(d); if (key === "record") { acc.recordCalls++; acc.maxRecord = Math.max(acc.maxRecord, d); } } }; };
const { PendingRoutes } = await import("../src/block-index/pending-routes.ts");
const { LoadTracker } = await import("../src/load/load-tracker.ts");
const { LoadSync } = await import("../src/routing-index/load-sync.ts");
for (const k of ["pAdd", "pOverlaps", "loadAdd", "loadRelease", "shared"]) acc[k] = 0;
if (process.env.INSTR) { wrap(RadixIndex.prototype, "findMatches", "exactFind"); wrap(PendingRoutes.prototype, "add", "pAdd"); wrap(PendingRoutes.prototype, "overlaps", "pOverlaps"); wrap(LoadSync.prototype, "add", "loadAdd"); wrap(LoadSync.prototype, "release", "loadRelease"); wrap(LoadTracker.prototype, "sharedPrefixes", "shared"); wrap(ApproxIndex.prototype, "record", "record"); wrap(ApproxIndex.prototype, "match", "approxMatch"); }
const random = rng(0x5eed);
const u64 = hashesFrom(random);
let refusedSends = 0;
const { core, send, store, tick } = await routePool({ workers: WORKERS, blockBudget: BUDGET, onRefused: () => refusedSends++ });
const CAP = env("CAP", 0); // per-worker GPU capacity in blocks (0: never evict)
const held = new Map(); // worker -> Map(chat -> engine hashes) in LRU order
const heldBlocks = (m) => { let n = 0; for (const v of m.values()) n += v.length; return n; };
const storeFor = (chat, worker, chain, parent) => {
  const m = held.get(worker) ?? new Map(); held.set(worker, m);
  const hs = store(worker, chain, parent);
  const mine = parent === null ? hs : (m.get(chat) ?? []).concat(hs);
  m.delete(chat); m.set(chat, mine);
  if (CAP) { let n = heldBlocks(m); for (const [c, v] of m) { if (n <= CAP || c === chat) break; send(worker, [{ t: "removed", hashes: v.slice().reverse() }]); m.delete(c); n -= v.length; c.evicted = (c.evicted ?? 0) + 1; } }
  return hs[hs.length - 1];
};
const system = Array.from({ length: 32 }, u64);
const chats = [];
const t0 = performance.now();
for (let c = 0; c < CHATS; c++) {
  const n = MINB + Math.floor(random() * (MAXB - MINB));
  const chain = system.concat(Array.from({ length: n - 32 }, u64));
  const worker = `w${c % WORKERS}`;
  const chat = { chain, worker }; chat.tip = storeFor(chat, worker, chain, null); chats.push(chat);
}
const setupMs = performance.now() - t0;
const order = Array.from({ length: TURNS }, () => Math.floor(random() * CHATS));
const samples = []; for (const k in acc) acc[k] = 0; for (const k in recs) delete recs[k];
for (let i = 0; i < TURNS; i++) {
  const chat = chats[order[i]];
  const turn = Array.from({ length: NEW }, u64);
  const q = BigUint64Array.from(chat.chain.concat(turn));
  const isl = q.length * BLOCK;
  tick(TICK);
  const t = performance.now();
  const d = core.route({ localHashes: q, isl });
  core.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: d.overlapBlocks * BLOCK, outcome: "ok" });
  samples.push(performance.now() - t);
  if (STORE) {
    if (d.workerId === chat.worker && held.get(chat.worker)?.has(chat)) chat.tip = storeFor(chat, chat.worker, turn, chat.tip);
    else { chat.worker = d.workerId; chat.tip = storeFor(chat, chat.worker, chat.chain.concat(turn), null); }
  }
  chat.chain = chat.chain.concat(turn);
}
const s = summarize(samples.slice(Math.min(50, TURNS >> 2)));
console.log(JSON.stringify({ CHATS, MINB, MAXB, WORKERS, TURNS, STORE, setupMs: Math.round(setupMs), p50ms: +s.p50.toFixed(3), p90ms: +s.p90.toFixed(3), p99ms: +s.p99.toFixed(3), maxms: +s.max.toFixed(3), sizes: core.sizes(), refusedSends, totalRouteMs: +samples.reduce((a, b) => a + b, 0).toFixed(0), acc: Object.fromEntries(Object.entries(acc).map(([k, v]) => [k, +v.toFixed(1)])), recordP50: recs.record ? +summarize(recs.record).p50.toFixed(2) : null, pAddP50: recs.pAdd ? +summarize(recs.pAdd).p50.toFixed(2) : null, pendingShare: process.env.INSTR ? +((acc.pAdd + acc.pOverlaps) / samples.reduce((x, y) => x + y, 0)).toFixed(3) : null, approx: core.workers().filter((w) => core.isApproximate(w.workerId)).length }));
