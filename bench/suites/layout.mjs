// Suite "layout": media layout cost from probe metadata to the full routing token view,
// for a 768-frame 4K video and a 20-image request (the cases of bench/layout.bench.mjs, as a suite).
import { sampleFor, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

export default {
  name: "layout",
  title: "Media layout cost",
  async run(ctx) {
    const { QWEN_VISION_TOKEN_IDS: ID, buildRoutingView, layoutVideoItem } = await import("../../src/layout/index.ts");
    const { fixtureContract } = await import("../../test/fixtures/models/load.ts");
    const { getQwenTokenizer } = await import("../../src/prompt/tokenizer/index.ts");
    const tok = getQwenTokenizer("qwen3_vl");
    const encode = (t) => tok.encode(t, "");
    const text = (n) => Array.from({ length: n }, (_, i) => 1000 + (i % 5000));
    const video4k = { totalFrames: 36000, avgFps: 60, height: 2160, width: 3840 }; // 10 min @ 60 fps → 768 frames
    const ms = ctx.tiny ? 50 : ctx.quick ? 400 : 1500;
    const rows = {};
    let k = 0;
    for (const fam of ["qwen3_vl", "qwen2_5_vl"]) {
      const c = fixtureContract(fam);
      const v = layoutVideoItem(c, video4k);
      if (!v.ok) throw new Error(v.detail);
      const vTemplate = [...text(200), ID.visionStart, ID.videoPad, ID.visionEnd, ...text(50)];
      const vItems = [{ modality: "video", hash: 0x1234567890abcdefn, probe: video4k }];
      const iTemplate = [...text(100)];
      const iItems = [];
      for (let j = 0; j < 20; j++) {
        iTemplate.push(ID.visionStart, ID.imagePad, ID.visionEnd, ...text(20));
        iItems.push({ modality: "image", hash: BigInt(j + 1) * 0x9e3779b97f4a7c15n, probe: { width: 1920 + j * 8, height: 1080 + j * 4 } });
      }
      for (const [name, template, items] of [
        ["768-frame 4K video", vTemplate, vItems],
        ["20 images ~1080p", iTemplate, iItems],
      ]) {
        ctx.progress(k++ / 4, `layout ${fam} ${name}`);
        const once = buildRoutingView(c, template, items, encode);
        if (!once.ok) throw new Error(once.detail);
        sampleFor(() => buildRoutingView(c, template, items, encode), 100); // JIT
        const s = summarize(sampleFor(() => buildRoutingView(c, template, items, encode), ms, 200));
        rows[`${fam} ${name}`] = { routingTokens: once.tokens.length, p50: s.p50, p99: s.p99, n: s.n, frames: name.includes("video") ? v.geometry.gridThw[0] * 2 : undefined };
      }
    }
    const summary = Object.entries(rows).map(([name, r]) => ({
      metric: `${name} → ${r.routingTokens} routing tokens: p50 / p99`,
      value: `${r.p50.toFixed(3)} / ${r.p99.toFixed(3)}`,
      unit: "ms",
      goal: "< 1 ms",
      pass: r.p99 < 1,
    }));
    const plot = barChart({
      title: "Media layout: probe metadata → routing token view (Node)",
      unit: "ms",
      goal: { value: 1, label: "1 ms" },
      bars: Object.entries(rows).flatMap(([name, r]) => [
        { label: `${name} p50`, value: r.p50, group: "p50" },
        { label: `${name} p99`, value: r.p99, group: "p99" },
      ]),
    });
    return { summary, details: rows, plots: [{ file: "layout.svg", svg: plot }] };
  },
};
