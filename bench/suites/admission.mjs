// Suite "admission": the pool's admission queue under overload (src/admission/). Simulated SGLang
// workers on the GPU-calibrated cost model (bench/lib/worker-model.mjs, one H200 each), each bounded
// by its KV pool as SGLang's scheduler is (a request starts only when its prompt + output fit; the
// rest wait in the worker's FIFO queue: CalibratedWorker's admission), behind a real
// RoutingCore, offered 1×, 1.5× and 2× the fleet's measured capacity for 60 s of simulated time by
// three tenants (one bursting: on 5 s at twice its mean rate, off 5 s) in three bands (priority
// 20 %, default 60 %, flex 20 %). Policies:
//   route-everything  today's routing: every request goes to a worker at once (the workers queue);
//   fifo              admission with one band and one tenant: the queue at the edge, first come first served;
//   kvedge            admission with bands (aged) and tenant fairness, at the workers' KV bound
//                     (loadFactor 1) and at twice it (loadFactor 2: requests past the KV wait in the workers' queues);
//                     and at loadFactor 1 with maxWaitMs 30 s for every band (a long wait serves late past
//                     capacity), and with flex alone waiting 8 s (what a longer flex wait costs the other bands).
// Admission runs at the shipped defaults (maxQueue 1 024; maxWaitMs 1 s in every band, the TTFT SLO:
// a request that cannot start in time is refused; agingMs 10 s) unless named.
// Per policy and load: goodput (requests per second served with TTFT ≤ the SLO; a 429 is not good),
// also per band, TTFT p50/p99 per band (served requests, queue wait included), refusals, and Jain's
// fairness index over tenants of goodput ÷ offered requests.
import { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS } from "../../services/sglang-sim/timing.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";
import { AdmissionConfigSchema } from "../../src/config/config.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { rng, quantile } from "../lib/stats.mjs";
import { Heap } from "../lib/heap.mjs";
import { CalibratedWorker } from "../lib/worker-model.mjs";

const PAGE = 16;
const TIMING = TIMING_PRESETS["h200-7b"];
const SLO_MS = 1000;
const TENANTS = [
  { name: "burst", share: 0.5, bursty: true },
  { name: "steady-1", share: 0.25, bursty: false },
  { name: "steady-2", share: 0.25, bursty: false },
];
const BANDS = [
  [0, 0.2],
  [1, 0.6],
  [2, 0.2],
];
const SIZES = {
  tiny: { workers: 2, seconds: 10, capacityTokens: 32_768, loads: [1, 2] },
  quick: { workers: 2, seconds: 30, capacityTokens: 65_536, loads: [1, 1.5, 2] },
  full: { workers: 4, seconds: 60, capacityTokens: 65_536, loads: [1, 1.5, 2] },
};
const POLICIES = [
  { name: "route-everything", admission: null },
  { name: "fifo", admission: { loadFactor: 1 }, flat: true },
  { name: "kvedge", admission: { loadFactor: 1 } },
  { name: "kvedge (loadFactor 2)", admission: { loadFactor: 2 } },
  { name: "kvedge (maxWaitMs 30 s)", admission: { loadFactor: 1, maxWaitMs: 30_000 } },
  { name: "kvedge (flex maxWaitMs 8 s)", admission: { loadFactor: 1, maxWaitMs: { flex: 8000 } } },
];

/** Prompt: the tenant's 2 048-token system prefix + 512 tokens of its own; 128 output tokens. */
function request(tenant, id, random) {
  const prefix = Array.from({ length: 2048 }, (_, i) => 1 + tenant * 100_000 + i);
  const own = Array.from({ length: 512 }, () => 1 + Math.floor(random() * 150_000));
  return { tokens: prefix.concat(own), output: Array.from({ length: 128 }, (_, i) => 7 + i) };
}

/** Arrivals over `seconds` at `rate` requests/s in all (Poisson), split by tenant share; the bursty tenant on 5 s at 2× / off 5 s (its mean is kept). */
function trace(rate, seconds, seed) {
  const random = rng(seed);
  const out = [];
  TENANTS.forEach((t, k) => {
    const mean = rate * t.share;
    let at = 0;
    for (;;) {
      const on = !t.bursty || Math.floor(at / 5000) % 2 === 0;
      const r = t.bursty ? (on ? 2 * mean : 0) : mean;
      if (r === 0) {
        at = (Math.floor(at / 5000) + 1) * 5000;
        continue;
      }
      at += (-Math.log(1 - random()) / r) * 1000;
      if (at >= seconds * 1000) break;
      const u = random();
      const band = u < BANDS[0][1] ? 0 : u < BANDS[0][1] + BANDS[1][1] ? 1 : 2;
      out.push({ at, tenant: k, band, ...request(k, out.length, random) });
    }
  });
  out.sort((a, b) => a.at - b.at);
  return out.map((r, id) => ({ ...r, id }));
}

