// Replays a trace against N simulated SGLang caches (services/sglang-sim PagedRadixCache, capacity
// forcing eviction) under one routing policy and one worker cost model: "linear" (one serial prefill
// lane at a fixed rate: the model the router's ttft cost assumes) or "calibrated" (SGLang's
// prefill-first scheduler with chunked prefill and batched decode on the GPU-measured cost table;
// bench/lib/worker-model.mjs). kvedge and text-prefix policies route through a real RoutingCore fed
// by the same relay translation the relays use (KV events → WorkerBlockSet → relay events →
// applyEvents), delivered after a propagation lag. The oracle knows every cache and queue exactly and
// picks the least TTFT under the worker's own (true) cost model, not the router's estimate.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS } from "../../services/sglang-sim/timing.ts";
import { WorkerBlockSet } from "../../services/relay/worker-block-set.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { rng } from "../lib/stats.mjs";
import { Heap } from "../lib/heap.mjs";
import { CalibratedWorker, LinearWorker, peekPrefix as peekPagePrefix } from "../lib/worker-model.mjs";
import { VISION_START } from "./trace.mjs";

const PAGE = 16;


/** Longest cached prefix (whole pages) without touching LRU state or splitting nodes. */
export const peekPrefix = (cache, tokens) => peekPagePrefix(cache, tokens, PAGE);

