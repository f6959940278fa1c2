// Replays a trace on a pool of DP workers (`workers` × `ranks` attention-DP ranks, each rank one GPU
// with its own radix cache on the calibrated model) under one rank policy:
//   rank-aware   kvedge's index with one target per rank (`w1#0` …, src/routing-index/rank-target.ts),
//                each fed by that rank's own KV event stream; the edge names the rank (routed_dp_rank);
//   rank0-index  a rank-blind router: its relay follows the base port only, so the index sees rank 0's
//                blocks as the worker's; it picks the worker and SGLang's DP controller picks the rank
//                round robin (--load-balance-method auto → round_robin, server_args.py @9d147fd L3086-3101);
//   round-robin  cache-blind: workers in turn, ranks round robin inside each.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { rng } from "../lib/stats.mjs";
import { EventLoop } from "../lib/event-loop.mjs";
import { CalibratedWorker } from "../lib/worker-model.mjs";
import { RelayFeed, hello } from "./relay-feed.mjs";
import { PAGE } from "./shape-sim.mjs";

export const DP_POLICIES = ["rank-aware", "rank0-index", "round-robin"];

export function simulateDp(trace, { policy, workers, ranks, capacityTokens, timing, lagMs = 10, seed = 7 }) {
  if (!DP_POLICIES.includes(policy)) throw new Error(`unknown DP policy ${policy}`);
  const random = rng(seed);
  const loop = new EventLoop();
  const schedule = loop.schedule;
  const core = policy === "round-robin" ? null : new RoutingCore({ blockSize: PAGE, random, now: () => loop.now, cost: "ttft" });
  const feed = core ? new RelayFeed(core, PAGE, lagMs, () => loop.now) : null;
  const gpu = []; // [worker][rank] → CalibratedWorker
  for (let w = 0; w < workers; w++) {
    const workerId = `w${w + 1}`;
    gpu.push([]);
    for (let k = 0; k < ranks; k++) {
      let target = null;
      if (policy === "rank-aware") {
        target = `${workerId}#${k}`;
        hello(core, { workerId, targetId: target, dpSize: ranks, dpRank: k }, PAGE);
      } else if (policy === "rank0-index" && k === 0) {
        target = workerId;
        hello(core, { workerId }, PAGE);
      }
      const sink = feed ? feed.sink(target) : () => {};
      gpu[w].push(new CalibratedWorker({ cache: new PagedRadixCache(PAGE, sink), capacityTokens, timing, pageSize: PAGE, schedule }));
    }
  }
  const rankTurn = new Array(workers).fill(0);
  let workerTurn = 0;
  const results = [];
  loop.run(trace, (req, now) => {
    let w;
    let k;
    let receipt = null;
    if (core) {
      feed.deliver();
      const d = core.route({ localHashes: localBlockHashes(req.tokens, PAGE), isl: req.tokens.length });
      receipt = d.receiptId;
      const m = /^w(\d+)(?:#(\d+))?$/.exec(d.workerId);
      w = Number(m[1]) - 1;
      k = m[2] !== undefined ? Number(m[2]) : rankTurn[w]++ % ranks;
    } else {
      w = workerTurn++ % workers;
      k = rankTurn[w]++ % ranks;
    }
    const r = { id: req.id, tokens: req.tokens.length, outputTokens: req.output.length, cached: 0, ttft: NaN, finishAt: NaN, arrivedAt: now, target: `${w}#${k}` };
    results.push(r);
    gpu[w][k].submit(
      {
        req,
        r,
        onPrefilled: () => receipt && req.stream && core.markPrefillDone(receipt),
        onFinished: () => receipt && core.settle({ receiptId: receipt, promptTokens: req.tokens.length, cachedTokens: r.cached, outcome: "ok" }),
      },
      now,
    );
  });
  return { results };
}
