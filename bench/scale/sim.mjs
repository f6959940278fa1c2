// Scale simulation: a seeded global trace replayed against 1 000+ in-process simulated SGLang
// workers (services/sglang-sim PagedRadixCache with capacity + LRU and its timing model, no
// sockets) in 3 regions, routed by kvedge's RoutingCore with region-aware selection, in one of
// three layouts:
//   single      one RoutingCore over one RadixIndex (today's one-object-per-pool design);
//   central     one RoutingCore over a ShardedIndex (registry + load in one place, each query
//               reads one shard) — must decide exactly like `single`;
//   replicated  N shard objects, each a RoutingCore over its shard's blocks with a replica of the
//               registry and of the load, which the shards exchange with a bounded delay
//               (`syncMs`); a request goes to the shard of its first block. This is the layout
//               whose throughput can grow with N (each shard is its own Durable Object).
// KV events travel as the relays send them (WorkerBlockSet translation), after `lagMs`; in the
// replicated layout each relay splits them per shard by chain root (splitRelayEvents).
// Work is timed per shard object (CPU time): route decisions, event ingestion, foreign load updates.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS } from "../../services/sglang-sim/timing.ts";
import { WorkerBlockSet } from "../../services/relay/worker-block-set.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { ShardedIndex } from "../../src/block-index/sharded-index.ts";
import { ChainRootRouter, shardOf } from "../../src/relay-wire/chain-shards.ts";
import { splitRelayEvents } from "../../src/relay-wire/split-events.ts";
import { RegionsConfigSchema } from "../../src/selection/regions.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { rng } from "../lib/stats.mjs";
import { Heap } from "../lib/heap.mjs";
import { admit, finished, prefilled } from "../lib/worker-model.mjs";
import { REGIONS } from "./trace.mjs";

export const PAGE = 16;

export const SCALE_REGIONS = RegionsConfigSchema.parse({
  rttMs: { eu: { eu: 3, us: 85, ap: 170 }, us: { us: 3, ap: 140 }, ap: { ap: 3 } },
  defaultPrefillTokensPerSec: TIMING_PRESETS["h100-8b"].prefillTokensPerSec,
  decodeMsPerBlock: 0.01,
});


