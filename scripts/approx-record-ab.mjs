#!/usr/bin/env node
// Paired A/B of the approximate index's record (src/block-index/approx-index.ts) against the earlier
// implementation (test/unit/block-index/approx-index-oracle.ts) in one process: both get the same
// calls, in alternating blocks of BLOCK routes (A then B, then B then A). Block size 16 tokens, 12
// workers, chats of MINB..MAXB blocks behind a 32-block system prompt, the clock 1 ms a route.
// Scenarios: turn (a chat's next turn: its history plus NEW blocks, on the worker that had it),
// fresh (a new chat of MINB..MAXB blocks on a random worker), prune (fresh chats into an index
// filled to maxBlocks (2^20), crossing the bound again and again), idle (that index, then one expire
// past the TTL: the call's ms, oracle then new). Prints per-call p50/p99/max
// (ms) per implementation, the median of per-block medians, their ratio, and ms per 1k routes.
// ONLY=new (or oracle): that implementation alone (its longest call without the other's GC).
// Usage: node --experimental-strip-types --no-warnings scripts/approx-record-ab.mjs [turn|fresh|prune ...]
import { rng, summarize } from "../bench/lib/stats.mjs";
import { hashesFrom } from "../bench/lib/route-call.mjs";
const { ApproxIndex } = await import("../src/block-index/approx-index.ts");
const { OracleApproxIndex } = await import("../test/unit/block-index/approx-index-oracle.ts");

const env = (k, d) => (process.env[k] !== undefined ? Number(process.env[k]) : d);
const CHATS = env("CHATS", 200), MINB = env("MINB", 2000), MAXB = env("MAXB", 6400), NEW = env("NEW", 64);
const ROUTES = env("ROUTES", 400), BLOCK = env("BLOCK", 20), WORKERS = 12, SEED = env("SEED", 0x5eed);

function chainsOf(random, count) {
  const u64 = hashesFrom(random);
  const system = Array.from({ length: 32 }, u64);
  return Array.from({ length: count }, () => BigUint64Array.from(system.concat(Array.from({ length: MINB + Math.floor(random() * (MAXB - MINB)) - 32 }, u64))));
}

/** Setup calls (untimed) and the timed route calls [slot, hashes] of a scenario. */
function scenario(name) {
  const random = rng(SEED);
  const u64 = hashesFrom(random);
  if (name === "turn") {
    const chats = chainsOf(random, CHATS).map((chain, c) => ({ chain, slot: c % WORKERS }));
    const setup = chats.map((c) => [c.slot, c.chain]);
    const routes = [];
    for (let i = 0; i < ROUTES; i++) {
      const chat = chats[Math.floor(random() * CHATS)];
      const next = new BigUint64Array(chat.chain.length + NEW);
      next.set(chat.chain);
      for (let j = 0; j < NEW; j++) next[chat.chain.length + j] = u64();
      chat.chain = next;
      routes.push([chat.slot, next]);
    }
    return { setup, routes, config: {} };
  }
  const fill = name === "prune" ? Math.ceil(2 ** 20 / ((MINB + MAXB) / 2)) : 0;
  const chains = chainsOf(random, fill + ROUTES);
  const calls = chains.map((c) => [Math.floor(random() * WORKERS), c]);
  return { setup: calls.slice(0, fill), routes: calls.slice(fill), config: name === "prune" ? {} : { maxBlocks: 2 ** 26 } };
}

function run(name) {
  const { setup, routes, config } = scenario(name);
  const impls = { oracle: new OracleApproxIndex(config), new: new ApproxIndex(config) };
  if (process.env.ONLY) for (const k of Object.keys(impls)) if (k !== process.env.ONLY) delete impls[k];
  const clock = { oracle: 0, new: 0 };
  for (const [k, ax] of Object.entries(impls)) for (const [slot, h] of setup) ax.record(slot, h, clock[k]++);
  const samples = { oracle: [], new: [] };
  const blockMedians = { oracle: [], new: [] };
  const pruned = { oracle: [], new: [] };
  for (let b = 0, from = 0; from < routes.length; b++, from += BLOCK) {
    const order = (b % 2 === 0 ? ["oracle", "new"] : ["new", "oracle"]).filter((k) => k in impls);
    for (const k of order) {
      const ax = impls[k];
      const block = [];
      for (const [slot, h] of routes.slice(from, from + BLOCK)) {
        const now = clock[k]++;
        const before = ax.pruned;
        const t = performance.now();
        ax.record(slot, h, now);
        const d = performance.now() - t;
        block.push(d);
        if (ax.pruned > before) pruned[k].push(ax.pruned - before);
      }
      samples[k].push(...block);
      blockMedians[k].push(summarize(block).p50);
    }
  }
  const out = { scenario: name, routes: routes.length, blockSize: BLOCK };
  for (const k of Object.keys(impls)) {
    const s = summarize(samples[k]);
    out[k] = { p50: +s.p50.toFixed(4), p99: +s.p99.toFixed(3), max: +s.max.toFixed(3), msPer1kRoutes: +((s.mean * 1000).toFixed(1)), blockMedianP50: +summarize(blockMedians[k]).p50.toFixed(4), size: impls[k].size, prunes: pruned[k].length, maxDroppedInOneCall: Math.max(0, ...pruned[k]) };
  }
  if (Object.keys(impls).length === 2) out.ratioOfBlockMedians = +(summarize(blockMedians.oracle).p50 / summarize(blockMedians.new).p50).toFixed(1);
  console.log(JSON.stringify(out));
}

/** The index filled to maxBlocks, then one expire past the TTL (a pool idle for 2 min): that call's ms. */
function idle() {
  const { setup } = scenario("prune");
  const out = { scenario: "idle" };
  for (const [k, ax] of [["oracle", new OracleApproxIndex()], ["new", new ApproxIndex()]]) {
    if (process.env.ONLY && k !== process.env.ONLY) continue;
    setup.forEach(([slot, h], i) => ax.record(slot, h, i));
    const size = ax.size;
    const t = performance.now();
    ax.expire(setup.length + ax.config.ttlMs);
    out[k] = { entries: size, expireMs: +(performance.now() - t).toFixed(2) };
  }
  console.log(JSON.stringify(out));
}

for (const name of process.argv.slice(2).length > 0 ? process.argv.slice(2) : ["turn", "fresh", "prune", "idle"]) if (name === "idle") idle(); else run(name);
