#!/usr/bin/env node
// Where the edge's time goes on one kind of request, through the real handler: starts the bench's
// edge fleet (bench/lib/edge-fleet.mjs: the bundled Worker in workerd, the real Durable Object in a
// workerd process of its own, a simulated worker) with workerd's V8 inspector open, sends warm
// multi-turn requests of the given size (--cold: every request a new conversation of that size),
// prints edge − direct, the local hop floor and each process's CPU per request, then a CPU profile
// of the edge isolate (top self-time frames). The sampler inflates JS ~2× and sees no native frames:
// scripts/perf-edge.mjs shows the runtime's share too. Usage: node scripts/profile-edge.mjs
// [--tokens 32000] [--n 60] [--stream] [--cold | --agent] [--save profile.cpuprofile] (the raw profile, for
// DevTools). --agent: agent steps instead (bench/lib/perf-session.mjs requestShape: tool calls and
// ~10000-token tool outputs up to --tokens, each request one more step).
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { startEdgeFleet } from "../bench/lib/edge-fleet.mjs";
import { nativeWorkerdPid, processCpuPreciseMs } from "../bench/lib/process-cpu.mjs";
import { selfTimes } from "../bench/lib/profile.mjs";
import { freshText } from "../bench/lib/corpus.mjs";
import { rng, summarize } from "../bench/lib/stats.mjs";
import { requestShape } from "../bench/lib/perf-session.mjs";

const { values: opt } = parseArgs({ options: { tokens: { type: "string", default: "32000" }, n: { type: "string", default: "60" }, stream: { type: "boolean", default: false }, cold: { type: "boolean", default: false }, agent: { type: "boolean", default: false }, top: { type: "string", default: "40" }, save: { type: "string" } } });
const TOKENS = Number(opt.tokens);
const N = Number(opt.n);
const INSPECTOR = 9300 + Math.floor(Math.random() * 500);
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";

async function post(url, body, headers = {}) {
  const t = performance.now();
  const r = await fetch(url, { method: "POST", body, headers: { "content-type": "application/json", ...headers } });
  const text = await r.text();
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text.slice(0, 200)}`);
  return { ms: performance.now() - t, headers: r.headers };
}

async function get(url) {
  const t = performance.now();
  const r = await fetch(url);
  await r.arrayBuffer();
  return performance.now() - t;
}

/** A CDP session to the edge's isolate in workerd. */
async function inspect(port) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const target = targets.find((t) => !/proxy|entry|RoutingIndex|RateLimiter/i.test(t.title ?? t.id)) ?? targets[0];
  const ws = new WebSocket(target.webSocketDebuggerUrl ?? `ws://127.0.0.1:${port}/${target.id}`);
  await new Promise((res, rej) => (ws.once("open", res), ws.once("error", rej)));
  let id = 0;
  const pending = new Map();
  ws.on("message", (m) => {
    const msg = JSON.parse(m.toString());
    if (msg.id && pending.has(msg.id)) (pending.get(msg.id)(msg), pending.delete(msg.id));
  });
  const send = (method, params = {}) => new Promise((res) => (pending.set(++id, res), ws.send(JSON.stringify({ id, method, params }))));
  return { send, close: () => ws.close(), targets };
}

function topSelf(profile, top) {
  const { total, frames } = selfTimes(profile, { keep: (cf) => cf.functionName !== "(idle)", fileOf: (url) => url.split("/").pop() });
  return { totalMs: total / 1000, rows: frames.slice(0, top).map(([f, us]) => `${(us / 1000).toFixed(1).padStart(8)} ms  ${((100 * us) / total).toFixed(1).padStart(5)} %  ${f}`) };
}

