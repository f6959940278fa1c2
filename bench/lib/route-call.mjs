// The routing index's cost per route call by prompt length (bench/suites/index.mjs): one pool object
// (RoutingCore) at the product's block size, its workers holding long conversations, and a chat's
// next turn routed and settled at 1k, 32k and 100k tokens. Per view: what each O(blocks) step of a
// route costs on its own at the same length.
import { rng, summarize } from "./stats.mjs";

/** Prompt lengths measured (tokens). */
export const ROUTE_TOKENS = { "1k": 1024, "32k": 32768, "100k": 102400 };
/** The product's default KV block size (src/config/config.ts blockSize). */
const BLOCK = 16;
const WORKERS = 12;
/** Conversations each worker holds besides the measured one, and their length in blocks. */
const BACKGROUND_CHATS = 3;
const BACKGROUND_BLOCKS = 3000;
/** Blocks of the system prompt every conversation starts with. */
const SYSTEM_BLOCKS = 32;
/** The new turn: blocks of the request not cached yet (1k tokens; a quarter of a shorter prompt). */
const NEW_TURN_BLOCKS = 64;
const newTurnBlocks = (n) => Math.min(NEW_TURN_BLOCKS, n >> 2);

/** Random 64-bit local hashes drawn from `random` (bench/lib/stats.mjs rng). */
export function hashesFrom(random) {
  return () => (BigInt(Math.floor(random() * 2 ** 32)) << 32n) | BigInt(Math.floor(random() * 2 ** 32));
}

/**
 * A pool object (RoutingCore, block size BLOCK, a clock of its own) with workers w0..w{workers-1}
 * that send KV events, each with an empty dump (`kvEvents: false`: workers without KV events, no
 * dump; approximate mode). `hello(id, kvEvents)` adds a worker; `send` applies
 * a relay's events (where the pool refuses them: `onRefused(reason)`, else a throw);
 * `store(worker, chain, parent)` stores a
 * chain of local hashes below engine hash `parent` (null: the root) and returns its engine hashes.
 */
export async function routePool({ workers = WORKERS, blockBudget, kvEvents = true, onRefused } = {}) {
  const { RoutingCore } = await import("../../src/routing-index/routing-core.ts");
  const { localHashToHex } = await import("../../src/relay-wire/relay-protocol.ts");
  let now = 1_000_000_000;
  const core = new RoutingCore({ blockSize: BLOCK, random: () => 0.5, now: () => now, ...(blockBudget ? { blockBudget } : {}) });
  const hello = (id, kvEvents) => core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BLOCK, epoch: 1, modelName: "m", contract: null, kvEvents }, id);
  for (let w = 0; w < workers; w++) {
    hello(`w${w}`, kvEvents);
    if (kvEvents) core.applyDump(`w${w}`, { type: "dump", epoch: 1, seq: -1, blocks: [] });
  }
  let engineSeq = 1n;
  let seq = 0;
  const send = (worker, events) => {
    const r = core.applyEvents(worker, { type: "events", epoch: 1, seq: seq++, events });
    if (r.ok) return;
    if (onRefused) onRefused(r.reason);
    else throw new Error(r.reason);
  };
  const store = (worker, chain, parent = null) => {
    const blocks = chain.map((l) => ({ h: String(engineSeq++ * 7919n), l: localHashToHex(l) }));
    send(worker, [{ t: "stored", parent, blocks }]);
    return blocks.map((b) => b.h);
  };
  return { core, hello, send, store, tick: (ms) => (now += ms) };
}

/**
 * A pool whose workers hold long chats and, per measured length, the measured chat's history: its
 * worker w0 all but the new turn, w1 an older half. `previousTurn` routes that history to w0 a
 * moment before (a pending route); `approximateWorker` adds a worker without KV events that was
 * routed half of it (approximate mode). `nextTurn(name)` replays, untimed, what the worker sends between two
 * turns: it evicts the last turn's blocks of the history and stores them again (the index walks
 * them anew, as it walks the blocks a worker stored since the previous turn).
 */
export async function routeWorld({ previousTurn = true, approximateWorker = false, seed = 0x5eed } = {}) {
  const u64 = hashesFrom(rng(seed));
  const { core, hello, send, store: storeOn, tick } = await routePool();
  if (approximateWorker) hello("ax", false);
  const store = (w, chain, parent = null) => storeOn(`w${w}`, chain, parent);
  const system = Array.from({ length: SYSTEM_BLOCKS }, u64);
  for (let w = 0; w < WORKERS; w++) for (let c = 0; c < BACKGROUND_CHATS; c++) store(w, system.concat(Array.from({ length: BACKGROUND_BLOCKS }, u64)));
  const routeOnce = (localHashes, isl, onlyWorkers) => {
    const d = core.route({ localHashes, isl, onlyWorkers });
    core.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: 0, outcome: "ok" });
  };
  const requests = {};
  const turns = {};
  for (const [name, tokens] of Object.entries(ROUTE_TOKENS)) {
    const n = tokens / BLOCK;
    const chain = system.concat(Array.from({ length: n - SYSTEM_BLOCKS }, u64));
    const history = chain.slice(0, n - newTurnBlocks(n));
    // The history's last turn (as many blocks as the new one) is stored as its own event, below the rest.
    const cut = history.length - newTurnBlocks(n);
    const older = store(0, history.slice(0, cut));
    const lastTurn = history.slice(cut);
    let lastHashes = store(0, lastTurn, older[older.length - 1]);
    store(1, history.slice(0, history.length >> 1));
    turns[name] = () => {
      send("w0", [{ t: "removed", hashes: lastHashes }]);
      lastHashes = store(0, lastTurn, older[older.length - 1]);
    };
    if (previousTurn) routeOnce(BigUint64Array.from(history), history.length * BLOCK, ["w0"]);
    if (approximateWorker) routeOnce(BigUint64Array.from(history.slice(0, history.length >> 1)), (history.length >> 1) * BLOCK, ["ax"]);
    // As the route RPC delivers it: one BigUint64Array.
    requests[name] = { localHashes: BigUint64Array.from(chain), isl: tokens };
  }
  return { core, requests, nextTurn: (name) => turns[name](), tick };
}

