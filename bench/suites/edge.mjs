// Suite "edge": the edge's routing work per request inside workerd (validate + prompt + tokenize +
// layout + hash + index pick), for text, image and video requests, cold and warm.
import { startBenchWorker } from "../lib/workerd.mjs";
import { freshText } from "../lib/corpus.mjs";
import { rng, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SYSTEM = "You are a careful assistant. Answer from the provided material, cite the section you used, and say so when the material does not contain the answer.";

const IMAGES = [
  { url: "https://media.example/img-0.jpg", hash: "1f2e3d4c5b6a7980", probe: { width: 1920, height: 1080 } },
  { url: "https://media.example/img-1.png", hash: "2a3b4c5d6e7f8091", probe: { width: 1280, height: 720 } },
  { url: "https://media.example/img-2.webp", hash: "3b4c5d6e7f8091a2", probe: { width: 1024, height: 1024 } },
  { url: "https://media.example/img-3.jpg", hash: "4c5d6e7f8091a2b3", probe: { width: 800, height: 1200 } },
];
// 10 min of 4K at 60 fps: SGLang samples 768 frames.
const VIDEO = { url: "https://media.example/clip-4k.mp4", hash: "5d6e7f8091a2b3c4", probe: { totalFrames: 36000, avgFps: 60, width: 3840, height: 2160 } };

const text = (t) => ({ type: "text", text: t });
const body = (messages) => JSON.stringify({ model: MODEL, messages, max_tokens: 128 });

/** The first messages of a request of each kind; `fresh` makes new text. */
function opening(kind, fresh) {
  if (kind === "text-4k") return [{ role: "system", content: SYSTEM }, { role: "user", content: fresh(4000) }];
  if (kind === "text-32k") return [{ role: "system", content: SYSTEM }, { role: "user", content: fresh(32000) }];
  if (kind === "image-4")
    return [
      { role: "system", content: SYSTEM },
      { role: "user", content: [text(fresh(300)), ...IMAGES.map((i) => ({ type: "image_url", image_url: { url: i.url } })), text(fresh(60))] },
    ];
  return [
    { role: "system", content: SYSTEM },
    { role: "user", content: [{ type: "video_url", video_url: { url: VIDEO.url } }, text(fresh(300))] },
  ];
}

/** Warm history: the opening split over several turns (text) or followed by answers (media). */
function history(kind, fresh) {
  if (kind.startsWith("text")) {
    const total = kind === "text-4k" ? 4000 : 32000;
    const turns = 6;
    const msgs = [{ role: "system", content: SYSTEM }];
    for (let i = 0; i < turns; i++) {
      msgs.push({ role: "user", content: fresh((total * 0.7) / turns) });
      if (i < turns - 1) msgs.push({ role: "assistant", content: fresh((total * 0.3) / turns) });
    }
    return msgs;
  }
  return opening(kind, fresh);
}

const KINDS = ["text-4k", "text-32k", "image-4", "video-768f"];
const GOALS = { "text-32k cold": 30, "text-32k warm": 3 };

export default {
  name: "edge",
  title: "Edge overhead inside workerd",
  async run(ctx) {
    const random = rng(0xed6e);
    const fresh = (tokens) => freshText(tokens, random);
    const n = ctx.tiny
      ? { "text-4k": 4, "text-32k": 3, "image-4": 4, "video-768f": 4 }
      : ctx.quick
      ? { "text-4k": 30, "text-32k": 15, "image-4": 30, "video-768f": 30 }
      : { "text-4k": 200, "text-32k": 120, "image-4": 200, "video-768f": 200 };
    const w = await startBenchWorker();
    try {
      const clock = await w.call("/clock");
      const setup = await w.call("/setup?workers=16&blocks=20000", { method: "POST" });
      await w.call("/media", {
        method: "POST",
        body: JSON.stringify([...IMAGES.map((i) => ({ ...i, modality: "image" })), { ...VIDEO, modality: "video" }]),
      });
      // First request of the isolate (lazy tokenizer build, JIT cold), then JIT warm-up.
      const first = await w.timed("/edge", body(opening("text-4k", fresh)));
      for (let i = 0; i < (ctx.tiny ? 2 : ctx.quick ? 10 : 30); i++) await w.timed("/edge", body(opening(KINDS[i % 4], fresh)));

      const results = {};
      const totalSteps = KINDS.length * 2;
      let step = 0;
      for (const kind of KINDS) {
        for (const temp of ["cold", "warm"]) {
          ctx.progress(step++ / totalSteps, `edge ${kind} ${temp}`);
          const bodies = [];
          if (temp === "cold") for (let i = 0; i < n[kind]; i++) bodies.push(body([...opening(kind, fresh)]));
          else {
            const h = history(kind, fresh);
            const primed = await w.timed("/prime", body(h));
            results[`${kind} prime`] = primed.res;
            for (let i = 0; i < n[kind]; i++) bodies.push(body([...h, { role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) }]));
          }
          // Batch cross-check bodies (same shape, their own fresh text), sent 10 per dispatch.
          const batchBodies = [];
          const nb = Math.max(10, Math.floor(n[kind] / 2));
          if (temp === "cold") for (let i = 0; i < nb; i++) batchBodies.push(body(opening(kind, fresh)));
          else {
            const h = history(kind, fresh);
            await w.timed("/prime", body(h));
            for (let i = 0; i < nb; i++) batchBodies.push(body([...h, { role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) }]));
          }
          const edgeMs = [];
          const noopMs = [];
          const inWorker = [];
          let sample = null;
          for (const b of bodies) {
            // Interleave the baseline (same body, read only) so both see the same noise.
            const base = await w.timed("/noop", b);
            const r = await w.timed("/edge", b);
            noopMs.push(base.ms);
            edgeMs.push(r.ms);
            inWorker.push(r.res.inWorkerMs);
            sample = r.res;
          }
          const baseP50 = summarize(noopMs).p50;
          const net = summarize(edgeMs.map((m) => Math.max(0, m - baseP50)));
          const iw = summarize(inWorker);
          let batchEdge = 0;
          let batchNoop = 0;
          for (let i = 0; i < batchBodies.length; i += 10) {
            const chunk = JSON.stringify(batchBodies.slice(i, i + 10));
            batchNoop += (await w.timed("/noop-batch", chunk)).ms;
            batchEdge += (await w.timed("/edge-batch", chunk)).ms;
          }
          results[`${kind} ${temp}`] = {
            n: bodies.length,
            // Primary: workerd's own clock around the pipeline (1 ms ticks).
            p50: iw.p50,
            p99: iw.p99,
            mean: iw.mean,
            max: iw.max,
            // Cross-checks: Node-timed dispatch minus the interleaved read-only baseline; batch mean.
            nodeNetP50: net.p50,
            nodeNetP99: net.p99,
            baselineP50: baseP50,
            batchMean: (batchEdge - batchNoop) / batchBodies.length,
            tokens: sample.tokens,
            blocks: sample.blocks,
            overlapBlocks: sample.overlap,
            exact: sample.exact,
          };
        }
      }
      const summary = [];
      for (const [k, r] of Object.entries(results)) {
        if (k.endsWith("prime")) continue;
        const goal = GOALS[k];
        summary.push({
          metric: `${k} (${r.tokens} tok) p50 / p99 [mean]`,
          value: `${r.p50} / ${r.p99} [${r.mean.toFixed(1)}]`,
          unit: "ms",
          goal: goal ? `p99 ≤ ${goal}` : "",
          pass: goal ? r.p99 <= goal : null,
        });
      }
      summary.push({ metric: "first request in a fresh isolate (4k text)", value: first.ms.toFixed(1), unit: "ms", goal: "", pass: null });
      const keys = Object.keys(results).filter((k) => !k.endsWith("prime"));
      const plot = barChart({
        title: "Edge routing work per request in workerd (mean, p99; 1 ms clock ticks)",
        unit: "ms per request",
        log: true,
        bars: keys.flatMap((k) => [
          { label: `${k} mean`, value: Math.max(0.1, results[k].mean), group: "mean" },
          { label: `${k} p99`, value: Math.max(0.1, results[k].p99), group: "p99", note: GOALS[k] ? `(goal ≤ ${GOALS[k]})` : "" },
        ]),
      });
      return {
        summary,
        details: { clock, indexedBlocks: setup.indexedBlocks, workers: 16, firstRequestMs: first.ms, cases: results, profile: await nodeProfile(ctx, fresh) },
        plots: [{ file: "edge.svg", svg: plot }],
      };
    } finally {
      await w.dispose();
    }
  },
};

