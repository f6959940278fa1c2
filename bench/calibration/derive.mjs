#!/usr/bin/env node
// Derives the simulator's cost table (services/sglang-sim/calibration/h200-qwen2_5-vl-7b.json) from
// the raw GPU measurements beside this file (calibrate.py, two runs: "full" grids and "small" =
// CUDA-graph prefill of short chunks + repeats). Prefill: a full (new × cached) grid, graph-captured
// times for chunks ≤ 4096 new tokens (eager is launch-bound there), eager above (launches are noise).
// Decode: least-squares fit of step time = a + b·batch + c·(KV tokens in the batch) over every
// CUDA-graph point of both runs; the fit's worst error is kept with it.
// Run: node bench/calibration/derive.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = join(HERE, "../../services/sglang-sim/calibration/h200-qwen2_5-vl-7b.json");
const full = JSON.parse(readFileSync(join(HERE, "h200-qwen2_5-vl-7b.json"), "utf8"));
const small = JSON.parse(readFileSync(join(HERE, "h200-qwen2_5-vl-7b-small.json"), "utf8"));

const key = (n, p) => `${n}:${p}`;
const prefill = new Map();
for (const r of full.prefill) if (r.ms !== undefined && r.new > 4096) prefill.set(key(r.new, r.cached), r.ms);
for (const r of small.prefill_graph) if (r.ms !== undefined) prefill.set(key(r.new, r.cached), r.ms);
const news = [...new Set([...prefill.keys()].map((k) => +k.split(":")[0]))].sort((a, b) => a - b);
const cached = [...new Set([...prefill.keys()].map((k) => +k.split(":")[1]))].sort((a, b) => a - b);
const ms = cached.map((p) =>
  news.map((n) => {
    const v = prefill.get(key(n, p));
    if (v === undefined) throw new Error(`prefill grid hole at new=${n} cached=${p}`);
    return v;
  }),
);

// Decode: normal equations for [1, B, B·C/1000].
const pts = [...full.decode, ...small.decode].filter((d) => d.ms !== undefined).map((d) => [1, d.batch, (d.batch * d.context) / 1000, d.ms]);
const A = [[0, 0, 0], [0, 0, 0], [0, 0, 0]];
const y = [0, 0, 0];
for (const p of pts) for (let i = 0; i < 3; i++) {
  y[i] += p[i] * p[3];
  for (let j = 0; j < 3; j++) A[i][j] += p[i] * p[j];
}
// Gaussian elimination (3×3).
for (let i = 0; i < 3; i++) for (let k = i + 1; k < 3; k++) {
  const f = A[k][i] / A[i][i];
  for (let j = i; j < 3; j++) A[k][j] -= f * A[i][j];
  y[k] -= f * y[i];
}
const w = [0, 0, 0];
for (let i = 2; i >= 0; i--) w[i] = (y[i] - A[i].slice(i + 1).reduce((s, a, j) => s + a * w[i + 1 + j], 0)) / A[i][i];
const worst = Math.max(...pts.map((p) => Math.abs(p[0] * w[0] + p[1] * w[1] + p[2] * w[2] - p[3]) / p[3]));

const table = {
  source: "bench/calibration (calibrate.py on one NVIDIA H200; derive.mjs)",
  model: full.model,
  device: `${full.device.gpu}, driver ${full.device.nvidia_smi.split(", ")[1]}, torch ${full.device.torch}, transformers ${full.device.transformers}`,
  chunkedPrefillSize: 8192,
  prefill: { newTokens: news, cachedTokens: cached, ms },
  decode: { baseMs: +w[0].toFixed(4), perRequestMs: +w[1].toFixed(5), perThousandKvTokensMs: +w[2].toFixed(5), worstRelativeError: +worst.toFixed(3), points: pts.length },
};
writeFileSync(OUT, JSON.stringify(table, null, 1) + "\n");
console.log(`wrote ${OUT}: prefill ${news.length}×${cached.length}, decode ${w.map((x) => x.toFixed(4)).join(", ")} (worst ${(100 * worst).toFixed(1)} %)`);
