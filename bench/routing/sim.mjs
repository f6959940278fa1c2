// Replays a trace against N simulated SGLang workers (services/sglang-sim PagedRadixCache with a KV
// capacity forcing LRU eviction; the GPU-calibrated cost model of bench/lib/worker-model.mjs) under
// one routing policy. Policies that use kvedge's index route through a real RoutingCore fed by the
// relays' own translation (KV events → WorkerBlockSet → relay events → applyEvents), delivered after
// a propagation lag. Baselines:
//   kvedge          the shipped default: RoutingCore, cost "ttft" (estimated time to first token);
//   approximate     the same router with workers that send no KV events (approximate mode: blocks
//                   assumed cached where they were routed, src/block-index/approx-index.ts);
//   dynamo-blocks   the same router with cost "blocks" and Dynamo's load view: Dynamo's default KV-router
//                   cost, max(0, (active prefill tokens + ISL) / B − overlap blocks) + active decode
//                   blocks + the request's new blocks (DefaultWorkerScorer::worker_logit, lib/kv-router/
//                   src/scheduling/selector/default.rs, ai-dynamo/dynamo@a4bdb9bf; defaults credit 1,
//                   prefill_load_scale 1, decay 0, no prefill load model: scheduling/config.rs). A
//                   worker's active prefill is counted, not drained: a routed request's uncached
//                   tokens until its first token (KvPushRouter marks prefill complete on the engine's
//                   first output, streamed to the client or not, lib/llm/src/kv_router/push_router.rs)
//                   or its end, so the core runs with `drainQueuedPrefill: false`;
//   llm-d           llm-d's default scheduling profile (guides/inference-scheduling, llm-d/llm-d@086f217d):
//                   3 × prefix score + 2 × KV-cache utilisation score + 2 × queue score, highest wins.
//                   Prefix: the cached share of the request's blocks (GAIE's prefix-cache-scorer,
//                   matched ÷ total blocks) on the relay-fed index, i.e. exact KV events where the
//                   default profile's scorer indexes where it routed (llm-d's precise-prefix-cache-
//                   scorer reads KV events but min–max normalises block counts, weights 2/1/1 in its
//                   guide: not this baseline). KV utilisation: 1 − the worker's used KV ÷ capacity
//                   (kv-cache-utilization-scorer on SGLang's token_usage: CalibratedWorker.kvUsedTokens).
//                   Queue: min–max normalised waiting requests, 1 when all are equal (queue-scorer on
//                   num_queue_reqs: CalibratedWorker.queuedRequests). GAIE scorers at
//                   kubernetes-sigs/gateway-api-inference-extension@02308be3, pkg/epp/scheduling/
//                   framework/plugins/scorer/{kvcache_utilization,queue}.go. Metrics exact and
//                   instantaneous (the EPP scrapes them every 50 ms);
//   session-sticky  a hash of the session id picks the worker (consistent affinity, no load view);
//   least-loaded    fewest in-flight requests (ties rotate);
//   round-robin     in turn.
// Media-blind peers (they differ from kvedge and session-sticky only where prompts carry media):
//   text-prefix     the kvedge router fed only the text before the prompt's first media item (a
//                   router that hashes text and cannot place media in the prefix);
//   url-keyed       a hash of the prompt's first media URL picks the worker (media keyed by URL, not
//                   content; a prompt without media by its session), so one item under two URLs
//                   lands on two workers.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS } from "../../services/sglang-sim/timing.ts";
import { WorkerBlockSet } from "../../services/relay/worker-block-set.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { relayKvEvent } from "../lib/kv-event.mjs";
import { rng } from "../lib/stats.mjs";
import { EventLoop } from "../lib/event-loop.mjs";
import { CalibratedWorker, LinearWorker, peekPrefix as peekPagePrefix } from "../lib/worker-model.mjs";
import { VISION_START } from "./traces.mjs";

export const PAGE = 16;

