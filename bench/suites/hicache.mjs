// Suite "hicache": SGLang HiCache workers (services/sglang-sim/hicache.ts: a small device tier, a host
// tier 4× larger, write-through) under an agentic multi-turn workload whose working set is several
// times the pool's device tier. Two routers over the same event stream: device-only (every non-GPU
// event dropped, what the relay did before tiers) and tier-aware (host tier credited and priced by
// its load-back). Reported: cache hit rate (cached / prompt tokens, and the share loaded from host
// memory) and time to first token on the calibrated H200 Qwen2.5-VL-7B prefill model
// (services/sglang-sim/timing.ts "h200-7b") plus load-back at the swept host → GPU bandwidth.
// Simulated time: a request every 120 ms across the pool; each worker prefills one request at a
// time (queueing counts in TTFT) and decodes the answer at the preset's ms per token, so the routers
// see real in-flight load. Events reach the index at once.
import { rng, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

/** Qwen2.5-VL-7B (bench/calibration dims): 28 layers × 4 KV heads × 128 head dim × 2 (K, V) × 2 bytes. */
const KV_BYTES_PER_TOKEN = 28 * 4 * 128 * 2 * 2;
const PAGE = 16;
const WORKERS = 4;
const DEVICE_TOKENS = 16_384;
const HOST_RATIO = 4;
const ARRIVAL_MS = 120;

export default {
  name: "hicache",
  title: "HiCache tiers: device-only vs tier-aware routing, agentic multi-turn",
  async run(ctx) {
    const { initHashing } = await import("../../src/util/hash.ts");
    const { localBlockHashes } = await import("../../src/blocks/block-hash.ts");
    const { RoutingCore } = await import("../../src/routing-index/routing-core.ts");
    const { DEFAULT_TIER_COST } = await import("../../src/selection/tier-cost.ts");
    const { decodeKvEventBatch } = await import("../../src/engine-events/event-decode.ts");
    const { PagedRadixCache } = await import("../../services/sglang-sim/radix-cache.ts");
    const { HostTier } = await import("../../services/sglang-sim/hicache.ts");
    const { encodeEventBatch } = await import("../../services/sglang-sim/kv-wire.ts");
    const { prefillMs, resolveTiming } = await import("../../services/sglang-sim/timing.ts");
    const { TieredBlockSet } = await import("../../services/relay/tiered-block-set.ts");
    await initHashing();
    const timing = resolveTiming("h200-7b", {});

    const conversations = ctx.tiny ? 8 : ctx.quick ? 32 : 64;
    const turns = ctx.tiny ? 4 : 8;
    const bandwidths = ctx.tiny ? [37] : [4, 12, 37, 100];
    // Agent sessions: a 1 500-token system prompt and task of their own, then per turn 400 tokens of
    // tool output and 100 of the model's answer. No prompt shared between sessions: with one, the
    // TTFT cost's decode interference (0.01 ms a block) is too small to outweigh it and every session
    // piles onto the first worker that cached it (a property of the current cost, not of tiers).
    const SESSION_PROMPT = 1_500;
    const workload = () => {
      const random = rng(0x41c4c);
      const tok = () => 1_000 + Math.floor(random() * 100_000);
      const convs = Array.from({ length: conversations }, () => ({ ctx: Array.from({ length: SESSION_PROMPT }, tok), turn: 0 }));
      const steps = [];
      const active = convs.map((_, i) => i);
      while (active.length > 0) {
        const k = Math.floor(random() * active.length);
        const c = convs[active[k]];
        const toolOutput = Array.from({ length: 400 }, tok);
        const answer = Array.from({ length: 100 }, tok);
        steps.push({ conv: active[k], add: toolOutput, answer });
        if (++c.turn === turns) active.splice(k, 1);
      }
      return { convs, steps };
    };

    const runOnce = (mode, gbps) => {
      const tiers = { ...DEFAULT_TIER_COST, kvBytesPerToken: KV_BYTES_PER_TOKEN, hostLoadGBps: gbps };
      let now = 1_000_000;
      const core = new RoutingCore({ blockSize: PAGE, random: rng(7), tiers, now: () => now });
      const workers = Array.from({ length: WORKERS }, (_, i) => {
        const id = `w${i}`;
        const events = [];
        const host = new HostTier({ pageSize: PAGE, capacityTokens: HOST_RATIO * DEVICE_TOKENS, kvBytesPerToken: KV_BYTES_PER_TOKEN, loadGBps: gbps }, (e) => events.push(e));
        const cache = new PagedRadixCache(PAGE, host.observe);
        core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: PAGE, epoch: 1, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: DEVICE_TOKENS }, id);
        core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
        return { id, events, host, cache, relay: new TieredBlockSet(PAGE), seq: 0, laneFree: 0 };
      });
      const byId = new Map(workers.map((w) => [w.id, w]));
      // The worker's step's events, through SGLang's wire format and the relay, to the index.
      const publish = (w) => {
        if (w.events.length === 0) return;
        const out = w.relay.apply(decodeKvEventBatch(encodeEventBatch(0, w.events.splice(0), 0)).events);
        const events = mode === "device-only" ? out.events.filter((e) => e.t === "cleared" || e.tier === undefined) : out.events;
        core.applyEvents(w.id, { type: "events", epoch: 1, seq: ++w.seq, events });
      };
      const fit = (w) => {
        if (w.cache.totalTokens > DEVICE_TOKENS) w.cache.evict(w.cache.totalTokens - DEVICE_TOKENS);
      };
      const { convs, steps } = workload();
      const ttft = [];
      let prompt = 0;
      let cached = 0;
      let fromHost = 0;
      const inFlight = [];
      const settleUntil = (t) => {
        inFlight.sort((a, b) => a.finish - b.finish);
        while (inFlight.length > 0 && inFlight[0].finish <= t) {
          const f = inFlight.shift();
          core.settle({ receiptId: f.receiptId, promptTokens: f.promptTokens, cachedTokens: f.cachedTokens, outcome: "ok" });
        }
      };
      for (const s of steps) {
        settleUntil(now);
        const c = convs[s.conv];
        c.ctx.push(...s.add);
        const tokens = c.ctx;
        const d = core.route({ localHashes: localBlockHashes(tokens, PAGE), isl: tokens.length });
        const w = byId.get(d.workerId);
        // The worker: GPU match, host load-back of what follows (HiCache), prefill of the rest.
        const limit = tokens.length - 1;
        const gpu = w.cache.matchPrefix(tokens, null, limit).length;
        const hit = w.host.lookup(tokens, null, gpu, limit);
        const loaded = hit.hostTokens + hit.storageTokens;
        if (loaded > 0) {
          w.cache.insert(tokens.slice(0, gpu + loaded));
          fit(w);
        }
        const hitTokens = gpu + loaded;
        const start = Math.max(now, w.laneFree);
        w.laneFree = start + prefillMs(timing, tokens.length - hitTokens, hitTokens) + w.host.loadBackMs(hit);
        ttft.push(w.laneFree - now);
        inFlight.push({ receiptId: d.receiptId, promptTokens: tokens.length, cachedTokens: hitTokens, finish: w.laneFree + s.answer.length * timing.decodeMsPerToken });
        prompt += tokens.length;
        cached += hitTokens;
        fromHost += loaded;
        c.ctx.push(...s.answer);
        w.cache.insert(c.ctx);
        fit(w);
        publish(w);
        now += ARRIVAL_MS;
      }
      const t = summarize(ttft);
      return { mode, gbps, requests: steps.length, hitRate: cached / prompt, hostShare: fromHost / prompt, ttftP50Ms: t.p50, ttftP99Ms: t.p99, ttftMeanMs: t.mean };
    };

    const rows = [];
    let done = 0;
    for (const gbps of bandwidths) {
      for (const mode of ["device-only", "tier-aware"]) {
        rows.push(runOnce(mode, gbps));
        ctx.progress(++done / (2 * bandwidths.length), `${mode} @ ${gbps} GB/s`);
      }
    }
    const pct = (x) => `${(100 * x).toFixed(1)} %`;
    const summary = rows.map((r) => ({
      metric: `${r.mode}, host→GPU ${r.gbps} GB/s: hit rate (from host) · TTFT p50 / p99`,
      value: `${pct(r.hitRate)} (${pct(r.hostShare)}) · ${r.ttftP50Ms.toFixed(1)} / ${r.ttftP99Ms.toFixed(1)}`,
      unit: "ms",
      goal: "",
      pass: null,
    }));
    const plot = barChart({
      title: `HiCache, ${WORKERS} workers × ${DEVICE_TOKENS} device tokens (host ${HOST_RATIO}×): TTFT p50 by routing and host→GPU bandwidth`,
      unit: "ms",
      bars: rows.map((r) => ({ label: `${r.mode} ${r.gbps} GB/s`, value: r.ttftP50Ms })),
    });
    const workingSet = conversations * (SESSION_PROMPT + turns * 500);
    return {
      summary,
      details: { workers: WORKERS, deviceTokensPerWorker: DEVICE_TOKENS, hostRatio: HOST_RATIO, kvBytesPerToken: KV_BYTES_PER_TOKEN, conversations, turns, workingSetTokens: workingSet, workingSetOverDevice: workingSet / (WORKERS * DEVICE_TOKENS), rows },
      plots: [{ file: "hicache-ttft.svg", svg: plot }],
    };
  },
};