/** Median µs per call of `fn` (each call timed alone, after a warm-up); `before` runs untimed before each call. */
function medianUs(fn, calls, before = () => {}) {
  for (let i = 0; i < Math.max(5, calls >> 2); i++) (before(), fn());
  const samples = new Float64Array(calls);
  for (let i = 0; i < calls; i++) {
    before();
    const t = performance.now();
    fn();
    samples[i] = (performance.now() - t) * 1000;
  }
  return summarize(samples).p50;
}

/**
 * Route + settle (the index's work for one request) and an admission's peek + route + settle, µs
 * p50 per length, each call a chat's next turn: a fresh hashes array (as the route RPC delivers it),
 * after the worker stored its last turn again (routeWorld nextTurn); the clock moves 1 ms per call
 * (pending routes expire as in a pool serving ~1 000 routes/s). `calls` per length scales with
 * `budget`. Where no kept walk serves a turn: measureKeptWalkCosts.
 */
export async function measureRouteCall({ budget = 1, approximateWorker = false } = {}) {
  const { core, requests, nextTurn, tick } = await routeWorld({ approximateWorker });
  const out = {};
  for (const [name, request] of Object.entries(requests)) {
    const { isl } = request;
    const calls = Math.max(20, Math.round((budget * 4_000_000) / request.localHashes.length / 60));
    const settle = (d) => core.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: 0, outcome: "ok" });
    let localHashes = request.localHashes;
    const turn = () => {
      nextTurn(name);
      localHashes = request.localHashes.slice();
    };
    const route = medianUs(() => {
      tick(1);
      settle(core.route({ localHashes, isl }));
    }, calls, turn);
    const admitted = medianUs(() => {
      tick(1);
      core.peek({ localHashes, isl });
      settle(core.route({ localHashes, isl }));
    }, calls, turn);
    const d = core.route({ localHashes, isl });
    settle(d);
    out[name] = { routeSettleUs: route, peekRouteSettleUs: admitted, pick: d.workerId, overlapBlocks: d.overlapBlocks, blocks: request.localHashes.length };
  }
  return out;
}

/**
 * What keeping walks costs where no kept walk serves: the same work on two radix indexes with the
 * same blocks, one with the walk memo and one without, timed in alternating rounds (ms p50 of
 * `rounds`; ratio memo / plain). Its 200 chats of 416 blocks (a shared 16-block system prompt)
 * are routed until the memo is full, then: short queries (32 blocks, under WALK_MEMO_MIN_BLOCKS);
 * ingestion, a worker storing and evicting chains along the kept walks' paths; and turns of
 * `churn.chats` chats of `churn.blocks` blocks in a shuffled order (more than the memo keeps walks
 * of; the default 1 000 of 2 000; returned as `churn.shape`).
 */
