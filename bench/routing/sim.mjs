// Replays a trace against N simulated SGLang caches (services/sglang-sim PagedRadixCache, capacity
// forcing eviction, the simulator's timing model) under one routing policy. kvedge and text-prefix
// policies route through a real RoutingCore fed by the same relay translation the relays use
// (KV events → WorkerBlockSet → relay events → applyEvents), delivered after a propagation lag.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS, prefillMs } from "../../services/sglang-sim/timing.ts";
import { WorkerBlockSet } from "../../src/kv/worker-block-set.ts";
import { RoutingCore } from "../../src/kv/routing-core.ts";
import { localBlockHashes } from "../../src/kv/block-hash.ts";
import { rng } from "../lib/stats.mjs";
import { Heap } from "../lib/heap.mjs";
import { admit, finished, prefilled } from "../lib/worker-model.mjs";
import { VISION_START } from "./trace.mjs";

const PAGE = 16;


/** Longest cached prefix (whole pages) without touching LRU state or splitting nodes. */
export function peekPrefix(cache, tokens) {
  const n = tokens.length - 1 - ((tokens.length - 1) % PAGE); // the engine matches ids[:-1]
  let node = cache.rootNode;
  let pos = 0;
  outer: while (pos < n) {
    for (const child of node.children.values()) {
      const k = child.key;
      if (k[0] !== tokens[pos]) continue;
      let i = 0;
      const max = Math.min(k.length, n - pos);
      while (i < max && k[i] === tokens[pos + i]) i++;
      i -= i % PAGE;
      if (i === 0) continue;
      pos += i;
      if (i < k.length) break outer;
      node = child;
      continue outer;
    }
    break;
  }
  return pos;
}

function fnv(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

// kvedge = the shipped default (cost "ttft": estimated time to first token from the router's own
// load view); kvedge-blocks = the same router with KVEDGE_ROUTING.cost "blocks" (Dynamo's cost).
export const POLICIES = ["kvedge", "kvedge-blocks", "text-prefix", "url-keyed", "least-loaded", "round-robin", "index+ttft", "oracle"];

export function simulate(trace, { policy, workers, capacityTokens, timing = TIMING_PRESETS["h100-8b"], lagMs = 10, seed = 7 }) {
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
    const st = { id, laneFree: 0, active: 0, served: 0, reserved: 0, pendingRelay: [], blockSet: null, cache: null };
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
    st.cache = new PagedRadixCache(PAGE, sink);
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
      for (let w = 1; w < workers; w++) if (W[w].active < W[best].active) best = w;
      // Rotate the start on ties so equal loads spread.
      const ties = W.map((s, i) => i).filter((i) => W[i].active === W[best].active);
      return { w: ties[rr++ % ties.length] };
    }
    if (policy === "url-keyed") return { w: fnv(req.urlKey) % workers };
    if (policy === "oracle") {
      // Knows every cache exactly and each worker's prefill queue: the TTFT-greedy choice.
      let best = 0;
      let bestT = Infinity;
      for (let w = 0; w < workers; w++) {
        const t = Math.max(0, W[w].laneFree - now) + prefillMs(timing, req.tokens.length - peekPrefix(W[w].cache, req.tokens));
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
        const t = Math.max(0, W[w].laneFree - now) + prefillMs(timing, req.tokens.length - overlap);
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
    if (ev.type === "arrive") {
      const req = ev.req;
      let best = 0;
      for (const st of W) best = Math.max(best, peekPrefix(st.cache, req.tokens));
      const { w, receipt } = choose(req);
      const st = W[w];
      const ids = req.tokens;
      const { match, need, uncached, prefilledAt: done } = admit(st, req, now, capacityTokens, timing);
      st.served++;
      st.queuedTokens = (st.queuedTokens ?? 0) + uncached;
      st.decodeBlocks = (st.decodeBlocks ?? 0) + Math.ceil(ids.length / PAGE);
      const r = { id: req.id, kind: req.kind, worker: w, tokens: ids.length, cached: match.length, best, ttft: done - now, node: match.node, receipt, reservedNeed: need, uncached };
      results.push(r);
      events.push({ t: done, seq: seq++, type: "prefilled", r, st, req });
    } else if (ev.type === "prefilled") {
      const { r, st, req } = ev;
      const finishAt = prefilled(st, r, req, now, PAGE, timing);
      st.queuedTokens -= r.uncached;
      if (core && r.receipt) core.markPrefillDone(r.receipt);
      events.push({ t: finishAt, seq: seq++, type: "finish", r, st, req });
    } else {
      const { r, st, req } = ev;
      finished(st, r, req);
      st.decodeBlocks -= Math.ceil(req.tokens.length / PAGE);
      if (core && r.receipt) core.settle({ receiptId: r.receipt, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" });
    }
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