/** The same pipeline in Node with a per-stage clock: where the time goes (the workerd timers are too coarse for this). */
async function nodeProfile(ctx, fresh) {
  const { initHashing } = await import("../../src/util/hash.ts");
  const { createState, runPipeline, commitBlocks, registerMedia, STAGES } = await import("../edge/pipeline.ts");
  const { fixtureContract } = await import("../../test/fixtures/models/load.ts");
  await initHashing();
  const state = createState(fixtureContract("qwen3_vl"), 16, 20_000);
  for (const i of IMAGES) registerMedia(state, i.url, { modality: "image", hash: BigInt("0x" + i.hash), probe: i.probe });
  registerMedia(state, VIDEO.url, { modality: "video", hash: BigInt("0x" + VIDEO.hash), probe: VIDEO.probe });
  for (let i = 0; i < 20; i++) runPipeline(state, body(opening(KINDS[i % 4], fresh)));
  const out = {};
  const reps = ctx.quick ? 8 : 30;
  for (const kind of KINDS) {
    for (const temp of ["cold", "warm"]) {
      const lap = new Float64Array(STAGES.length);
      const h = history(kind, fresh);
      if (temp === "warm") commitBlocks(state, runPipeline(state, body(h)));
      for (let i = 0; i < reps; i++) {
        const b = temp === "cold" ? body(opening(kind, fresh)) : body([...h, { role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) }]);
        runPipeline(state, b, () => performance.now(), lap);
      }
      out[`${kind} ${temp}`] = Object.fromEntries(STAGES.map((s, i) => [s, +(lap[i] / reps).toFixed(3)]));
    }
  }
  return out;
}