const fleet = await startEdgeFleet({ limits: { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 }, inspectorPort: INSPECTOR, splitIndex: true });
const pids = { edge: nativeWorkerdPid(fleet.edgePid), index: nativeWorkerdPid(fleet.indexPid), worker: fleet.workerPid };
const cpuMs = (which) => processCpuPreciseMs(pids[which]);
try {
  const random = rng(0x9f0f);
  const edge = `${fleet.edgeUrl}/v1/chat/completions`;
  const direct = `${fleet.workerUrl}/v1/chat/completions`;
  const admin = { authorization: `Bearer ${fleet.adminToken}` };
  const body = (messages) => JSON.stringify({ model: MODEL, messages, max_tokens: 16, stream: opt.stream, ...(opt.stream ? { stream_options: { include_usage: true } } : {}) });
  const history = [{ role: "system", content: "You are a careful assistant." }, { role: "user", content: freshText(TOKENS, random) }];
  for (let i = 0; i < 10; i++) await post(edge, body([{ role: "user", content: freshText(2000, random) }]));
  // As an admin, as the profiled turns go: its cache partition is theirs, so their prompt prefix hits.
  const agent = opt.agent ? requestShape(fleet, { tokens: TOKENS, agent: true, stream: opt.stream, warm: 0, seed: 0x9f0f }) : null;
  if (agent) await agent.warmUp();
  else await post(edge, body(history), admin);
  const turn = agent ? agent.next : opt.cold ? () => body([history[0], { role: "user", content: freshText(TOKENS, random) }]) : () => body([...history, { role: "assistant", content: freshText(80, random) }, { role: "user", content: freshText(40, random) }]);
  const hop = { edge: [], direct: [] };
  for (let i = 0; i < 30; i++) {
    hop.edge.push(await get(`${fleet.edgeUrl}/healthz`));
    hop.direct.push(await get(`${fleet.workerUrl}/health`));
  }
  const over = [];
  const edgeMs = [];
  const directMs = [];
  const timings = [];
  for (let i = 0; i < N; i++) {
    const b = turn();
    await post(direct, b);
    const e = await post(edge, b, admin);
    const d = await post(direct, b);
    over.push(e.ms - d.ms);
    edgeMs.push(e.ms);
    directMs.push(d.ms);
    timings.push(e.headers.get("server-timing"));
  }
  console.log(`bytes per request: ${turn().length}`);
  console.log(`hop floor p50: edge /healthz ${summarize(hop.edge).p50.toFixed(2)} ms, worker /health ${summarize(hop.direct).p50.toFixed(2)} ms`);
  console.log(`overhead (edge − direct) p50 ${summarize(over).p50.toFixed(2)} ms, mean ${summarize(over).mean.toFixed(2)} ms over ${N}`);
  console.log(`edge p50 ${summarize(edgeMs).p50.toFixed(2)} ms, direct p50 ${summarize(directMs).p50.toFixed(2)} ms`);
  const stages = {};
  for (const t of timings) for (const m of (t ?? "").matchAll(/([\w-]+);dur=([\d.]+)/g)) (stages[m[1]] ??= []).push(Number(m[2]));
  console.log(`server-timing p50: ${Object.entries(stages).map(([k, v]) => `${k} ${summarize(v).p50}`).join(", ")}`);

  // CPU per request of the edge's workerd, the index's workerd and the simulated worker, edge
  // requests only: steadier than wall time on a shared box.
  {
    const [e0, x0, s0] = [cpuMs("edge"), cpuMs("index"), cpuMs("worker")];
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await post(edge, turn(), admin);
    const wall = (performance.now() - t0) / N;
    const per = (ms) => (ms / N).toFixed(2);
    console.log(`edge requests: wall ${wall.toFixed(2)} ms/request; CPU/request: edge workerd ${per(cpuMs("edge") - e0)} ms, index workerd ${per(cpuMs("index") - x0)} ms, simulated worker ${per(cpuMs("worker") - s0)} ms`);
  }
  {
    const s0 = cpuMs("worker");
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await post(direct, turn());
    const wall = (performance.now() - t0) / N;
    console.log(`direct requests: wall ${wall.toFixed(2)} ms/request; CPU/request: simulated worker ${((cpuMs("worker") - s0) / N).toFixed(2)} ms`);
  }
  const cdp = await inspect(INSPECTOR);
  console.log(`inspector targets: ${cdp.targets.map((t) => t.title ?? t.id).join(", ")}`);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
  await cdp.send("Profiler.start");
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await post(edge, turn(), admin);
  const wall = performance.now() - t0;
  const { result } = await cdp.send("Profiler.stop");
  cdp.close();
  if (opt.save) writeFileSync(opt.save, JSON.stringify(result.profile));
  const { totalMs, rows } = topSelf(result.profile, Number(opt.top));
  console.log(`profiled ${N} edge requests: wall ${(wall / N).toFixed(2)} ms/request, isolate CPU (non-idle samples) ${(totalMs / N).toFixed(2)} ms/request`);
  for (const r of rows) console.log(r);
} finally {
  await fleet.stop();
}
