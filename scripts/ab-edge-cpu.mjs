#!/usr/bin/env node
// Paired A/B of two checkouts' edge CPU: starts the bench's edge fleet (bench/lib/edge-fleet.mjs,
// split index) from this tree and from `--base` (a checkout with its assets built), warms both with
// the same request shape (bench/lib/perf-session.mjs requestShape: text, chat conversation, vision
// turns or agent steps), then sends them blocks of requests in alternating order and reads each edge workerd
// process's CPU per block (/proc schedstat). Prints per-side medians and the per-block difference.
// Run both orders (--base-first): the fleet started second can read lower on this 2-core VM, and an
// A/A run (--base pointing at a copy of this tree) gives the noise floor.
// Usage: node scripts/ab-edge-cpu.mjs --base <checkout> [--shape text|conversation|vision|agent] [--tokens 32000]
//        [--blocks 16] [--per-block 20] [--warm 300] [--stream] [--base-first] [--gap-ms 0]
// --gap-ms N: idle N ms after each request, as the edge bench's interleaved sends leave the edge (a
// request after an idle gap runs cold and reads ~1.5x the CPU of one sent back to back; a receipt
// then goes alone on its timer instead of riding the next request's route call).
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    base: { type: "string" },
    shape: { type: "string", default: "text" },
    tokens: { type: "string", default: "32000" },
    blocks: { type: "string", default: "16" },
    "per-block": { type: "string", default: "20" },
    warm: { type: "string", default: "300" },
    stream: { type: "boolean", default: false },
    "base-first": { type: "boolean", default: false },
    "gap-ms": { type: "string", default: "0" },
  },
});
const gapMs = Number(opt["gap-ms"]);
if (!opt.base || !(gapMs >= 0 && gapMs <= 1000) || !["text", "conversation", "vision", "agent"].includes(opt.shape)) {
  console.error("ab-edge-cpu: --base <checkout> is required; --gap-ms is 0-1000; --shape is text, conversation, vision or agent");
  process.exit(2);
}
const here = resolve(import.meta.dirname, "..");
const blocks = Number(opt.blocks);
const perBlock = Number(opt["per-block"]);

/** A tree's fleet, session and CPU modules (each side runs its own tree's bench code). */
async function load(tree) {
  const mod = (p) => import(pathToFileURL(join(tree, p)).href);
  return { fleet: await mod("bench/lib/edge-fleet.mjs"), session: await mod("bench/lib/perf-session.mjs"), cpu: await mod("bench/lib/process-cpu.mjs") };
}

const median = (a) => {
  const v = [...a].sort((x, y) => x - y);
  return v.length % 2 ? v[v.length >> 1] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const order = opt["base-first"] ? [["base", resolve(opt.base)], ["this", here]] : [["this", here], ["base", resolve(opt.base)]];
const sides = [];
try {
  for (const [name, tree] of order) {
    const m = await load(tree);
    const vision = opt.shape === "vision";
    const fleet = await m.fleet.startEdgeFleet({ limits: { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 }, splitIndex: true, ...(vision ? { media: m.session.visionMedia(), decode: true } : {}) });
    const shape = m.session.requestShape(fleet, { tokens: Number(opt.tokens), conversation: opt.shape === "conversation", vision, agent: opt.shape === "agent", stream: opt.stream, warm: Number(opt.warm), seed: 0x9f0f });
    sides.push({ name, fleet, pid: m.session.workerdPid(fleet), shape, cpu: m.cpu, ms: [] });
  }
  for (const s of sides) await s.shape.warmUp();
  for (let b = 0; b < blocks; b++) {
    for (const s of b % 2 ? [...sides].reverse() : sides) {
      const bodies = Array.from({ length: perBlock }, s.shape.next);
      const c0 = s.cpu.processCpuPreciseMs(s.pid);
      for (const body of bodies) {
        await s.shape.post(body);
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      }
      s.ms.push((s.cpu.processCpuPreciseMs(s.pid) - c0) / perBlock);
    }
  }
  const [base, mine] = [sides.find((s) => s.name === "base"), sides.find((s) => s.name === "this")];
  const diffs = base.ms.map((a, i) => mine.ms[i] - a);
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  console.log(`${opt.shape} ${opt.tokens} tokens${opt.stream ? ", streamed" : ""}${gapMs ? `, ${gapMs} ms gaps` : ""}: ${blocks} blocks x ${perBlock} requests, ${opt["base-first"] ? "base" : "this tree"} first`);
  console.log(`edge CPU ms/request: base median ${median(base.ms).toFixed(3)} mean ${mean(base.ms).toFixed(3)}; this median ${median(mine.ms).toFixed(3)} mean ${mean(mine.ms).toFixed(3)}`);
  console.log(`this - base per block: median ${median(diffs).toFixed(3)} mean ${mean(diffs).toFixed(3)}; lower in ${diffs.filter((d) => d < 0).length}/${diffs.length} blocks`);
} finally {
  for (const s of sides) await s.fleet.stop();
}