export async function measureKeptWalkCosts(rounds, churnShape = { chats: 1000, blocks: 2000 }) {
  const { RadixIndex } = await import("../../src/block-index/radix-index.ts");
  const { localHashToHex } = await import("../../src/relay-wire/relay-protocol.ts");
  const u64 = hashesFrom(rng(0x3e30));
  const system = Array.from({ length: 16 }, u64);
  let engine = 1;
  const world = (memo, chats) => {
    const ix = new RadixIndex(memo ? {} : { walkMemo: false });
    for (let w = 0; w < WORKERS; w++) ix.ensureWorker(w);
    chats.forEach((c, i) => ix.applyStoredWire(i % WORKERS, null, c.map((l) => ({ h: String(engine++), l: localHashToHex(l) }))));
    return ix;
  };
  const scores = new Int32Array(64);
  const pair = (work) => {
    const tMemo = [];
    const tPlain = [];
    for (let r = 0; r < rounds; r++) {
      for (const [fn, out] of r & 1 ? [[work(true), tMemo], [work(false), tPlain]] : [[work(false), tPlain], [work(true), tMemo]]) {
        const t = performance.now();
        fn();
        out.push(performance.now() - t);
      }
    }
    const m = summarize(Float64Array.from(tMemo)).p50;
    const p = summarize(Float64Array.from(tPlain)).p50;
    return { memoMs: m, plainMs: p, ratio: m / p };
  };
  const chats = Array.from({ length: 200 }, () => system.concat(Array.from({ length: 400 }, u64)));
  const withMemo = world(true, chats);
  const plain = world(false, chats);
  const ix = (memo) => (memo ? withMemo : plain);
  for (let k = 0; k < 4; k++) for (const c of chats) withMemo.findMatches(BigUint64Array.from(c), scores);
  const shorts = Array.from({ length: 256 }, () => BigUint64Array.from(system.concat(Array.from({ length: 16 }, u64))));
  const short = pair((memo) => () => {
    for (let i = 0; i < 5000; i++) ix(memo).findMatches(shorts[i & 255], scores);
  });
  const ingestion = pair((memo) => () => {
    for (const c of chats) {
      const chain = c.map((l) => ({ h: String(engine++), l: localHashToHex(l) }));
      ix(memo).applyStoredWire(5, null, chain);
      ix(memo).applyRemoved(5, chain.map((b) => b.h).reverse());
    }
  });
  const many = Array.from({ length: churnShape.chats }, () => system.concat(Array.from({ length: churnShape.blocks - system.length }, u64)));
  const big = [world(false, many), world(true, many)];
  const queries = many.map((c) => BigUint64Array.from(c));
  const at = [0, 0];
  const churn = pair((memo) => () => {
    const k = memo ? 1 : 0;
    for (let i = 0; i < 100; i++) big[k].findMatches(queries[(Math.imul(at[k]++, 2654435761) >>> 0) % queries.length], scores);
  });
  return { shortQueries: short, ingestionOnKeptPaths: ingestion, churn: { ...churn, shape: churnShape } };
}

/** µs per added 1k prompt tokens between the shortest and the longest length. */
export function slopePer1k(byLength, field) {
  const names = Object.keys(ROUTE_TOKENS);
  const a = names[0];
  const b = names[names.length - 1];
  return ((byLength[b][field] - byLength[a][field]) / (ROUTE_TOKENS[b] - ROUTE_TOKENS[a])) * 1000;
}

/** What each O(blocks) step of a route costs alone at `tokens` (µs p50), on structures of the same kind. */
export async function measureRouteSteps(tokens, calls) {
  const { RadixIndex, chainEndOf } = await import("../../src/block-index/radix-index.ts");
  const { PendingRoutes } = await import("../../src/block-index/pending-routes.ts");
  const { LoadTracker } = await import("../../src/load/load-tracker.ts");
  const { chainKeysOf } = await import("../../src/blocks/chain-keys.ts");
  const u64 = hashesFrom(rng(0xb10c));
  const n = tokens / BLOCK;
  const hashes = BigUint64Array.from({ length: n }, u64);
  const index = new RadixIndex({ walkMemo: false });
  const kept = new RadixIndex();
  for (const ix of [index, kept]) {
    ix.ensureWorker(0);
    ix.applyStored(0, null, Array.from(hashes, (l, i) => ({ engineHash: String(i + 1), localHash: l })));
  }
  const scores = new Int32Array(64);
  const pending = new PendingRoutes();
  pending.add(0, hashes.subarray(0, n - newTurnBlocks(n)), 1);
  const load = new LoadTracker();
  const keys = chainKeysOf(hashes);
  const plain = Array.from(hashes);
  const forget = new RadixIndex();
  const steps = {};
  steps["radix walk from the root, every block held (findMatches)"] = medianUs(() => index.findMatches(hashes, scores), calls);
  // A copy of the same hashes each call: the kept walk serves it after comparing every hash word.
  const copies = Array.from({ length: 8 }, () => hashes.slice());
  let c = 0;
  steps["radix walk resumed at the end of a kept walk (walk-memo.ts: compares the hash words)"] = medianUs(() => kept.findMatches(copies[c++ & 7], scores), calls);
  steps["chain keys (chainKeysOf, once per route)"] = medianUs(() => chainKeysOf(hashes), calls);
  steps["pending routes' overlap (binary search)"] = medianUs(() => pending.overlaps(hashes, 2), calls);
  // A walk of nothing first: chainEndOf from the root, as without a walk of the same hashes before it.
  steps["chain end for the prefill watch, from the root"] = medianUs(() => (forget.findMatchesWords(new Uint32Array(0), 0, scores), chainEndOf(hashes, n)), calls);
  index.findMatches(hashes, scores);
  steps["chain end after the route's walk of the same hashes"] = medianUs(() => chainEndOf(hashes, n), calls);
  return {
    ...steps,
    "load: add + release the request's blocks": medianUs(() => {
      load.add({ receiptId: "r", slot: 1, prefillTokens: 0, decodeBlocks: n, chainKeys: keys, startedAt: 0, prefillDone: false });
      load.release("r");
    }, calls),
    "edge: bigint[] → BigUint64Array for the RPC": medianUs(() => {
      const a = new BigUint64Array(plain.length);
      for (let i = 0; i < plain.length; i++) a[i] = plain[i];
    }, calls),
  };
}