/** FIFO of timed deliveries (constant delay, so pushes arrive in time order). */
class Fifo {
  constructor() {
    this.items = [];
    this.head = 0;
  }
  push(x) {
    this.items.push(x);
  }
  *due(now) {
    while (this.head < this.items.length && this.items[this.head].at <= now) yield this.items[this.head++];
    if (this.head > 4096 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}

function toKv(ev) {
  return ev.type === "BlockStored"
    ? { type: "BlockStored", blockHashes: [ev.hash], parentBlockHash: ev.parent, tokenIds: ev.tokens, blockSize: ev.blockSize, medium: "GPU" }
    : ev.type === "BlockRemoved"
      ? { type: "BlockRemoved", blockHashes: ev.hashes, medium: "GPU" }
      : { type: "AllBlocksCleared" };
}

/** Worker w's region: capacity split 40/40/20 like the demand. */
export function regionOfWorker(w, workers) {
  const f = w / workers;
  return f < 0.4 ? 0 : f < 0.8 ? 1 : 2;
}

export function runScale(trace, opts) {
  const { workers, layout, shards = 1, syncMs = 20, rpcMs = 1, capacityTokens, lagMs = 10, seed = 7, onProgress = () => {} } = opts;
  const timing = opts.timing ?? TIMING_PRESETS["h100-8b"];
  const nCores = layout === "replicated" ? shards : 1;
  let now = 0;
  let seq = 0;
  const cores = Array.from(
    { length: nCores },
    (_, k) =>
      new RoutingCore({
        blockSize: PAGE,
        random: rng(seed + 1000 * k),
        now: () => now,
        regions: SCALE_REGIONS,
        // The shard objects' own replication code (src/load/load-replica.ts), as the Durable Object runs it.
        replicateLoad: layout === "replicated" && shards > 1,
        ...(layout === "central" && shards > 1 ? { index: new ShardedIndex(shards) } : {}),
        // Per-object block budget (src/block-index/block-budget.ts); bench/scale/budget.mjs shows what it refuses.
        // Without one the simulation models an unbounded object (as before budgets existed).
        ...(opts.blockBudget ? { blockBudget: opts.blockBudget } : { blockBudget: Number.MAX_SAFE_INTEGER, indexBudgetBytes: Infinity }),
      }),
  );
  const busy = { route: new Float64Array(nCores), events: new Float64Array(nCores), sync: new Float64Array(nCores) };
  const perShardDecisions = new Float64Array(nCores);
  const relay = new Fifo();
  const sync = new Fifo();
  const W = [];
  for (let w = 0; w < workers; w++) {
    const id = `w${w}`;
    const hello = {
      type: "hello",
      workerId: id,
      url: `http://sim/${id}`,
      blockSize: PAGE,
      epoch: 1,
      modelName: "m",
      contract: null,
      kvEvents: true,
      region: REGIONS[regionOfWorker(w, workers)],
      prefillTokensPerSec: timing.prefillTokensPerSec,
    };
    for (const c of cores) {
      c.hello(hello, id);
      c.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
    }
    const st = { id, w, laneFree: 0, active: 0, reserved: 0, blockSet: new WorkerBlockSet(PAGE), router: nCores > 1 ? new ChainRootRouter(nCores) : null, cache: null };
    st.cache = new PagedRadixCache(PAGE, (ev) => {
      const out = st.blockSet.apply([toKv(ev)]);
      if (out.events.length) relay.push({ at: now + lagMs, st, events: out.events });
    });
    W.push(st);
  }
  let relaySeq = 0;
  // Work is CPU time of this process (µs resolution), so other load on the machine does not count
  // as a shard's work; decision latency below is wall time.
  const cpuMs = () => {
    const c = process.cpuUsage();
    return (c.user + c.system) / 1000;
  };
  const timed = (k, bucket, fn) => {
    const t = cpuMs();
    const r = fn();
    bucket[k] += cpuMs() - t;
    return r;
  };
  const deliver = () => {
    for (const item of relay.due(now)) {
      if (nCores === 1) {
        timed(0, busy.events, () => cores[0].applyEvents(item.st.id, { type: "events", epoch: 1, seq: relaySeq++, events: item.events }));
        continue;
      }
      // The relay's fan-out (its own CPU, not the shards'): split by chain root.
      const { perShard } = splitRelayEvents(item.st.router, item.events);
      for (let k = 0; k < nCores; k++) {
        if (perShard[k].length === 0) continue;
        timed(k, busy.events, () => cores[k].applyEvents(item.st.id, { type: "events", epoch: 1, seq: relaySeq++, events: perShard[k] }));
      }
    }
    for (const batch of sync.due(now)) {
      for (let k = 0; k < nCores; k++) {
        if (k === batch.from) continue;
        timed(k, busy.sync, () => cores[k].applyRemoteLoad(batch.from, batch.ops));
      }
    }
  };
  // As durable-objects/routing-index.ts: a shard sends its queued load changes loadSyncMs after the
  // first one, or at once when it settles a request (release before reply); delivery takes rpcMs.
  const flushAt = new Float64Array(nCores).fill(-1);
  const flush = (k) => {
    flushAt[k] = -1;
    const ops = cores[k].takeLoadOps();
    if (ops.length > 0) sync.push({ at: now + rpcMs, from: k, ops });
  };
  const share = (k, immediate) => {
    if (nCores === 1) return;
    if (immediate) return flush(k);
    if (flushAt[k] < 0 && cores[k].pendingLoadOps > 0) {
      flushAt[k] = now + syncMs;
      events.push({ t: flushAt[k], seq: seq++, type: "flush", k });
    }
  };

  const events = new Heap();
  for (const req of trace) events.push({ t: req.at, seq: seq++, type: "arrive", req });
  const decisions = new Int32Array(trace.length);
  const latencyMs = new Float64Array(trace.length);
  let cachedTokens = 0;
  let totalTokens = 0;
  let overlapTokens = 0;
  let crossRegion = 0;
  let done = 0;
  while (events.size) {
    const ev = events.pop();
    now = ev.t;
    if (ev.type === "arrive") {
      const req = ev.req;
      deliver();
      const hashes = localBlockHashes(req.tokens, PAGE);
      const k = nCores === 1 || hashes.length === 0 ? 0 : shardOf(hashes[0], nCores);
      const core = cores[k];
      const c0 = cpuMs();
      const t0 = performance.now();
      const d = core.route({ localHashes: hashes, isl: req.tokens.length, edgeRegion: REGIONS[req.region] });
      latencyMs[req.id] = performance.now() - t0;
      busy.route[k] += cpuMs() - c0;
      perShardDecisions[k]++;
      const w = Number(d.workerId.slice(1));
      decisions[req.id] = w;
      overlapTokens += Math.min(req.tokens.length, d.overlapBlocks * PAGE);
      if (regionOfWorker(w, workers) !== req.region) crossRegion++;
      share(k, false);
      const st = W[w];
      const ids = req.tokens;
      const { match, need, prefilledAt } = admit(st, req, now, capacityTokens, timing);
      cachedTokens += match.length;
      totalTokens += ids.length;
      const r = { k, receipt: d.receiptId, node: match.node, cached: match.length, reservedNeed: need };
      events.push({ t: prefilledAt, seq: seq++, type: "prefilled", r, st, req });
      if (++done % 2000 === 0) onProgress(done / trace.length);
    } else if (ev.type === "prefilled") {
      const { r, st, req } = ev;
      const finishAt = prefilled(st, r, req, now, PAGE, timing);
      timed(r.k, busy.route, () => cores[r.k].markPrefillDone(r.receipt));
      share(r.k, false);
      events.push({ t: finishAt, seq: seq++, type: "finish", r, st, req });
    } else if (ev.type === "flush") {
      if (flushAt[ev.k] === ev.t) flush(ev.k);
    } else {
      const { r, st, req } = ev;
      finished(st, r, req);
      timed(r.k, busy.route, () => cores[r.k].settle({ receiptId: r.receipt, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" }));
      share(r.k, true);
    }
  }
  const shardBusy = Array.from({ length: nCores }, (_, k) => busy.route[k] + busy.events[k] + busy.sync[k]);
  const indexSizes = layout === "central" && shards > 1 ? cores[0].index.shardSizes() : cores.map((c) => c.index.size);
  return {
    layout,
    shards,
    decisions,
    latencyMs,
    hitRate: cachedTokens / totalTokens,
    predictedHitRate: overlapTokens / totalTokens,
    crossRegionShare: crossRegion / trace.length,
    perShardDecisions: [...perShardDecisions],
    busyMs: { route: [...busy.route], events: [...busy.events], sync: [...busy.sync], total: shardBusy },
    indexSizes,
    budget: cores.map((c) => ({ limit: c.budget.limit, refused: c.budget.refused, bytes: c.index.storageBytes?.() ?? null })),
    approximateWorkers: cores.map((c) => c.workers().filter((w) => w.approximate).length),
  };
}
