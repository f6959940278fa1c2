#!/usr/bin/env node
// Paired A/B of the default rate limiter's cost, this tree against `--base`: each tree's edge fleet
// (bench/lib/edge-fleet.mjs, split index, `rateLimitedEdge`: a second edge Worker in the edge's
// process with rate limiting on, its RateLimiter objects in the index process) gets the same warm
// text bodies in blocks, to its edge with rate limiting off and on, sides and targets in
// alternating order. Per block and target: the edge process's and the index process's CPU per
// request (/proc schedstat). Prints, per tree, on - off (the limiter's cost) and, for "on", this -
// base per block (edge and index). Run both orders (--base-first).
// Usage: node scripts/ab-rate-limit-cpu.mjs --base <checkout> [--tokens 1000] [--blocks 16] [--per-block 20] [--warm 200] [--base-first]
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    base: { type: "string" },
    tokens: { type: "string", default: "1000" },
    blocks: { type: "string", default: "16" },
    "per-block": { type: "string", default: "20" },
    warm: { type: "string", default: "200" },
    "base-first": { type: "boolean", default: false },
  },
});
if (!opt.base) {
  console.error("ab-rate-limit-cpu: --base <checkout> is required");
  process.exit(2);
}
const here = resolve(import.meta.dirname, "..");
const blocks = Number(opt.blocks);
const perBlock = Number(opt["per-block"]);

async function load(tree) {
  const mod = (p) => import(pathToFileURL(join(tree, p)).href);
  return { fleet: await mod("bench/lib/edge-fleet.mjs"), session: await mod("bench/lib/perf-session.mjs"), cpu: await mod("bench/lib/process-cpu.mjs") };
}
const median = (a) => {
  const v = [...a].sort((x, y) => x - y);
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const f = (x) => x.toFixed(3);

const order = opt["base-first"] ? [["base", resolve(opt.base)], ["this", here]] : [["this", here], ["base", resolve(opt.base)]];
const sides = [];
try {
  for (const [name, tree] of order) {
    const m = await load(tree);
    const fleet = await m.fleet.startEdgeFleet({ splitIndex: true, rateLimitedEdge: true });
    const shape = (edgeUrl) => m.session.requestShape({ ...fleet, edgeUrl }, { tokens: Number(opt.tokens), warm: Number(opt.warm), seed: 0x5eed });
    const targets = { off: shape(fleet.edgeUrl), on: shape(fleet.limitedUrl) };
    const pids = { edge: m.session.workerdPid(fleet), index: m.session.workerdPid({ edgePid: fleet.indexPid }) };
    sides.push({ name, fleet, targets, pids, cpu: m.cpu, ms: { off: { edge: [], index: [] }, on: { edge: [], index: [] } } });
  }
  for (const s of sides) for (const t of ["off", "on"]) await s.targets[t].warmUp();
  for (let b = 0; b < blocks; b++) {
    for (const s of b % 2 ? [...sides].reverse() : sides) {
      const bodies = Array.from({ length: perBlock }, s.targets.off.next);
      for (const t of (b >> 1) % 2 ? ["on", "off"] : ["off", "on"]) {
        const c0 = { edge: s.cpu.processCpuPreciseMs(s.pids.edge), index: s.cpu.processCpuPreciseMs(s.pids.index) };
        for (const body of bodies) await s.targets[t].post(body);
        for (const p of ["edge", "index"]) s.ms[t][p].push((s.cpu.processCpuPreciseMs(s.pids[p]) - c0[p]) / perBlock);
      }
    }
  }
  console.log(`text ${opt.tokens} tokens warm: ${blocks} blocks x ${perBlock} requests per target, ${opt["base-first"] ? "base" : "this tree"} first`);
  for (const s of sides) {
    for (const p of ["edge", "index"]) {
      const d = s.ms.on[p].map((v, i) => v - s.ms.off[p][i]);
      console.log(`${s.name} ${p} CPU ms/request: off ${f(median(s.ms.off[p]))} on ${f(median(s.ms.on[p]))}; on - off per block median ${f(median(d))}`);
    }
  }
  const [base, mine] = [sides.find((s) => s.name === "base"), sides.find((s) => s.name === "this")];
  for (const p of ["edge", "index"]) {
    const d = mine.ms.on[p].map((v, i) => v - base.ms.on[p][i]);
    const dd = mine.ms.on[p].map((v, i) => v - mine.ms.off[p][i] - (base.ms.on[p][i] - base.ms.off[p][i]));
    console.log(`rate limiting on, ${p}: this - base per block median ${f(median(d))}; (on - off) this - base median ${f(median(dd))}; lower in ${d.filter((x) => x < 0).length}/${d.length} blocks`);
  }
} finally {
  for (const s of sides) await s.fleet.stop();
}
