#!/usr/bin/env node
// Where the edge's workerd CPU goes on one kind of edge request, native frames included: starts the
// bench's edge fleet (bench/lib/edge-fleet.mjs: the bundled Worker in workerd, the real Durable Object
// in a workerd process of its own, a simulated worker and its relay) with V8's perf map on, records Linux `perf` (cpu-clock, call
// graphs) on the workerd process while N requests run, and prints
//   - the share of page faults, garbage collection, JSON.parse / JSON.stringify, text decoding and
//     encoding, the rest of the JS and the runtime outside JS (HTTP, RPC, sockets), in ms per request,
//     and what that runtime part was doing;
//   - workerd's minor page faults per request (from /proc), and the JS function each page-fault
//     sample was in (which allocation touched fresh pages);
//   - the JS functions with the most inclusive time, in ms per request.
// The V8 inspector's sampling profiler (scripts/profile-edge.mjs) sees JS frames only and inflates
// them ~2×; this one also sees what the runtime does around them. Needs `perf` (linux-tools) and a
// kernel that lets this user record (perf_event_paranoid ≤ 2 for its own processes).
// --conversation: the edge bench's chat turns (bench/lib/perf-session.mjs requestShape), as an admin;
// --vision: its vision turns (an image a user message, from the fleet's media server through the decode service);
// --stream: streamed answers; --warm: bodies sent before recording (V8 still compiles for several
// hundred requests, on threads whose CPU the process total includes).
// Usage: node scripts/perf-edge.mjs [--tokens 32000] [--n 200] [--cold] [--conversation | --vision] [--stream] [--warm 20] [--index] [--top 30]
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startEdgeFleet } from "../bench/lib/edge-fleet.mjs";
import { nativeWorkerdPid, processCpuMs, processMinorFaults } from "../bench/lib/process-cpu.mjs";
import { requestShape, requirePerf, visionMedia, workerdPid } from "../bench/lib/perf-session.mjs";

const { values: opt } = parseArgs({ options: { tokens: { type: "string", default: "32000" }, n: { type: "string", default: "200" }, cold: { type: "boolean", default: false }, index: { type: "boolean", default: false }, top: { type: "string", default: "30" }, conversation: { type: "boolean", default: false }, vision: { type: "boolean", default: false }, stream: { type: "boolean", default: false }, warm: { type: "string", default: "20" } } });
const TOKENS = Number(opt.tokens);
const N = Number(opt.n);

requirePerf("perf-edge");

/** One sample of `perf script` output: its frames, leaf first. */
function* samplesOf(text) {
  for (const block of text.split("\n\n")) {
    const lines = block.split("\n").filter((l) => l.trim() !== "");
    if (lines.length < 2) continue;
    yield lines.slice(1).map((l) => l.trim().replace(/^[0-9a-f]+\s+/, ""));
  }
}

/** What a sample was doing, checked in this order (a page fault inside JSON.parse counts as a fault). */
const CATEGORIES = [
  ["page faults", (f) => f.some((x) => x.includes("exc_page_fault"))],
  ["garbage collection", (f) => f.some((x) => /Scavenge|MarkCompact|Sweeper|ConcurrentMarking|MinorMark|Heap::CollectGarbage|MemoryReducer|IncrementalMarking/.test(x))],
  ["JSON.parse", (f) => f.some((x) => x.includes("Builtin_JsonParse"))],
  ["JSON.stringify", (f) => f.some((x) => x.includes("Builtin_JsonStringify"))],
  ["text decode / encode", (f) => f.some((x) => /TextDecoder|TextEncoder|Utf8::Encode|ucnv_/.test(x))],
  ["other JS (edge + index code, and V8 natives it calls)", (f) => f.some((x) => x.startsWith("JS:"))],
  ["runtime outside JS (HTTP, RPC, sockets, event loop)", () => true],
];

