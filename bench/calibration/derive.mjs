#!/usr/bin/env node
// Derives a simulator cost table (services/sglang-sim/calibration/<name>.json) from the raw GPU
// measurements beside this file (calibrate.py): <name>.json, plus <name>-small.json where the run was
// split in two (the H200 table: "full" eager grids and "small" CUDA-graph prefill of short chunks).
// Prefill: a full (new × cached) grid; a CUDA-graph time wins over an eager one for the same point
// (eager is launch-bound for short chunks). Points past the model's context (new + cached > context,
// which no request reaches) are filled by extending the cached axis linearly from the two rows below
// (attention grows linearly with the cached prefix at fixed new tokens) and listed as extrapolated;
// points the run skipped (its raw row says why: a time budget) are filled the same way and listed as
// unmeasured (on the H100 run the 98 304 row's measured small chunks sit 5-13 % above that line, so
// such fills understate).
// Decode: least-squares fit of step time = a + b·batch + c·(KV tokens in the batch) over every
// CUDA-graph point; the fit's worst error is kept with it.
// Vision encoder (where measured): least-squares fit of one item's forward time =
// a + b·tokens + c·tokens·sliceTokens (sliceTokens: tokens per temporal slice, the span a full-attention
// block attends over; an image is one slice), in relative error (the items span 64-16 384 tokens, and an
// absolute fit leaves the small, common images 65 % off), worst error kept; left out (visionLeftOut says
// why) when the run timed a per-window loop.
// --vision-from <other run>: the tower fit from another run (recorded as visionFrom), for a run that did not
// time the tower on a GPU with the same compute (the tower is compute/launch-bound: its 1.35 GB of weights
// read in ~0.4 ms at 3.35 TB/s against 34-843 ms measured; H100 and H200 share the GH100 die, 132 SMs, 1980 MHz).
// Run: node bench/calibration/derive.mjs h100-qwen2_5-vl-7b   (or h200-qwen2_5-vl-7b --vision-from h100-qwen2_5-vl-7b)
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const name = process.argv[2];
const visionFrom = process.argv[3] === "--vision-from" ? process.argv[4] : undefined;
if (!name || !/^[a-z0-9_.-]+$/.test(name) || (process.argv.length > 3 && !/^[a-z0-9_.-]+$/.test(visionFrom ?? "")))
  throw new Error("usage: derive.mjs <table name, e.g. h100-qwen2_5-vl-7b> [--vision-from <run name>]");
const OUT = join(HERE, `../../services/sglang-sim/calibration/${name}.json`);
const raws = [`${name}.json`, `${name}-small.json`].filter((f) => existsSync(join(HERE, f))).map((f) => JSON.parse(readFileSync(join(HERE, f), "utf8")));
if (raws.length === 0) throw new Error(`no raw measurements bench/calibration/${name}.json`);
const main = raws[0];
const context = main.method?.context ?? Infinity;

/**
 * Least squares: weights w minimising Σ (row·w − y)², or with `relative` Σ ((row·w − y) / y)²
 * (normal equations, Gaussian elimination).
 */
function leastSquares(rows, ys, relative = false) {
  const k = rows[0].length;
  const A = Array.from({ length: k }, () => new Array(k).fill(0));
  const y = new Array(k).fill(0);
  rows.forEach((r, n) => {
    const s = relative ? 1 / ys[n] ** 2 : 1;
    for (let i = 0; i < k; i++) {
      y[i] += s * r[i] * ys[n];
      for (let j = 0; j < k; j++) A[i][j] += s * r[i] * r[j];
    }
  });
  for (let i = 0; i < k; i++) for (let m = i + 1; m < k; m++) {
    const f = A[m][i] / A[i][i];
    for (let j = i; j < k; j++) A[m][j] -= f * A[i][j];
    y[m] -= f * y[i];
  }
  const w = new Array(k).fill(0);
  for (let i = k - 1; i >= 0; i--) w[i] = (y[i] - A[i].slice(i + 1).reduce((s, a, j) => s + a * w[i + 1 + j], 0)) / A[i][i];
  const worst = Math.max(...rows.map((r, n) => Math.abs(r.reduce((s, x, i) => s + x * w[i], 0) - ys[n]) / ys[n]));
  return { w, worst };
}

// Prefill grid.
const key = (n, p) => `${n}:${p}`;
const graph = new Map();
const eager = new Map();
for (const raw of raws) {
  for (const r of raw.prefill ?? []) if (r.ms !== undefined) (r.graph ? graph : eager).set(key(r.new, r.cached), r.ms);
  for (const r of raw.prefill_graph ?? []) if (r.ms !== undefined) graph.set(key(r.new, r.cached), r.ms);
}
const prefill = new Map([...eager, ...graph]);
const news = [...new Set([...prefill.keys()].map((k) => +k.split(":")[0]))].sort((a, b) => a - b);
const cached = [...new Set([...prefill.keys()].map((k) => +k.split(":")[1]))].sort((a, b) => a - b);
const skipped = new Set(raws.flatMap((r) => r.prefill ?? []).filter((r) => r.ms === undefined && r.error).map((r) => key(r.new, r.cached)));
const extrapolated = [];
const unmeasured = [];
const ms = cached.map((p) => news.map((n) => prefill.get(key(n, p))));
cached.forEach((p, j) => news.forEach((n, i) => {
  if (ms[j][i] !== undefined) return;
  const pastContext = n + p > context;
  if ((!pastContext && !skipped.has(key(n, p))) || j < 2) throw new Error(`prefill grid hole at new=${n} cached=${p}`);
  const [p0, p1] = [cached[j - 2], cached[j - 1]];
  const [a, b] = [ms[j - 2][i], ms[j - 1][i]];
  ms[j][i] = +(b + ((b - a) * (p - p1)) / (p1 - p0)).toFixed(3);
  (pastContext ? extrapolated : unmeasured).push([n, p]);
}));