/** Longest cached prefix (whole pages) without touching LRU state or splitting nodes. */
export const peekPrefix = (cache, tokens) => peekPagePrefix(cache, tokens, PAGE);

function fnv(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

export const POLICIES = ["kvedge", "approximate", "dynamo-blocks", "llm-d", "session-sticky", "least-loaded", "round-robin", "text-prefix", "url-keyed"];
/** Policies that route on media: on a trace without media they make kvedge's and session-sticky's choices. */
export const MEDIA_BLIND_POLICIES = ["text-prefix", "url-keyed"];
/** llm-d's default profile weights (prefix-cache-scorer, kv-cache-utilization-scorer, queue-scorer). */
export const LLMD_WEIGHTS = { prefix: 3, kvUtilization: 2, queue: 2 };

const CORE_POLICIES = new Set(["kvedge", "approximate", "dynamo-blocks", "llm-d", "text-prefix"]);

/** A request's block hashes, computed once for all the policies and capacities that replay it. */
const HASHES = new WeakMap();
function hashesOf(req) {
  let h = HASHES.get(req);
  if (!h) HASHES.set(req, (h = localBlockHashes(req.tokens, PAGE)));
  return h;
}

/** `learnPrefillRate`: the index learns each worker's prefill rate (RoutingCore option; undefined: its default). */
export function simulate(trace, { policy, workers, capacityTokens, timing = TIMING_PRESETS["h200-7b"], lagMs = 10, seed = 7, learnPrefillRate }) {
  if (!POLICIES.includes(policy)) throw new Error(`unknown policy ${policy}`);
  const Worker = timing.calibration ? CalibratedWorker : LinearWorker;
  const random = rng(seed);
  const loop = new EventLoop();
  const dynamo = policy === "dynamo-blocks";
  const core = CORE_POLICIES.has(policy)
    ? new RoutingCore({ blockSize: PAGE, random, now: () => loop.now, cost: dynamo ? "blocks" : "ttft", ...(dynamo ? { drainQueuedPrefill: false } : {}), learnPrefillRate })
    : null;
  const kvEvents = policy !== "approximate";
  const W = [];
  for (let w = 0; w < workers; w++) {
    const id = `w${w + 1}`;
    const st = { id, served: 0, pendingRelay: [], blockSet: null, worker: null };
    if (core) {
      core.hello({ type: "hello", workerId: id, url: `http://sim/${id}`, blockSize: PAGE, epoch: 1, modelName: "m", contract: null, kvEvents, kvCapacityTokens: capacityTokens }, id);
      if (kvEvents) {
        core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
        st.blockSet = new WorkerBlockSet(PAGE);
      }
    }
    // The relay's translation of each KV event, queued until it would reach the index.
    const sink = !st.blockSet
      ? () => {}
      : (ev) => {
          const out = st.blockSet.apply([relayKvEvent(ev)]);
          if (out.events.length) st.pendingRelay.push({ at: loop.now + lagMs, events: out.events });
        };
    st.worker = new Worker({ cache: new PagedRadixCache(PAGE, sink), capacityTokens, timing, pageSize: PAGE, schedule: loop.schedule });
    st.cache = st.worker.cache;
    W.push(st);
  }
  let relaySeq = 0;
  const deliver = () => {
    for (const st of W) {
      let k = 0;
      while (k < st.pendingRelay.length && st.pendingRelay[k].at <= loop.now) {
        const r = core.applyEvents(st.id, { type: "events", epoch: 1, seq: relaySeq++, events: st.pendingRelay[k].events });
        if (!r.ok) throw new Error(`relay apply failed on ${st.id}: ${r.reason}`);
        k++;
      }
      if (k) st.pendingRelay.splice(0, k);
    }
  };

  let rr = 0;
  const results = [];

  const choose = (req) => {
    if (policy === "round-robin") return { w: rr++ % workers };
    if (policy === "session-sticky") return { w: fnv(req.session) % workers };
    if (policy === "url-keyed") return { w: fnv(req.mediaUrl ?? req.session) % workers };
    if (policy === "least-loaded") {
      let min = Infinity;
      for (const st of W) min = Math.min(min, st.worker.active);
      const ties = W.map((_s, i) => i).filter((i) => W[i].worker.active === min);
      return { w: ties[rr++ % ties.length] };
    }
    deliver();
    const cut = policy === "text-prefix" ? req.tokens.indexOf(VISION_START) : -1;
    const localHashes = cut >= 0 ? localBlockHashes(req.tokens.slice(0, cut), PAGE) : hashesOf(req);
    if (policy === "llm-d") {
      const preview = core.peek({ localHashes, isl: req.tokens.length });
      const overlap = new Map(preview.candidates.map((c) => [c.workerId, c.overlapBlocks]));
      const qs = W.map((s) => s.worker.queuedRequests());
      const qMin = Math.min(...qs);
      const qMax = Math.max(...qs);
      let best = -Infinity;
      let ties = [];
      for (let w = 0; w < workers; w++) {
        const prefix = localHashes.length ? (overlap.get(W[w].id) ?? 0) / localHashes.length : 0;
        const kvFree = 1 - W[w].worker.kvUsedTokens() / capacityTokens;
        const queue = qMax === qMin ? 1 : (qMax - qs[w]) / (qMax - qMin);
        const score = LLMD_WEIGHTS.prefix * prefix + LLMD_WEIGHTS.kvUtilization * kvFree + LLMD_WEIGHTS.queue * queue;
        if (score > best + 1e-12) {
          best = score;
          ties = [w];
        } else if (Math.abs(score - best) <= 1e-12) ties.push(w);
      }
      return { w: ties[Math.floor(random() * ties.length)] };
    }
    const d = core.route({ localHashes, isl: req.tokens.length });
    return { w: Number(d.workerId.slice(1)) - 1, receipt: d.receiptId };
  };

  loop.run(trace, (req, now) => {
    const { w, receipt } = choose(req);
    const st = W[w];
    st.served++;
    const r = { id: req.id, kind: req.kind, worker: w, tokens: req.tokens.length, outputTokens: req.output.length, cached: 0, ttft: NaN, finishAt: NaN, arrivedAt: now, receipt };
    results.push(r);
    st.worker.submit(
      {
        req,
        r,
        // As the edge does: a streamed request's first output tells the index its prefill is over
        // (src/edge/chat/proxy.ts, receipt.prefillDone); an unstreamed one's answer comes whole, at its end.
        // Dynamo's router reads every request's first output (the engine streams to it whatever the client asked).
        onPrefilled: () => {
          if (core && receipt && (req.stream || dynamo)) core.markPrefillDone(receipt);
        },
        onFinished: () => {
          if (core && receipt) core.settle({ receiptId: receipt, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" });
        },
      },
      now,
    );
  });
  // What the index learned of each worker's prefill rate (tokens/s; null: too few samples), for the report.
  return { results, served: W.map((s) => s.served), learnedPrefillRates: core ? core.workers().map((w) => w.learnedPrefillTokensPerSec) : null };
}

/**
 * Per request, the prefix an infinite cache shared by the whole fleet would hold when it arrives
 * (every earlier prompt and answer, as SGLang caches them): the trace's ceiling. `workingSetTokens`:
 * what that cache holds at the end (the KV the trace needs never to evict).
 */
export function infiniteCacheHits(trace) {
  const cache = new PagedRadixCache(PAGE);
  const hits = new Array(trace.length);
  for (const req of [...trace].sort((a, b) => a.at - b.at)) {
    hits[req.id] = peekPrefix(cache, req.tokens);
    cache.insert(req.tokens.concat(req.output.slice(0, req.output.length - 1)));
  }
  return { hits, workingSetTokens: cache.totalTokens };
}
