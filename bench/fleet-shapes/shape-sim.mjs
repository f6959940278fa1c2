// Replays a trace on one fleet shape of the same GPU count: `unified` workers (each prefills and
// decodes), or a PD pool of `prefill` + `decode` workers. kvedge's RoutingCore picks the worker (a
// unified one, or a prefill worker and its decode peer, as the edge does: src/routing-index/router.ts),
// fed by the relays' KV events after a propagation lag. The judge is the calibrated worker model, not
// the router's estimate:
// - unified and prefill workers: CalibratedWorker (bench/lib/worker-model.mjs), SGLang's prefill-first
//   loop with chunked prefill, costs measured on the GPU. Prefill/decode interference: while any
//   prompt waits, the worker runs a prefill batch (up to the chunk size) and the running batch's
//   next decode step waits for it, as SGLang's scheduler does with mixed chunks off (its default);
//   each stall lasts the measured cost of that chunk on its cached prefix.
// - a prefill worker computes the prompt and the first token (output of one token) and keeps the
//   prompt in its radix cache; the prompt's whole KV then crosses to the decode worker over the
//   prefill's NIC (FIFO per prefill worker) at `transferGBps`, bytes per token from the model's KV
//   geometry (bench/routing/kv-capacity.mjs). The transfer starts when the prefill ends: SGLang sends
//   chunk by chunk as a chunked prefill goes, so for prompts longer than one chunk this over-counts the
//   exposed transfer (an upper bound).
// - decode workers: DecodeWorker (./decode-worker.mjs).
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { rng } from "../lib/stats.mjs";
import { EventLoop } from "../lib/event-loop.mjs";
import { CalibratedWorker } from "../lib/worker-model.mjs";
import { DecodeWorker } from "./decode-worker.mjs";
import { RelayFeed, hello } from "./relay-feed.mjs";

export const PAGE = 16;

/**
 * `shape`: { unified: n } or { prefill: p, decode: d }. Returns per request { id, tokens,
 * outputTokens, cached, ttft, finishAt, arrivedAt, transferMs } and the shape's GPU count.
 */
export function simulateShape(trace, { shape, capacityTokens, timing, bytesPerToken, transferGBps = 25, lagMs = 10, seed = 7 }) {
  const random = rng(seed);
  const loop = new EventLoop();
  const schedule = loop.schedule;
  const core = new RoutingCore({ blockSize: PAGE, random, now: () => loop.now, cost: "ttft" });
  const feed = new RelayFeed(core, PAGE, lagMs, () => loop.now);
  const pd = shape.unified === undefined;
  const front = new Map(); // worker id → CalibratedWorker (unified or prefill)
  const decoders = new Map(); // worker id → DecodeWorker
  const linkFree = new Map(); // prefill worker id → when its NIC is free
  const nFront = pd ? shape.prefill : shape.unified;
  for (let i = 0; i < nFront; i++) {
    const id = pd ? `p${i + 1}` : `w${i + 1}`;
    hello(core, { workerId: id, disaggregationMode: pd ? "prefill" : undefined }, PAGE);
    front.set(id, new CalibratedWorker({ cache: new PagedRadixCache(PAGE, feed.sink(id)), capacityTokens, timing, pageSize: PAGE, schedule }));
    linkFree.set(id, 0);
  }
  for (let i = 0; pd && i < shape.decode; i++) {
    const id = `d${i + 1}`;
    // A decode worker keeps no radix cache and publishes no KV events.
    hello(core, { workerId: id, kvEvents: false, disaggregationMode: "decode" }, PAGE);
    decoders.set(id, new DecodeWorker({ capacityTokens, timing, schedule }));
  }

  const results = [];
  loop.run(trace, (req, now) => {
    feed.deliver();
    const d = core.route({ localHashes: localBlockHashes(req.tokens, PAGE), isl: req.tokens.length });
    const r = { id: req.id, tokens: req.tokens.length, outputTokens: req.output.length, cached: 0, ttft: NaN, finishAt: NaN, arrivedAt: now, transferMs: 0 };
    results.push(r);
    const settle = () => core.settle({ receiptId: d.receiptId, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" });
    if (!pd) {
      front.get(d.workerId).submit({ req, r, onPrefilled: () => req.stream && core.markPrefillDone(d.receiptId), onFinished: settle }, now);
      return;
    }
    if (!d.pd) throw new Error("PD route without a decode peer");
    // The prefill side: prompt + first token; its record carries the radix match (r.cached).
    const prefillReq = { ...req, output: req.output.slice(0, 1) };
    front.get(d.workerId).submit(
      {
        req: prefillReq,
        r,
        onPrefilled: (t) => {
          core.markPrefillDone(d.receiptId);
          const ms = ((req.tokens.length * bytesPerToken) / (transferGBps * 1e9)) * 1000;
          const start = Math.max(t, linkFree.get(d.workerId));
          linkFree.set(d.workerId, start + ms);
          r.transferMs = start + ms - t;
          schedule(start + ms, (t2) => decoders.get(d.pd.decodeWorkerId).submit({ req, r, onFinished: settle }, t2));
        },
        onFinished: () => {},
      },
      now,
    );
  });
  return { results, gpus: pd ? shape.prefill + shape.decode : shape.unified };
}