function fnv(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

// kvedge = the shipped default (cost "ttft": estimated time to first token from the router's own
// load view); kvedge-blocks = the same router with KVEDGE_ROUTING.cost "blocks" (Dynamo's cost).
export const POLICIES = ["kvedge", "kvedge-blocks", "text-prefix", "url-keyed", "least-loaded", "round-robin", "index+ttft", "oracle"];

export function simulate(trace, { policy, workers, capacityTokens, timing = TIMING_PRESETS["h100-8b"], lagMs = 10, seed = 7 }) {
  const Worker = timing.calibration ? CalibratedWorker : LinearWorker;
  const random = rng(seed);
  let now = 0;
  let seq = 0;
  const events = new Heap();
  const usesCore = policy === "kvedge" || policy === "kvedge-blocks" || policy === "text-prefix" || policy === "index+ttft";
  // kvedge as deployed by default (cost "ttft", workers reporting no prefill rate); kvedge-blocks:
  // Dynamo's block cost with decode weight 1 (the previous default, KVEDGE_ROUTING.cost "blocks").
  const cost = policy === "kvedge-blocks" ? "blocks" : "ttft";
  const core = usesCore ? new RoutingCore({ blockSize: PAGE, random, now: () => now, cost }) : null;
  const W = [];
  for (let w = 0; w < workers; w++) {
    const id = `w${w + 1}`;
    const st = { id, served: 0, pendingRelay: [], blockSet: null, worker: null };
    if (core) {
      core.hello({ type: "hello", workerId: id, url: `http://sim/${id}`, blockSize: PAGE, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
      core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
      st.blockSet = new WorkerBlockSet(PAGE);
    }
    // The relay's translation of each KV event, queued until it would reach the index.
    const sink = !core
      ? () => {}
      : (ev) => {
          const kv =
            ev.type === "BlockStored"
              ? { type: "BlockStored", blockHashes: [ev.hash], parentBlockHash: ev.parent, tokenIds: ev.tokens, blockSize: ev.blockSize, medium: "GPU" }
              : ev.type === "BlockRemoved"
                ? { type: "BlockRemoved", blockHashes: ev.hashes, medium: "GPU" }
                : { type: "AllBlocksCleared" };
          const out = st.blockSet.apply([kv]);
          if (out.events.length) st.pendingRelay.push({ at: now + lagMs, events: out.events });
        };
    st.worker = new Worker({ cache: new PagedRadixCache(PAGE, sink), capacityTokens, timing, pageSize: PAGE, schedule: (t, fn) => events.push({ t, seq: seq++, type: "step", fn }) });
    st.cache = st.worker.cache;
    W.push(st);
  }
  let relaySeq = 0;
  const deliver = () => {
    for (const st of W) {
      let k = 0;
      while (k < st.pendingRelay.length && st.pendingRelay[k].at <= now) {
        const r = core.applyEvents(st.id, { type: "events", epoch: 1, seq: relaySeq++, events: st.pendingRelay[k].events });
        if (!r.ok) throw new Error(`relay apply failed on ${st.id}: ${r.reason}`);
        k++;
      }
      if (k) st.pendingRelay.splice(0, k);
    }
  };

  let rr = 0;
  const results = [];
  for (const req of trace) events.push({ t: req.at, seq: seq++, type: "arrive", req });

  const choose = (req) => {
    if (policy === "round-robin") return { w: rr++ % workers };
    if (policy === "least-loaded") {
      let best = 0;
      for (let w = 1; w < workers; w++) if (W[w].worker.active < W[best].worker.active) best = w;
      // Rotate the start on ties so equal loads spread.
      const ties = W.map((s, i) => i).filter((i) => W[i].worker.active === W[best].worker.active);
      return { w: ties[rr++ % ties.length] };
    }
    if (policy === "url-keyed") return { w: fnv(req.urlKey) % workers };
    if (policy === "oracle") {
      // Knows every cache exactly and each worker's prefill queue: the TTFT-greedy choice.
      let best = 0;
      let bestT = Infinity;
      for (let w = 0; w < workers; w++) {
        const hit = peekPrefix(W[w].cache, req.tokens);
        const t = W[w].worker.predictTtft(now, req.tokens.length - hit, hit);
        if (t < bestT) {
          bestT = t;
          best = w;
        }
      }
      return { w: best };
    }
    if (policy === "index+ttft") {
      // Ablation: the same TTFT-greedy choice, but overlaps come from the router's index (relay-fed).
      deliver();
      const scores = new Int32Array(64);
      core.index.findMatches(localBlockHashes(req.tokens, PAGE), scores);
      let best = 0;
      let bestT = Infinity;
      for (let w = 0; w < workers; w++) {
        const overlap = scores[core.slotOf(W[w].id)] * PAGE;
        const t = W[w].worker.predictTtft(now, req.tokens.length - overlap, overlap);
        if (t < bestT) {
          bestT = t;
          best = w;
        }
      }
      return { w: best };
    }
    deliver();
    // text-prefix: media ignored, so only the text before the first media token is hashed.
    const cut = req.tokens.indexOf(VISION_START);
    const hashes = localBlockHashes(policy === "text-prefix" && cut >= 0 ? req.tokens.slice(0, cut) : req.tokens, PAGE);
    const d = core.route({ localHashes: hashes, isl: req.tokens.length });
    return { w: Number(d.workerId.slice(1)) - 1, receipt: d.receiptId, predicted: d.overlapBlocks };
  };

  while (events.size) {
    const ev = events.pop();
    now = ev.t;
    if (ev.type === "step") {
      ev.fn(now);
      continue;
    }
    const req = ev.req;
    let best = 0;
    for (const st of W) best = Math.max(best, peekPrefix(st.cache, req.tokens));
    const { w, receipt } = choose(req);
    const st = W[w];
    st.served++;
    const r = { id: req.id, kind: req.kind, worker: w, tokens: req.tokens.length, outputTokens: req.output.length, cached: 0, best, ttft: NaN, finishAt: NaN, arrivedAt: now, receipt };
    results.push(r);
    st.worker.submit(
      {
        req,
        r,
        // As the edge does: a streamed request's first output tells the index its prefill is over
        // (chat.ts prefillDone); an unstreamed one's answer comes whole, at its end.
        onPrefilled: () => {
          if (core && receipt && req.stream) core.markPrefillDone(receipt);
        },
        onFinished: () => {
          if (core && receipt) core.settle({ receiptId: receipt, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" });
        },
      },
      now,
    );
  }
  return { results, served: W.map((s) => s.served) };
}

/** Hit rate of one infinite cache that saw every earlier request (the workload's ceiling). */
export function infiniteCacheHitRate(trace) {
  const cache = new PagedRadixCache(PAGE);
  let hit = 0;
  let total = 0;
  for (const req of [...trace].sort((a, b) => a.at - b.at)) {
    hit += peekPrefix(cache, req.tokens);
    total += req.tokens.length;
    cache.insert(req.tokens.concat(req.output.slice(0, req.output.length - 1)));
  }
  return hit / total;
}
