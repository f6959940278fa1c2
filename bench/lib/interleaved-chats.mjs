// Many long chats taking turns at the routing index (bench/suites/index.mjs, scripts/route-interleaved.mjs).
// The route-call bench routes one chat again and again, which hands its pending chain over; here each
// route is another chat's next turn. RoutingCore in process (route-call.mjs routePool), `chats` chats of
// minBlocks..maxBlocks blocks (block 16) behind a 32-block system prompt, `turns` turns of `newBlocks`
// blocks in a shuffled order, each routed and settled (timed), the clock `tickMs` a route.
// Workers with KV events hold the chats from the start (chat c on worker c mod workers); `store`: the
// picked worker stores the new turn (the whole chat where it does not hold it); `capBlocks`: each worker
// evicts its least recently used chats past that many blocks (a GPU's KV; 0: never). Workers without KV
// events hold nothing the index hears of: each chat is routed once, untimed, before the turns, and
// nothing is stored (the approximate index records the routes).
import { hashesFrom, routePool } from "./route-call.mjs";
import { rng, summarize } from "./stats.mjs";

const BLOCK = 16;
const SYSTEM_BLOCKS = 32;
/** Turns left out of the summary at the start (the JIT's warm-up), at most a quarter of them. */
const WARMUP_TURNS = 50;

/**
 * Runs the turns; `onTurnsStart` is called after the setup, before the first timed route.
 * Returns the per-route ms (`samples`, every turn), their summary past the warm-up (`routeMs`), the
 * setup's ms, the pool (`core`), the relay sends the pool refused and the workers it marked approximate.
 */
export async function interleavedChats({ chats = 200, minBlocks = 2000, maxBlocks = 6400, workers = 12, turns = 300, newBlocks = 64, store = true, tickMs = 1, blockBudget = 0, capBlocks = 0, kvEvents = true, seed = 0x5eed, onTurnsStart = () => {} } = {}) {
  const random = rng(seed);
  const u64 = hashesFrom(random);
  let refusedSends = 0;
  const pool = await routePool({ workers, blockBudget, kvEvents, onRefused: () => refusedSends++ });
  const { core, send, tick } = pool;
  const routeAndSettle = (localHashes) => {
    const isl = localHashes.length * BLOCK;
    const d = core.route({ localHashes, isl });
    core.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: d.overlapBlocks * BLOCK, outcome: "ok" });
    return d;
  };
  const held = new Map(); // worker -> Map(chat -> engine hashes) in LRU order
  const heldBlocks = (m) => {
    let n = 0;
    for (const v of m.values()) n += v.length;
    return n;
  };
  // Stores `chain` for `chat` on `worker` below engine hash `parent` (null: the chat anew); returns the chat's last engine hash.
  const storeFor = (chat, worker, chain, parent) => {
    const m = held.get(worker) ?? new Map();
    held.set(worker, m);
    const hs = pool.store(worker, chain, parent);
    const mine = parent === null ? hs : (m.get(chat) ?? []).concat(hs);
    m.delete(chat);
    m.set(chat, mine);
    if (capBlocks) {
      let n = heldBlocks(m);
      for (const [c, v] of m) {
        if (n <= capBlocks || c === chat) break;
        send(worker, [{ t: "removed", hashes: v.slice().reverse() }]);
        m.delete(c);
        n -= v.length;
      }
    }
    return hs[hs.length - 1];
  };
  const system = Array.from({ length: SYSTEM_BLOCKS }, u64);
  const all = [];
  const t0 = performance.now();
  for (let c = 0; c < chats; c++) {
    const n = minBlocks + Math.floor(random() * (maxBlocks - minBlocks));
    const chat = { chain: system.concat(Array.from({ length: n - SYSTEM_BLOCKS }, u64)), worker: `w${c % workers}`, tip: null };
    if (kvEvents) chat.tip = storeFor(chat, chat.worker, chat.chain, null);
    all.push(chat);
  }
  if (!kvEvents)
    for (const chat of all) {
      tick(tickMs);
      routeAndSettle(BigUint64Array.from(chat.chain));
    }
  const setupMs = performance.now() - t0;
  const order = Array.from({ length: turns }, () => Math.floor(random() * chats));
  const samples = new Float64Array(turns);
  onTurnsStart();
  for (let i = 0; i < turns; i++) {
    const chat = all[order[i]];
    const turn = Array.from({ length: newBlocks }, u64);
    const q = BigUint64Array.from(chat.chain.concat(turn));
    tick(tickMs);
    const t = performance.now();
    const d = routeAndSettle(q);
    samples[i] = performance.now() - t;
    if (store && kvEvents) {
      if (d.workerId === chat.worker && held.get(chat.worker)?.has(chat)) chat.tip = storeFor(chat, chat.worker, turn, chat.tip);
      else {
        chat.worker = d.workerId;
        chat.tip = storeFor(chat, chat.worker, chat.chain.concat(turn), null);
      }
    }
    chat.chain = chat.chain.concat(turn);
  }
  return {
    samples,
    routeMs: summarize(samples.subarray(Math.min(WARMUP_TURNS, turns >> 2))),
    setupMs,
    core,
    refusedSends,
    approximateWorkers: core.workers().filter((w) => core.isApproximate(w.workerId)).length,
  };
}