async function simulate(reqs, { workers, capacityTokens, policy, seconds }) {
  let now = 0;
  let seq = 0;
  const events = new Heap();
  const cancelled = new Set();
  const timers = {
    set: (fn, ms) => {
      const id = seq++;
      events.push({ t: now + ms, seq: id, fn });
      return id;
    },
    clear: (h) => cancelled.add(h),
  };
  const admission = policy.admission ? AdmissionConfigSchema.parse(policy.admission) : AdmissionConfigSchema.parse({ enabled: false });
  const core = new RoutingCore({ blockSize: PAGE, random: rng(3), now: () => now, timers, admission });
  const W = [];
  for (let w = 0; w < workers; w++) {
    const id = `w${w + 1}`;
    core.hello({ type: "hello", workerId: id, url: `http://sim/${id}`, blockSize: PAGE, epoch: 1, modelName: "m", contract: null, kvEvents: false, kvCapacityTokens: capacityTokens }, id);
    W.push(new CalibratedWorker({ cache: new PagedRadixCache(PAGE, () => {}), capacityTokens, timing: TIMING, pageSize: PAGE, schedule: (t, fn) => events.push({ t, seq: seq++, fn }) }));
  }
  const results = reqs.map((q) => ({ at: q.at, tenant: q.tenant, band: q.band, ttft: NaN, refused: false }));
  const submit = (q, d) => {
    const r = results[q.id];
    const waited = now - q.at;
    const rec = { cached: 0, ttft: NaN };
    W[Number(d.workerId.slice(1)) - 1].submit(
      {
        req: q,
        r: rec,
        onPrefilled: () => {
          r.ttft = waited + rec.ttft;
          core.markPrefillDone(d.receiptId);
        },
        onFinished: () => core.settle({ receiptId: d.receiptId, promptTokens: q.tokens.length, cachedTokens: rec.cached, outcome: "ok" }),
      },
      now,
    );
  };
  for (const q of reqs)
    events.push({
      t: q.at,
      seq: seq++,
      fn: () => {
        const route = { localHashes: localBlockHashes(q.tokens, PAGE), isl: q.tokens.length };
        const ticket = { ticket: `t${q.id}`, band: policy.flat ? 1 : q.band, tenant: policy.flat ? "all" : String(q.tenant), decodeBudget: q.output.length };
        const outcome = core.admit(route, ticket);
        const handle = (o) => {
          if (o.kind === "routed") submit(q, o.decision);
          else results[q.id].refused = true;
        };
        if (outcome instanceof Promise) void outcome.then(handle);
        else handle(outcome);
      },
    });
  while (events.size) {
    const ev = events.pop();
    if (cancelled.has(ev.seq)) continue;
    now = ev.t;
    ev.fn(now);
    // Admissions resolve promises: let their handlers submit at this same simulated time.
    await Promise.resolve();
    await Promise.resolve();
  }
  return results;
}

function jain(xs) {
  const s = xs.reduce((a, b) => a + b, 0);
  const s2 = xs.reduce((a, b) => a + b * b, 0);
  return s2 === 0 ? 1 : (s * s) / (xs.length * s2);
}

function measure(results, seconds) {
  const served = results.filter((r) => !r.refused && Number.isFinite(r.ttft));
  const good = served.filter((r) => r.ttft <= SLO_MS);
  const byBand = [0, 1, 2].map((b) => {
    const t = served.filter((r) => r.band === b).map((r) => r.ttft).sort((x, y) => x - y);
    return { p50: t.length ? quantile(t, 0.5) : NaN, p99: t.length ? quantile(t, 0.99) : NaN };
  });
  const fairness = jain(TENANTS.map((_t, k) => good.filter((r) => r.tenant === k).length / Math.max(1, results.filter((r) => r.tenant === k).length)));
  const goodputByBand = [0, 1, 2].map((b) => good.filter((r) => r.band === b).length / seconds);
  return { goodput: good.length / seconds, goodputByBand, served: served.length, refused: results.filter((r) => r.refused).length, offered: results.length, byBand, jain: fairness };
}

export default {
  name: "admission",
  title: "Admission under overload: goodput, TTFT per band and tenant fairness at 1×/1.5×/2× capacity",
  async run(ctx) {
    const { initHashing } = await import("../../src/util/hash.ts");
    await initHashing();
    const size = ctx.tiny ? SIZES.tiny : ctx.quick ? SIZES.quick : SIZES.full;
    // The fleet's capacity: first tokens per second within the window when saturated (route-everything offered far more than it serves).
    ctx.progress(0, "admission: capacity");
    const probe = await simulate(trace(200 * size.workers, size.seconds, 1), { ...size, policy: POLICIES[0] });
    const capacity = probe.filter((r) => r.at + r.ttft <= size.seconds * 1000).length / size.seconds;
    const rows = [];
    let step = 0;
    for (const load of size.loads)
      for (const policy of POLICIES) {
        ctx.progress(++step / (size.loads.length * POLICIES.length + 1), `admission ${policy.name} ${load}×`);
        const reqs = trace(capacity * load, size.seconds, 7);
        const m = measure(await simulate(reqs, { ...size, policy }), size.seconds);
        rows.push({ load, policy: policy.name, ...m });
      }
    const ms = (v) => (Number.isFinite(v) ? `${Math.round(v)}` : "–");
    const summary = rows.map((r) => ({
      metric: `${r.load}× capacity, ${r.policy}: goodput at TTFT ≤ ${SLO_MS} ms (priority | default | flex); TTFT p50/p99 priority | default | flex (ms); refused; Jain`,
      value: `${r.goodput.toFixed(2)} req/s (${r.goodputByBand.map((g) => g.toFixed(2)).join(" | ")}); ${r.byBand.map((b) => `${ms(b.p50)}/${ms(b.p99)}`).join(" | ")}; ${r.refused}/${r.offered}; ${r.jain.toFixed(3)}`,
      unit: "",
      goal: "",
      pass: null,
    }));
    return { summary, details: { capacityRps: capacity, sloMs: SLO_MS, workers: size.workers, seconds: size.seconds, capacityTokens: size.capacityTokens, rows } };
  },
};
