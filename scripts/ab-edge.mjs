#!/usr/bin/env node
// Paired A/B of two checkouts' edges: starts the bench's edge fleet (bench/lib/edge-fleet.mjs) from
// this tree and from another checkout (`--base`, with its assets built: `npm run build:assets`
// there), sends the same bodies to both in alternating order, and prints each side's overhead
// (edge − direct to its own worker, as the edge suite measures it) and the per-pair difference.
// Run it with --base pointing at a copy of this same tree first: two identical fleets differ by
// up to ~1 ms at the 32k warm p50 on this 2-core VM (where each lands on the CPUs), which is the
// floor under any difference it reports (docs/benchmarks.md §1).
// Usage: node scripts/ab-edge.mjs --base /path/to/checkout [--tokens 32000] [--n 60] [--cold] [--stream] [--base-first]
import { parseArgs } from "node:util";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { startEdgeFleet } from "../bench/lib/edge-fleet.mjs";
import { freshText } from "../bench/lib/corpus.mjs";
import { rng, summarize } from "../bench/lib/stats.mjs";

const { values: opt } = parseArgs({
  options: {
    base: { type: "string" },
    tokens: { type: "string", default: "32000" },
    n: { type: "string", default: "60" },
    cold: { type: "boolean", default: false },
    stream: { type: "boolean", default: false },
    "base-first": { type: "boolean", default: false },
  },
});
if (!opt.base) {
  console.error("ab-edge: --base <checkout> is required");
  process.exit(2);
}
const { startEdgeFleet: startBase } = await import(pathToFileURL(join(resolve(opt.base), "bench/lib/edge-fleet.mjs")).href);
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SYSTEM = "You are a careful assistant.";
const TOKENS = Number(opt.tokens);
const N = Number(opt.n);
const limits = { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 };

const fleets = {};
const starts = opt["base-first"] ? [["base", startBase], ["this", startEdgeFleet]] : [["this", startEdgeFleet], ["base", startBase]];
try {
  for (const [name, start] of starts) fleets[name] = await start({ limits });
  const random = rng(0xab);
  const body = (messages) => JSON.stringify({ model: MODEL, messages, max_tokens: 16, stream: opt.stream });
  /** Milliseconds to the answer's end, or to its first byte when streamed. */
  const post = async (url, b, headers = {}) => {
    const t = performance.now();
    const r = await fetch(url, { method: "POST", body: b, headers: { "content-type": "application/json", ...headers } });
    const reader = r.body.getReader();
    let first = null;
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
      first ??= performance.now() - t;
    }
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return opt.stream ? first : performance.now() - t;
  };
  const sides = Object.entries(fleets).map(([name, f]) => ({
    name,
    edge: `${f.edgeUrl}/v1/chat/completions`,
    direct: `${f.workerUrl}/v1/chat/completions`,
    admin: { authorization: `Bearer ${f.adminToken}` },
    over: [],
  }));
  const history = [{ role: "system", content: SYSTEM }, { role: "user", content: freshText(TOKENS, random) }];
  for (const s of sides) {
    for (let i = 0; i < 10; i++) {
      const b = body([{ role: "user", content: freshText(2000, random) }]);
      await post(s.edge, b, s.admin);
      await post(s.direct, b);
    }
    if (!opt.cold) await post(s.edge, body(history), s.admin);
  }
  for (let i = 0; i < N; i++) {
    const b = opt.cold
      ? body([{ role: "system", content: SYSTEM }, { role: "user", content: freshText(TOKENS, random) }])
      : body([...history, { role: "assistant", content: freshText(80, random) }, { role: "user", content: freshText(40, random) }]);
    for (const s of i % 2 ? sides : [...sides].reverse()) {
      await post(s.direct, b); // the worker sees the body once first, as in the edge suite
      let e;
      let d;
      if (i % 4 < 2) {
        e = await post(s.edge, b, s.admin);
        d = await post(s.direct, b);
      } else {
        d = await post(s.direct, b);
        e = await post(s.edge, b, s.admin);
      }
      s.over.push(e - d);
    }
  }
  const [thisSide, baseSide] = ["this", "base"].map((n) => sides.find((s) => s.name === n));
  const fmt = (s) => `p50 ${s.p50.toFixed(2)} ms, mean ${s.mean.toFixed(2)} ms`;
  console.log(`${opt.cold ? "cold" : "warm"}${opt.stream ? " stream" : ""}, ${TOKENS} tokens, ${N} pairs per side (${starts[0][0]} started first)`);
  console.log(`  overhead, this tree: ${fmt(summarize(thisSide.over))}`);
  console.log(`  overhead, base:      ${fmt(summarize(baseSide.over))}`);
  console.log(`  this − base, paired: ${fmt(summarize(thisSide.over.map((x, i) => x - baseSide.over[i])))}`);
} finally {
  await Promise.all(Object.values(fleets).map((f) => f.stop()));
}
