// Layout cost: a 768-frame 4K video and a 20-image request, from probe metadata to the full
// routing token view (pipeline + pieces + expansion with pad values). Run: npx node bench/layout.bench.mjs
import { performance } from "node:perf_hooks";
import {
  QWEN_VISION_TOKEN_IDS as ID,
  buildRoutingView,
  layoutImageItem,
  layoutVideoItem,
} from "../src/layout/index.ts";
import { fixtureContract } from "../test/fixtures/models/load.ts";
import { getQwenTokenizer } from "../src/prompt/tokenizer/index.ts";

const tok = getQwenTokenizer("qwen3_vl");
const encode = (t) => tok.encode(t);

function stats(name, fn, iters) {
  for (let i = 0; i < Math.min(50, iters); i++) fn(); // warm-up (JIT)
  const t = [];
  for (let i = 0; i < iters; i++) {
    const s = performance.now();
    fn();
    t.push(performance.now() - s);
  }
  t.sort((a, b) => a - b);
  const q = (p) => t[Math.min(t.length - 1, Math.floor(p * t.length))];
  console.log(`${name.padEnd(58)} median ${q(0.5).toFixed(3)} ms  p90 ${q(0.9).toFixed(3)} ms  p99 ${q(0.99).toFixed(3)} ms  (n=${iters})`);
}

const VID = [ID.visionStart, ID.videoPad, ID.visionEnd];
const IMG = [ID.visionStart, ID.imagePad, ID.visionEnd];
const text = (n) => Array.from({ length: n }, (_, i) => 1000 + (i % 5000));

const video4k = { totalFrames: 36000, avgFps: 60, height: 2160, width: 3840 }; // 10 min @60 fps -> 768 frames
const imageHd = { width: 1920, height: 1080 };

for (const fam of ["qwen3_vl", "qwen2_5_vl"]) {
  const c = fixtureContract(fam);
  const v = layoutVideoItem(c, video4k);
  if (!v.ok) throw new Error(v.detail);
  const vTemplate = [...text(200), ...VID, ...text(50)];
  const vItems = [{ modality: "video", hash: 0x1234567890abcdefn, probe: video4k }];
  const once = buildRoutingView(c, vTemplate, vItems, encode);
  if (!once.ok) throw new Error(once.detail);
  console.log(
    `\n${fam}: 768-frame 4K video -> grid ${v.geometry.gridThw.join("x")}, ${v.geometry.padCount} pads, ` +
      `${once.tokens.length} routing tokens (template 253)`,
  );
  stats(`${fam} video: geometry + pieces (layoutVideoItem)`, () => layoutVideoItem(c, video4k), 2000);
  stats(`${fam} video: full routing view (buildRoutingView)`, () => buildRoutingView(c, vTemplate, vItems, encode), 1000);

  const iTemplate = [...text(100)];
  const iItems = [];
  for (let k = 0; k < 20; k++) {
    iTemplate.push(...IMG, ...text(20));
    iItems.push({ modality: "image", hash: BigInt(k + 1) * 0x9e3779b97f4a7c15n, probe: { width: imageHd.width + k * 8, height: imageHd.height + k * 4 } });
  }
  const img = buildRoutingView(c, iTemplate, iItems, encode);
  if (!img.ok) throw new Error(img.detail);
  console.log(`${fam}: 20 images ~1080p -> ${img.tokens.length} routing tokens`);
  stats(`${fam} 20 images: geometry + pieces (layoutImageItem x20)`, () => iItems.forEach((it) => layoutImageItem(c, it.probe)), 2000);
  stats(`${fam} 20 images: full routing view (buildRoutingView)`, () => buildRoutingView(c, iTemplate, iItems, encode), 1000);
}

// Cold timestamp tokenisation: a fresh encoder function each time defeats the per-encoder memo.
const c3 = fixtureContract("qwen3_vl");
const vTemplate = [...text(200), ...VID, ...text(50)];
const vItems = [{ modality: "video", hash: 1n, probe: video4k }];
stats("qwen3_vl video: full routing view, cold timestamp memo", () => buildRoutingView(c3, vTemplate, vItems, (t) => tok.encode(t)), 200);
