#!/usr/bin/env node
// PendingRoutes paired in one process: the every-key implementation (the unit tests' oracle,
// test/unit/block-index/pending-routes-oracle.ts) against src's grid keys, the same route sequence
// on each, blocks of R routes alternating in both orders (WARM blocks first, untimed). Per route,
// 1 ms apart (TTL 5 s, default bounds, 12 workers): expiry (overlaps of no blocks), overlaps(q),
// add(worker, q); the chain keys are computed untimed first. Overlaps must be equal. SCEN:
//   interleaved: CHATS chats of MINB..MAXB blocks behind a 32-block system prompt take turns of 64 blocks
//   heir: one chat's next turns of 64 blocks on one worker (2 000 to 8 000 blocks, then a new chat)
//   short | short40: requests of 32-200 blocks behind one 32 (40) block system prompt on any worker
//   docqa: 24 documents of 2 000-6 400 blocks, each asked questions of 8-64 blocks on its worker
// Prints p50/p99/mean µs per route for each, and the median over blocks of the new/old ratio.
// Usage: SCEN=interleaved node scripts/pending-routes-ab.mjs (STRIDE: the new one's key stride)
import { rng, summarize } from "../bench/lib/stats.mjs";
import { hashesFrom } from "../bench/lib/route-call.mjs";
const { PendingRoutes: New } = await import("../src/block-index/pending-routes.ts");
const { PendingRoutes: Old } = await import("../test/unit/block-index/pending-routes-oracle.ts");
const SCEN = process.env.SCEN ?? "interleaved";
const BLOCKS = Number(process.env.BLOCKS ?? 12), R = Number(process.env.R ?? 100);
// Warm-up blocks: the bounds (2^18 blocks, 256 chains a worker) are reached before timing starts.
const WARM = Number(process.env.WARM ?? ({ heir: 1, short: 40, short40: 40 }[SCEN] ?? 2));
const STRIDE = process.env.STRIDE ? Number(process.env.STRIDE) : undefined;
const random = rng(0xab5eed);
const u64 = hashesFrom(random);
const W = 12;
const system = Array.from({ length: Number(process.env.SYS ?? (SCEN === "short40" ? 40 : 32)) }, u64);
let nextQuery;
if (SCEN === "interleaved") {
  const CH = Number(process.env.CHATS ?? 200), MIN = Number(process.env.MINB ?? 2000), MAX = Number(process.env.MAXB ?? 6400);
  const chats = Array.from({ length: CH }, (_, c) => ({ slot: c % W, chain: system.concat(Array.from({ length: MIN + Math.floor(random() * (MAX - MIN)) - 32 }, u64)) }));
  nextQuery = () => { const c = chats[Math.floor(random() * CH)]; c.chain = c.chain.concat(Array.from({ length: 64 }, u64)); return { slot: c.slot, q: BigUint64Array.from(c.chain) }; };
} else if (SCEN === "heir") {
  let chain = system.concat(Array.from({ length: 2000 }, u64));
  nextQuery = () => { chain = chain.length >= 8000 ? system.concat(Array.from({ length: 2000 }, u64)) : chain.concat(Array.from({ length: 64 }, u64)); return { slot: 3, q: BigUint64Array.from(chain) }; };
} else if (SCEN === "short" || SCEN === "short40") {
  nextQuery = () => ({ slot: Math.floor(random() * W), q: BigUint64Array.from(system.concat(Array.from({ length: Math.max(0, 32 + Math.floor(random() * 169) - system.length) }, u64))) });
} else if (SCEN === "docqa") {
  const docs = Array.from({ length: 24 }, () => Array.from({ length: 2000 + Math.floor(random() * 4400) }, u64));
  nextQuery = () => { const d = Math.floor(random() * docs.length); return { slot: d % W, q: BigUint64Array.from(docs[d].concat(Array.from({ length: 8 + Math.floor(random() * 56) }, u64))) }; };
}
const impls = { old: new Old(), new: STRIDE ? new New(5000, 256, 1 << 18, STRIDE) : new New() };
const res = { old: { add: [], ov: [], blkAdd: [], blkOv: [] }, new: { add: [], ov: [], blkAdd: [], blkOv: [] } };
const EMPTY = new BigUint64Array(0);
let now = 0;
const run = (name, routes, t0, keep) => {
  const pr = impls[name]; const r = res[name]; const adds = [], ovs = [];
  for (let i = 0; i < routes.length; i++) {
    const { slot, q } = routes[i]; const at = t0 + i;
    pr.keysOf(q);
    const a = performance.now(); pr.overlaps(EMPTY, at);
    const b = performance.now(); const o = pr.overlaps(q, at);
    const c = performance.now(); pr.add(slot, q, at);
    const d = performance.now();
    adds.push(b - a + d - c); ovs.push(c - b);
    routes[i][name] = o;
  }
  if (keep) { r.add.push(...adds); r.ov.push(...ovs); r.blkAdd.push(summarize(adds).p50); r.blkOv.push(summarize(ovs).p50); }
};
const total = WARM + BLOCKS;
for (let blk = 0; blk < total; blk++) {
  const routes = Array.from({ length: R }, nextQuery);
  const order = blk % 2 ? ["new", "old"] : ["old", "new"];
  for (const name of order) run(name, routes, now, blk >= WARM);
  for (const r of routes) { const a = [...r.old].sort().join(), b = [...r.new].sort().join(); if (a !== b) throw new Error(`overlaps differ: ${a} vs ${b}`); }
  now += R;
}
const f = (x) => +(x * 1000).toFixed(1);
const out = { SCEN, R, BLOCKS, WARM, stride: impls.new.keyStride, sizes: Object.fromEntries(Object.entries(impls).map(([k, p]) => [k, { chains: p.size, blocks: p.blocks, keys: p.keys }])) };
for (const k of ["old", "new"]) { const a = summarize(res[k].add), o = summarize(res[k].ov); out[k] = { addExpiryUs: { p50: f(a.p50), p99: f(a.p99), mean: f(a.mean) }, overlapsUs: { p50: f(o.p50), p99: f(o.p99), mean: f(o.mean) } }; }
const med = (xs) => summarize(xs).p50;
out.ratioNewOld = { addExpiryBlockP50: +(med(res.new.blkAdd.map((x, i) => x / res.old.blkAdd[i]))).toFixed(3), overlapsBlockP50: +(med(res.new.blkOv.map((x, i) => x / res.old.blkOv[i]))).toFixed(3) };
console.log(JSON.stringify(out));
