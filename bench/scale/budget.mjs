// The index within a Durable Object's memory (docs/scale.md §4a): the scale trace against 1 024
// simulated workers, with each index object given a block budget smaller than the pool's cache.
// An unsharded index refuses what does not fit (counted; the affected workers are marked
// approximate); the same pool split over enough shards holds everything. Prints one JSON line per
// run and a table. `npx node bench/scale/budget.mjs [--tiny]`
import { initHashing } from "../../src/util/hash.ts";
import { TIMING_PRESETS } from "../../services/sglang-sim/timing.ts";
import { makeScaleTrace } from "./trace.mjs";
import { runScale } from "./sim.mjs";

await initHashing();
const tiny = process.argv.includes("--tiny");
const cfg = tiny ? { workers: 1024, requests: 800, tenants: 400, capacityTokens: 32_000 } : { workers: 1024, requests: 6000, tenants: 1500, capacityTokens: 32_000 };
const timing = TIMING_PRESETS["h100-8b"];
const probe = makeScaleTrace({ seed: 99, requests: 2000, tenants: cfg.tenants, meanGapMs: 1 });
const meanTokens = probe.reduce((s, r) => s + r.tokens.length, 0) / probe.length;
const meanGapMs = ((meanTokens / timing.prefillTokensPerSec) * 1000) / (0.5 * cfg.workers);
const trace = makeScaleTrace({ seed: 42, requests: cfg.requests, tenants: cfg.tenants, meanGapMs });

const run = (layout, shards, blockBudget) => {
  const r = runScale(trace, { workers: cfg.workers, layout, shards, capacityTokens: cfg.capacityTokens, timing, syncMs: 5, blockBudget });
  const bytes = r.budget.map((b) => b.bytes ?? 0);
  const blocks = r.indexSizes.reduce((a, b) => a + b, 0);
  return {
    layout,
    shards,
    blockBudget: blockBudget ?? null,
    hitRate: +(r.hitRate * 100).toFixed(2),
    blocksPerObject: r.indexSizes,
    refused: r.budget.reduce((a, b) => a + b.refused, 0),
    approximateWorkers: Math.max(...r.approximateWorkers),
    bytesPerBlock: blocks > 0 ? +(bytes.reduce((a, b) => a + b, 0) / blocks).toFixed(1) : null,
  };
};

const free = run("single", 1, undefined);
console.log(JSON.stringify(free));
// A budget of 40 % of what the unsharded pool holds: one object cannot keep the pool's cache.
const budget = Math.max(1000, Math.floor(free.blocksPerObject[0] * 0.4));
const rows = [free];
for (const [layout, shards] of [["single", 1], ["replicated", 2], ["replicated", 4]]) {
  const r = run(layout, shards, budget);
  console.log(JSON.stringify(r));
  rows.push(r);
}
console.log(`\n| layout | shards | block budget per object | blocks per object | refused blocks | workers marked approximate | hit rate |`);
console.log(`|---|---|---|---|---|---|---|`);
for (const r of rows)
  console.log(`| ${r.layout} | ${r.shards} | ${r.blockBudget ?? "none"} | ${r.blocksPerObject.join(" / ")} | ${r.refused} | ${r.approximateWorkers} | ${r.hitRate} % |`);