// More new or cached tokens cannot take less time: a point measured below a smaller neighbour (timing
// noise, e.g. 0.02 ms on an 85 ms chunk) is raised to it, a running max along both axes in grid order
// (the least monotone table above the measurements); each raise is listed as [new, cached, ms added].
const raisedForMonotone = [];
cached.forEach((p, j) => news.forEach((n, i) => {
  const floor = Math.max(i > 0 ? ms[j][i - 1] : 0, j > 0 ? ms[j - 1][i] : 0);
  if (ms[j][i] >= floor) return;
  raisedForMonotone.push([n, p, +(floor - ms[j][i]).toFixed(4)]);
  ms[j][i] = floor;
}));

// Decode: [1, B, B·C/1000] → ms.
const dpts = raws.flatMap((r) => r.decode ?? []).filter((d) => d.ms !== undefined);
const dec = leastSquares(dpts.map((d) => [1, d.batch, (d.batch * d.context) / 1000]), dpts.map((d) => d.ms));

const gpu = main.device.gpu;
const table = {
  source: `bench/calibration (calibrate.py on one ${gpu}; derive.mjs)`,
  model: main.model,
  device: `${gpu}, driver ${main.device.nvidia_smi.split(", ")[1]}, torch ${main.device.torch}, transformers ${main.device.transformers}`,
  chunkedPrefillSize: 8192,
  prefill: { newTokens: news, cachedTokens: cached, ms, ...(extrapolated.length > 0 ? { extrapolated } : {}), ...(unmeasured.length > 0 ? { unmeasured } : {}), ...(raisedForMonotone.length > 0 ? { raisedForMonotone } : {}) },
  decode: {
    baseMs: +dec.w[0].toFixed(4),
    perRequestMs: +dec.w[1].toFixed(5),
    perThousandKvTokensMs: +dec.w[2].toFixed(5),
    worstRelativeError: +dec.worst.toFixed(3),
    points: dpts.length,
    maxContext: Math.max(...dpts.map((d) => d.context)),
  },
};
const visionRun = visionFrom ? JSON.parse(readFileSync(join(HERE, `${visionFrom}.json`), "utf8")) : main;
if (visionFrom) {
  const [a, b] = [main.device, visionRun.device];
  const clock = (d) => d.nvidia_smi.split(", ")[2];
  if (a.sm_count !== b.sm_count || clock(a) !== clock(b)) throw new Error(`--vision-from ${visionFrom}: ${b.gpu} (${b.sm_count} SMs, ${clock(b)}) is not ${a.gpu}'s compute (${a.sm_count} SMs, ${clock(a)})`);
  table.visionFrom = `bench/calibration/${visionFrom}.json: the tower timed on ${b.gpu} (${b.sm_count} SMs, ${clock(b)}, the compute of this ${a.gpu}); compute/launch-bound, so the memory bandwidth that differs does not enter`;
}
const vpts = (visionRun.vision?.items ?? []).filter((v) => v.ms !== undefined);
// A tower timed through a per-window Python loop (calibrate.py's fallbacks) is launch-bound, several
// times its compute-bound cost: charging it would favour cache-aware routing by an unmeasured amount.
const launchBound = /loop/.test(visionRun.vision?.attention ?? "");
if (vpts.length >= 3 && launchBound) table.visionLeftOut = `${vpts.length} items timed with ${visionRun.vision.attention}: launch-bound, not charged`;
else if (vpts.length >= 3) {
  const vis = leastSquares(vpts.map((v) => [1, v.tokens / 1000, (v.tokens * v.slice_tokens) / 1e6]), vpts.map((v) => v.ms), true);
  table.vision = {
    model: `${visionRun.vision.class} (${visionRun.vision.params} parameters), attention: ${visionRun.vision.attention}`,
    baseMs: +vis.w[0].toFixed(4),
    perThousandTokensMs: +vis.w[1].toFixed(4),
    perMillionTokenSliceTokensMs: +vis.w[2].toFixed(5),
    worstRelativeError: +vis.worst.toFixed(3),
    points: vpts.length,
    maxTokens: Math.max(...vpts.map((v) => v.tokens)),
  };
}
writeFileSync(OUT, JSON.stringify(table, null, 1) + "\n");
console.log(`wrote ${OUT}: prefill ${news.length}×${cached.length} (${extrapolated.length} extrapolated, ${unmeasured.length} unmeasured, ${raisedForMonotone.length} raised for monotonicity), decode ${dec.w.map((x) => x.toFixed(4)).join(", ")} (worst ${(100 * dec.worst).toFixed(1)} %)` + (table.vision ? `, vision ${table.vision.baseMs} + ${table.vision.perThousandTokensMs}/1k tok + ${table.vision.perMillionTokenSliceTokensMs}/1M tok·slice (worst ${(100 * table.vision.worstRelativeError).toFixed(1)} %)` : ""));
