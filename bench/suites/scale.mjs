// Suite "scale": routing decisions per second — end to end through the real edge Worker and one
// RoutingIndex Durable Object (the local fleet: the edge under Miniflare + simulated workers + relays, all on 127.0.0.1), and
// for the RoutingCore alone (in Node and inside workerd).
import { startBenchWorker } from "../lib/workerd.mjs";
import { rng, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

async function loadPhase(fleet, concurrency, durationMs, random) {
  const url = `${fleet.edgeUrl}/v1/chat/completions`;
  const lat = [];
  let ok = 0;
  let failed = 0;
  const statuses = {};
  const end = performance.now() + durationMs;
  let n = 0;
  const worker = async () => {
    while (performance.now() < end) {
      // Shared system prompt + a short unique question: realistic prefix reuse, small bodies.
      const body = JSON.stringify({
        model: fleet.model,
        messages: [
          { role: "system", content: "You are a helpful assistant for the kvedge benchmark. Keep answers short." },
          { role: "user", content: `Question ${n++} ${Math.floor(random() * 1e9).toString(36)}: what is the status?` },
        ],
        max_tokens: 1,
      });
      const t = performance.now();
      try {
        const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
        await r.arrayBuffer();
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        if (r.ok) ok++;
        else failed++;
      } catch {
        failed++;
      }
      lat.push(performance.now() - t);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const secs = (performance.now() - t0) / 1000;
  const s = summarize(lat);
  return { concurrency, seconds: secs, ok, failed, statuses, rps: ok / secs, p50: s.p50, p99: s.p99 };
}

export default {
  name: "scale",
  title: "Routing decisions per second",
  async run(ctx) {
    const random = rng(0x5ca1e);
    const out = { inProcess: null, workerd: null, fleet: [] };
    // In-process RoutingCore (Node): 16 workers, 320k blocks, a 128-block (2k-token) request.
    ctx.progress(0.02, "scale in-process core");
    const { initHashing } = await import("../../src/util/hash.ts");
    await initHashing();
    const { createIndexFixture } = await import("../lib/index-fixture.ts");
    const st = createIndexFixture(16, ctx.tiny ? 2000 : 20_000);
    const runFor = (ms) => {
      let n = 0;
      const t0 = performance.now();
      while (performance.now() - t0 < ms) {
        for (let i = 0; i < 100; i++) {
          const d = st.core.route({ localHashes: st.chains[(n + i) % st.chains.length], isl: 1024 });
          st.core.settle({ receiptId: d.receiptId, promptTokens: 1024, cachedTokens: 0, outcome: "ok" });
        }
        n += 100;
      }
      return (n / (performance.now() - t0)) * 1000;
    };
    runFor(200);
    out.inProcess = runFor(ctx.tiny ? 200 : 1000);

    ctx.progress(0.1, "scale workerd core");
    const w = await startBenchWorker();
    try {
      await w.call(`/setup?workers=16&blocks=${ctx.tiny ? 2000 : 20_000}`, { method: "POST" });
      await w.call("/route-rate?ms=200", { method: "POST" });
      const r = await w.call(`/route-rate?ms=${ctx.tiny ? 200 : 1000}`, { method: "POST" });
      out.workerd = (r.decisions / r.ms) * 1000;
    } finally {
      await w.dispose();
    }

    // The fleet takes ~20 s to start: full runs only (--quick and --tiny measure the core alone).
    if (!ctx.quick) {
      ctx.progress(0.2, "scale starting local fleet");
      const { startFleet } = await import("../../scripts/local-fleet.ts");
      const fleet = await startFleet({ workers: 2, timingPreset: "instant" });
      try {
        const dur = 10_000;
        await loadPhase(fleet, 4, 1500, random); // warm-up
        for (const [i, c] of [16, 32].entries()) {
          ctx.progress(0.3 + 0.35 * i, `scale fleet concurrency ${c}`);
          out.fleet.push(await loadPhase(fleet, c, dur, random));
        }
      } finally {
        await fleet.stop();
      }
    }
    const summary = [
      { metric: "RoutingCore.route decisions/s in Node (16 workers, 320k blocks, 64-block queries)", value: `${(out.inProcess / 1e3).toFixed(1)} k`, unit: "/s", goal: "", pass: null },
      { metric: "RoutingCore.route decisions/s inside workerd (same setup)", value: `${(out.workerd / 1e3).toFixed(1)} k`, unit: "/s", goal: "", pass: null },
      ...out.fleet.map((f) => ({
        metric: `edge + 1 index DO + 2 sim workers, concurrency ${f.concurrency}: req/s (p50 / p99 latency)`,
        value: `${f.rps.toFixed(0)} (${f.p50.toFixed(0)} / ${f.p99.toFixed(0)} ms)${f.failed ? `, ${f.failed} failed` : ""}`,
        unit: "",
        goal: "",
        pass: null,
      })),
    ];
    const plot = barChart({
      title: "Routing decisions per second",
      unit: "decisions/s",
      log: true,
      bars: [
        { label: "RoutingCore in Node", value: out.inProcess },
        { label: "RoutingCore in workerd", value: out.workerd },
        ...out.fleet.map((f) => ({ label: `full edge + DO, c=${f.concurrency}`, value: f.rps })),
      ],
    });
    return { summary, details: out, plots: [{ file: "scale.svg", svg: plot }] };
  },
};