// The routing index in its own workerd process: the edge's process records only the edge's work.
// --vision: the fleet's media server serves the images and the decode service stores them, as in the edge bench.
const fleet = await startEdgeFleet({ ...(opt.vision ? { media: visionMedia(), decode: true } : {}), limits: { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 }, v8Flags: ["--perf-basic-prof"], splitIndex: true });
const dir = mkdtempSync(join(tmpdir(), "kvedge-perf-"));
try {
  // --index: record the routing index's process instead (route, settle, the relay's KV-event ingest).
  const pid = opt.index ? nativeWorkerdPid(fleet.indexPid) : workerdPid(fleet);
  const { next, post, warmUp } = requestShape(fleet, { tokens: TOKENS, cold: opt.cold, conversation: opt.conversation, vision: opt.vision, stream: opt.stream, warm: Number(opt.warm), seed: 0x9f0f });
  await warmUp();
  const bodies = Array.from({ length: N }, next);
  const data = join(dir, "perf.data");
  const rec = spawn("perf", ["record", "-e", "cpu-clock", "-F", "4000", "-g", "-p", pid, "-o", data], { stdio: ["ignore", "ignore", "pipe"] });
  await new Promise((r) => setTimeout(r, 500));
  const cpu0 = processCpuMs(pid);
  const faults0 = processMinorFaults(pid);
  for (const b of bodies) await post(b);
  const cpuPerRequest = (processCpuMs(pid) - cpu0) / N;
  const faultsPerRequest = (processMinorFaults(pid) - faults0) / N;
  rec.kill("SIGINT");
  await new Promise((r) => rec.once("exit", r));
  const script = execFileSync("perf", ["script", "-i", data, "-F", "ip,sym"], { encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "ignore"] });

  const byCategory = new Map(CATEGORIES.map(([name]) => [name, 0]));
  const inclusive = new Map();
  /** Runtime samples by the frame below the last runtime-internal one: what the runtime was doing. */
  const runtimeLeaves = new Map();
  /** Page-fault samples by the innermost JS function above the fault: which allocation touched fresh pages. */
  const faultSites = new Map();
  let total = 0;
  for (const frames of samplesOf(script)) {
    total++;
    const [name] = CATEGORIES.find(([, test]) => test(frames));
    byCategory.set(name, byCategory.get(name) + 1);
    if (name === CATEGORIES.at(-1)[0]) {
      const leaf = (frames.find((x) => !/^(\[|__|_raw|pvm_|native_|syscall|entry_|do_syscall|x64_|asm_|kj::_::|kj::Own|kj::Promise|operator)/.test(x)) ?? frames[0]).replace(/\(.*$/, "").slice(0, 110);
      runtimeLeaves.set(leaf, (runtimeLeaves.get(leaf) ?? 0) + 1);
    }
    if (name === CATEGORIES[0][0]) {
      const site = (frames.find((x) => x.startsWith("JS:")) ?? "(no JS frame: runtime)").replace(/^JS:o?[~^+*-]?'?/, "").slice(0, 110);
      faultSites.set(site, (faultSites.get(site) ?? 0) + 1);
    }
    // Each JS function once per sample (recursion counted once), named without V8's tier marks.
    const seen = new Set();
    for (const f of frames) {
      const m = /^JS:o?[~^+*-]?'?(.+?)(?::\d+)?$/.exec(f);
      if (m && !seen.has(m[1])) (seen.add(m[1]), inclusive.set(m[1], (inclusive.get(m[1]) ?? 0) + 1));
    }
  }
  const ms = (n) => ((n / total) * cpuPerRequest).toFixed(2).padStart(6);
  const pct = (n) => `${((100 * n) / total).toFixed(1).padStart(5)} %`;
  console.log(`${opt.cold ? "cold" : opt.vision ? "warm vision" : "warm"} ${TOKENS}-token requests: ${N}; ${opt.index ? "index workerd CPU" : "edge workerd CPU"} ${cpuPerRequest.toFixed(2)} ms per request (${opt.index ? "routing index object, runtime, relay ingest" : "edge isolate, runtime, its side of the index RPCs"}; ${total} samples); ${faultsPerRequest.toFixed(0)} minor page faults per request`);
  console.log("\nwhere it goes (ms per request):");
  for (const [name, n] of byCategory) console.log(`${ms(n)} ms ${pct(n)}  ${name}`);
  console.log("\nruntime, by innermost named frame (ms per request):");
  for (const [name, n] of [...runtimeLeaves].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log(`${ms(n)} ms ${pct(n)}  ${name}`);
  console.log("\npage faults, by innermost JS function (ms per request):");
  for (const [name, n] of [...faultSites].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log(`${ms(n)} ms ${pct(n)}  ${name}`);
  console.log("\nJS functions, inclusive (ms per request):");
  for (const [name, n] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, Number(opt.top))) console.log(`${ms(n)} ms ${pct(n)}  ${name}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
  await fleet.stop();
}
