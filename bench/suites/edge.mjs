// Suite "edge": what the edge adds to a chat request, through the real handler. The Worker's own
// fetch entry point (functions/index.ts, bundled as wrangler bundles it) runs in workerd with the
// real routing-index Durable Object, a real relay feeding it the worker's KV events, real media
// fetches, and proxies to a simulated SGLang worker with `instant` timing (bench/lib/edge-fleet.mjs).
// The routing index runs in a workerd process of its own (the edge reaches it by RPC, the relay
// connects to it), so each process's CPU in /proc is one side's: the edge's (isolate, runtime, its
// side of the index RPCs) per edge request, and the index's (route, settle, KV-event ingest) apart.
// Each request is sent twice in the same run, in alternating order: through the edge, and straight
// to the worker the edge picked (its OpenAI endpoint, the same body). overhead = edge − direct, per
// pair, after the worker alone has seen the body once (so the worker's share is equally warm on both
// sides). Cold = text the edge never saw; warm = a conversation whose history the edge has seen, plus
// a new answer and user turn. Streamed requests compare time to the first byte of
// the answer. `Server-Timing` from the edge (admin callers) gives the component breakdown. Beside
// them, the same body through the proxy floor (bench/edge/proxy-floor.mjs: a pass-through Worker in
// the edge's process making the same index RPCs' transport and the forward, none of kvedge's work):
// its edge-process CPU is what any Worker routing the request costs in workerd, and edge − floor per
// request is kvedge's own. The edge runs with rate limiting off; the default limiter's cost is
// measured apart, against a second edge with it on (bench/edge/rate-limit-case.mjs).
import { startEdgeFleet } from "../lib/edge-fleet.mjs";
import { replayFetch } from "../lib/replay-fetch.mjs";
import { freshText } from "../lib/corpus.mjs";
import { rng, summarize } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";
import { deflateSync, crc32 } from "node:zlib";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ffmpegToFile } from "../../test/helpers/wasm-media.ts";
import { ROOT } from "../lib/workerd.mjs";
import { nativeWorkerdPid, processAndMainThreadCpuMs, processCpuPreciseMs, waitForQuiet } from "../lib/process-cpu.mjs";
import { HISTORY_BINS, runConcurrentConversations, runConversations } from "../edge/conversations.mjs";
import { runPressuredConversations } from "../edge/pressured-conversations.mjs";
import { edgeSendCpu, measuredSends } from "../edge/turn-sends.mjs";
import { rateLimitFigures } from "../edge/rate-limit-case.mjs";
import { promptStageFigures } from "../edge/prompt-stage.mjs";
import { coldStageFigures } from "../edge/cold-stage.mjs";
import { streamLengthFigures } from "../edge/stream-length.mjs";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SYSTEM = "You are a careful assistant. Answer from the provided material, cite the section you used, and say so when the material does not contain the answer.";
const SIZES = { "1k": 1000, "8k": 8000, "32k": 32000, "100k": 100_000 };
/** Goals on the edge process's CPU p50 per request (issue #37), ms. */
const GOALS = { "text-32k warm": 2, "text-32k cold": 15, "text-100k warm": 3 };
/** 768 frames (32 s at 24 fps, 320×240, H.264 by the wasm ffmpeg): SGLang samples it at its fps. */
const VIDEO_FRAMES = 768;
/** --tiny (a smoke test): the text sizes below 32k (the larger ones take the same path) and a 1 s video (wasm encode 0.6 s of CPU; 2.1 s at 768 frames). */
const TINY_SIZES = { "1k": 1000, "8k": 8000 };
const TINY_VIDEO_FRAMES = 24;

/** A valid RGB PNG of the given size (one flat colour; the edge reads its header and hashes its bytes). */
function png(width, height, seed) {
  const chunk = (type, data) => {
    const b = Buffer.alloc(12 + data.length);
    b.writeUInt32BE(data.length, 0);
    b.write(type, 4, "latin1");
    data.copy(b, 8);
    b.writeUInt32BE(crc32(b.subarray(4, 8 + data.length)), 8 + data.length);
    return b;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const row = Buffer.alloc(1 + width * 3);
  for (let x = 0; x < width; x++) row.set([(seed * 37) & 255, (seed * 91 + x) & 255, 128], 1 + x * 3);
  const raw = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}
const IMAGE_SIZES = [
  [1920, 1080],
  [1280, 720],
  [1024, 1024],
  [800, 1200],
];

async function timedPost(url, body, stream, headers = {}) {
  const { response: r, start: t } = await replayFetch(url, { method: "POST", body, headers: { "content-type": "application/json", ...headers } });
  let first = null;
  const reader = r.body.getReader();
  const chunks = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    first ??= performance.now() - t;
    chunks.push(value);
  }
  const total = performance.now() - t;
  const text = Buffer.concat(chunks).toString("utf8");
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text.slice(0, 300)}`);
  return { total, first: first ?? total, headers: r.headers, text, stream };
}

/** One decimal, or – where a figure could not be computed (too few turns). */
const f1 = (x) => (x === null || x === undefined ? "–" : x.toFixed(1));

/** Server-Timing "name;dur=x" pairs → { name: x }. */
function serverTiming(h) {
  const out = {};
  for (const part of (h.get("server-timing") ?? "").split(",")) {
    const m = /^\s*([\w-]+)\s*;\s*dur=([\d.]+)/.exec(part);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Applies "k=n,..." from environment variable `name` to `shape` (perKind counts and the keys in `keys`). */
function overrideShape(shape, name, keys) {
  for (const part of (process.env[name] ?? "").split(",").filter(Boolean)) {
    const [k, v] = part.split("=");
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`${name}: ${part}`);
    if (k in keys) shape[keys[k]] = n;
    else if (k in shape.perKind) shape.perKind[k] = n;
    else throw new Error(`${name}: unknown ${k}`);
  }
  return shape;
}

/**
 * How many conversations of each kind, to what history, over how many runs. KVEDGE_BENCH_EDGE_CONVERSATIONS
 * (e.g. "chat=40,agent=0,vision=0,target=40000,runs=1,inflight=4") overrides it; inflight = edge
 * requests at a time in the concurrent phase (0: none). The default fits the isolate's caches: its
 * later turns find their history (the warm turn the goals are set for).
 */
function conversationShape(ctx) {
  const shape = ctx.tiny ? { runs: 1, perKind: { chat: 1, agent: 1, vision: 1 }, targetTokens: 8_000, inFlight: 2 } : ctx.quick ? { runs: 2, perKind: { chat: 2, agent: 1, vision: 1 }, targetTokens: 100_000, inFlight: 4 } : { runs: 3, perKind: { chat: 6, agent: 3, vision: 3 }, targetTokens: 100_000, inFlight: 4 };
  return overrideShape(shape, "KVEDGE_BENCH_EDGE_CONVERSATIONS", { runs: "runs", inflight: "inFlight", target: "targetTokens" });
}

/**
 * The budget-pressured pass (bench/edge/pressured-conversations.mjs): enough conversations live at
 * once that their state outgrows the caches (the default's ~2.4 M history tokens at the end against
 * the prompt prefix's 1 M and the turn chain's 16 MiB; ~600 turns, under a minute on this host).
 * KVEDGE_BENCH_EDGE_PRESSURE (e.g. "chat=20,target=100000") overrides it; all counts 0: no pass.
 * At --tiny it only runs the code (its state fits).
 */
function pressureShape(ctx) {
  const shape = ctx.tiny ? { perKind: { chat: 2, agent: 1, vision: 1 }, targetTokens: 8_000 } : ctx.quick ? { perKind: { chat: 6, agent: 2, vision: 2 }, targetTokens: 100_000 } : { perKind: { chat: 14, agent: 6, vision: 4 }, targetTokens: 100_000 };
  return { ...overrideShape(shape, "KVEDGE_BENCH_EDGE_PRESSURE", { target: "targetTokens" }), seed: 0x9e55 };
}

export default {
  name: "edge",
  title: "Edge overhead through the real handler (edge − direct, same run)",
  async run(ctx) {
    const random = rng(0xed6e);
    const fresh = (tokens) => freshText(tokens, random);
    const media = {};
    IMAGE_SIZES.forEach(([w, h], i) => (media[`/img-${i}.png`] = png(w, h, i + 1)));
    const videoFrames = ctx.tiny ? TINY_VIDEO_FRAMES : VIDEO_FRAMES;
    const video = `video-${videoFrames}`;
    ctx.progress(0, `edge: encoding a ${videoFrames}-frame video (wasm ffmpeg)`);
    mkdirSync(join(ROOT, "bench/results/tmp"), { recursive: true });
    media[`/${video}.mp4`] = await ffmpegToFile(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=24", "-frames:v", String(videoFrames), "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"], join(ROOT, `bench/results/tmp/${video}.mp4`));
    // 100k-token prompts exceed the default per-message and total character limits' comfort zone: raise them for the bench.
    // The decode service is the media store: videos reach the worker through it (signed URLs).
    // proxyFloor: a pass-through Worker in the edge's process (bench/edge/proxy-floor.mjs), each
    // request's CPU floor: the index RPCs' transport and the forward, none of kvedge's work.
    // rateLimitedEdge: the same edge with production's default rate limiting on, in the same process
    // (bench/edge/rate-limit-case.mjs).
    ctx.progress(0, "edge: starting the fleet");
    const fleet = await startEdgeFleet({ media, decode: true, splitIndex: true, proxyFloor: true, rateLimitedEdge: true, limits: { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 } });
    const edgePid = nativeWorkerdPid(fleet.edgePid);
    const indexPid = nativeWorkerdPid(fleet.indexPid);
    // The edge process's CPU (every thread: the goal measure) and its main thread's alone (the
    // isolate and its event loop, without V8's background compile and GC thread; process-cpu.mjs).
    const cpu = () => {
      const e = processAndMainThreadCpuMs(edgePid);
      return { edge: e.process, edgeIsolate: e.mainThread, index: processCpuPreciseMs(indexPid) };
    };
    // Before each case: the fleet idle, so a case's CPU is its own (the relay's KV events of 100k-token
    // prefills take the index tens of ms a request to ingest; a backlog would land in the next case).
    const quiet = () => waitForQuiet([edgePid, indexPid, fleet.relayPid, fleet.workerPid]);
    const edge = `${fleet.edgeUrl}/v1/chat/completions`;
    const direct = `${fleet.workerUrl}/v1/chat/completions`;
    const floor = `${fleet.floorUrl}/v1/chat/completions`;
    const limited = `${fleet.limitedUrl}/v1/chat/completions`;
    const admin = { authorization: `Bearer ${fleet.adminToken}` };
    // The cases with a goal (text-32k) get twice the pairs: a p50 over 60 moved by ±2 ms between runs.
    const reps = (size, kind) => (ctx.tiny ? 2 : ctx.quick ? (size >= 100_000 ? 4 : 8) : size >= 100_000 ? 20 : kind === "text-32k" ? 120 : 60);
    const body = (messages, stream) => JSON.stringify({ model: MODEL, messages, max_tokens: 16, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
    const imageParts = () => IMAGE_SIZES.map((_, i) => ({ type: "image_url", image_url: { url: `${fleet.mediaUrl}/img-${i}.png` } }));
    const videoPart = () => ({ type: "video_url", video_url: { url: `${fleet.mediaUrl}/${video}.mp4` } });
    const mediaContent = (kind, text) => (kind === "image-4" ? [{ type: "text", text }, ...imageParts()] : kind === video ? [{ type: "text", text }, videoPart()] : text);

    // The first chat request of each side, the worker's own first: its cold start (tokenizer
    // tables, JIT) is the simulator's, not the edge's, and would otherwise land in the edge's.
    const workerFirst = await timedPost(direct, body([{ role: "user", content: fresh(1000) }], false));
    // Then the edge's first chat request: its isolate has served only health and admin requests
    // (the fleet's start-up), so this is the chat path's first use (tokenizer tables, template, JIT).
    const edgeFirst = await timedPost(edge, body([{ role: "user", content: fresh(1000) }], false), false, admin);
    const firstMs = edgeFirst.total;
    const firstStages = serverTiming(edgeFirst.headers);
    for (let i = 0; i < (ctx.tiny ? 2 : 10); i++) {
      const b = body([{ role: "system", content: SYSTEM }, { role: "user", content: fresh(2000) }], i % 2 === 1);
      await timedPost(edge, b, i % 2 === 1);
      await timedPost(limited, b, i % 2 === 1);
      await timedPost(floor, b, i % 2 === 1);
      await timedPost(direct, b, i % 2 === 1);
    }

    // KVEDGE_BENCH_EDGE_CASES=<regex>: only the matching cases (for profiling one case; the complete run takes all).
    const only = process.env.KVEDGE_BENCH_EDGE_CASES ? new RegExp(process.env.KVEDGE_BENCH_EDGE_CASES) : null;
    // The default rate limit's edge-side cost (bench/edge/rate-limit-case.mjs), first: the two edge
    // isolates have then served the same requests (a fuller isolate's GC would bias the pair).
    // KVEDGE_BENCH_EDGE_CASES selects it by "rate-limit".
    let rateLimit = null;
    if (!only || only.test("rate-limit")) {
      ctx.progress(0, "edge rate-limit: rate limiting off vs on");
      await quiet();
      const urls = { off: edge, on: limited, direct };
      rateLimit = await rateLimitFigures(
        { post: (t, b, stream) => timedPost(urls[t], b, stream, t === "direct" ? {} : admin), body, fresh, system: SYSTEM, cpu, pids: [edgePid, indexPid] },
        ctx.tiny ? { reps: 2, turnReps: 2, turnHistoryTokens: 8000 } : ctx.quick ? { reps: 16, turnReps: 8, turnHistoryTokens: 32_000 } : { reps: 200, turnReps: 150, turnHistoryTokens: 32_000 },
      );
    }

    // The floor of the extra local hop: a request the edge answers itself against the worker's own.
    // Its CPU: the edge process's per /healthz (HTTP in and out, the Worker's dispatch; no index call).
    const hop = { edge: [], worker: [] };
    const hopCpu0 = cpu().edge;
    for (let i = 0; i < (ctx.tiny ? 2 : 40); i++) {
      for (const [side, url] of [["edge", `${fleet.edgeUrl}/healthz`], ["worker", `${fleet.workerUrl}/health`]]) {
        const t = performance.now();
        await (await fetch(url)).arrayBuffer();
        hop[side].push(performance.now() - t);
      }
    }
    const healthzEdgeCpuMean = (cpu().edge - hopCpu0) / hop.edge.length;
    // The proxy floor's two index RPCs apart: a warm 1k body through it with them, with the fetch
    // alone (?rpc=0), and with a rate-limit take before them (?rl=1), in turn.
    const floorSplit = { withRpc: [], fetchOnly: [], withTake: [] };
    const floorUrls = { withRpc: floor, fetchOnly: `${floor}?rpc=0`, withTake: `${floor}?rl=1` };
    const floorOrders = [["withRpc", "fetchOnly", "withTake"], ["fetchOnly", "withTake", "withRpc"], ["withTake", "withRpc", "fetchOnly"]];
    const floorBody = body([{ role: "user", content: fresh(1000) }], false);
    await timedPost(direct, floorBody, false);
    for (let i = 0; i < (ctx.tiny ? 3 : 42); i++) {
      for (const side of floorOrders[i % 3]) {
        const sent = await edgeSendCpu(() => timedPost(floorUrls[side], floorBody, false), cpu, [edgePid, indexPid]);
        floorSplit[side].push(sent.process);
      }
    }
    const floorRpc = { withRpcCpuP50: summarize(floorSplit.withRpc).p50, fetchOnlyCpuP50: summarize(floorSplit.fetchOnly).p50, withRateLimitTakeCpuP50: summarize(floorSplit.withTake).p50 };

    const cases = [];
    for (const [label, size] of Object.entries(ctx.tiny ? TINY_SIZES : SIZES)) for (const temp of ["cold", "warm"]) for (const stream of [false, true]) cases.push({ kind: `text-${label}`, size, temp, stream });
    for (const temp of ["cold", "warm"]) for (const stream of [false, true]) cases.push({ kind: "image-4", size: 300, temp, stream });
    // The video's metadata is cached (the store has its bytes and probe from the warm-up below), as
    // for every repeat of a video; "cold" = new text around it.
    for (const temp of ["cold", "warm"]) for (const stream of [false, true]) cases.push({ kind: video, size: 300, temp, stream });
    await timedPost(edge, body([{ role: "user", content: mediaContent(video, "Describe the clip.") }], false), false);

    if (only) cases.splice(0, cases.length, ...cases.filter((c) => only.test(`${c.kind} ${c.temp}${c.stream ? " stream" : ""}`)));
    const results = {};
    let step = 0;
    for (const c of cases) {
      const name = `${c.kind} ${c.temp}${c.stream ? " stream" : ""}`;
      ctx.progress(step++ / cases.length, `edge ${name}`);
      const n = reps(c.size, c.kind);
      const opening = () => [
        { role: "system", content: SYSTEM },
        { role: "user", content: mediaContent(c.kind, fresh(c.size)) },
      ];
      // Warm: a conversation the edge has seen (sent once through it); each measured request is that
      // history plus a new answer and user turn (fresh text), so the size stays that of the case.
      const history = c.temp === "warm" ? opening() : null;
      if (history) await timedPost(edge, body(history, false), false);
      const drainMs = await quiet();
      const over = [];
      const edgeMs = [];
      const directMs = [];
      const timing = [];
      const edgeCpu = [];
      const edgeIsolateCpu = [];
      const floorCpu = [];
      const floorIsolateCpu = [];
      const ownCpu = [];
      const floorOver = [];
      const indexCpu = [];
      let tokens = 0;
      let overlap = null;
      for (let i = 0; i < n; i++) {
        let messages;
        if (history) messages = [...history, { role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) }];
        else messages = opening();
        const b = body(messages, c.stream);
        // The worker sees the body once first (unmeasured): the measured sends then find its
        // tokenizer and KV caches equally warm, so the difference is the edge's own work. The edge
        // has not seen the new text (cold: none of it; warm: the new turn). Edge, floor and direct
        // take turns in every order (bench/edge/turn-sends.mjs).
        const urls = { edge, floor, direct };
        const m = await measuredSends({ i, send: (t) => timedPost(urls[t], b, c.stream, t === "edge" ? admin : {}), cpu, pids: [edgePid, indexPid] });
        const { edge: e, direct: d } = m;
        edgeCpu.push(m.edgeCpu);
        edgeIsolateCpu.push(m.edgeIsolateCpu);
        floorCpu.push(m.floorCpu);
        floorIsolateCpu.push(m.floorIsolateCpu);
        ownCpu.push(m.edgeCpu - m.floorCpu);
        indexCpu.push(m.indexCpu);
        const pick = (r) => (c.stream ? r.first : r.total);
        edgeMs.push(pick(e));
        directMs.push(pick(d));
        over.push(pick(e) - pick(d));
        floorOver.push(pick(m.floor) - pick(d));
        timing.push(serverTiming(e.headers));
        overlap = Number(e.headers.get("x-kvedge-overlap-blocks"));
        const total = Number(e.headers.get("x-kvedge-total-blocks"));
        tokens = total * 16;
        if (!c.stream && i === 0) {
          const u = JSON.parse(d.text).usage;
          tokens = u?.prompt_tokens ?? tokens;
        }
      }
      const o = summarize(over);
      const comp = {};
      for (const k of new Set(timing.flatMap((t) => Object.keys(t)))) comp[k] = summarize(timing.map((t) => t[k] ?? 0)).p50;
      results[name] = {
        n,
        promptTokens: tokens,
        overlapBlocks: overlap,
        overheadP50: o.p50,
        overheadP99: o.p99,
        overheadMean: o.mean,
        edgeP50: summarize(edgeMs).p50,
        edgeCpuP50: summarize(edgeCpu).p50,
        edgeCpuP99: summarize(edgeCpu).p99,
        edgeIsolateCpuP50: summarize(edgeIsolateCpu).p50,
        edgeIsolateCpuP99: summarize(edgeIsolateCpu).p99,
        floorCpuP50: summarize(floorCpu).p50,
        floorIsolateCpuP50: summarize(floorIsolateCpu).p50,
        ownCpuP50: summarize(ownCpu).p50,
        floorOverheadP50: summarize(floorOver).p50,
        indexCpuMean: summarize(indexCpu).mean,
        drainMs,
        directP50: summarize(directMs).p50,
        serverTimingP50: comp,
      };
    }

    // Growing conversations, many per isolate (bench/edge/conversations.mjs); KVEDGE_BENCH_EDGE_CASES
    // selects them by the word "conversations".
    let conversations = null;
    if (!only || only.test("conversations")) {
      ctx.progress(0.9, "edge conversations");
      const io = { edge, direct, floor, admin, body: (messages) => body(messages, false), fresh, image: (i) => imageParts()[i % IMAGE_SIZES.length], timedPost, edgePid: fleet.edgePid, indexPid: fleet.indexPid, edgeCaches: () => fleet.admin("/admin/edge-caches") };
      const shape = conversationShape(ctx);
      await quiet();
      conversations = await runConversations(ctx, io, shape);
      if (shape.inFlight > 0) conversations.concurrent = await runConcurrentConversations(ctx, io, shape, shape.inFlight);
      // Last: it leaves the caches full of its conversations' state.
      const pressure = pressureShape(ctx);
      if (Object.values(pressure.perKind).some((n) => n > 0)) {
        await quiet();
        conversations.pressured = await runPressuredConversations(ctx, io, pressure);
      }
    }

    // The same per-turn work in this process, stage by stage (workerd has no clock inside a request).
    ctx.progress(0.93, "edge: per-turn stages in process");
    const stages = await promptStageFigures({ sizes: ctx.tiny ? [8000] : [32_000, 100_000], turns: ctx.tiny ? 3 : ctx.quick ? 20 : 60, fresh });
    const cold = await coldStageFigures({ tokens: ctx.tiny ? 8000 : 32_000, n: ctx.tiny ? 3 : ctx.quick ? 20 : 60, fresh });

    const fmt = (x) => x.toFixed(1);
    const summary = Object.entries(results).map(([k, r]) => {
      const goalKey = k.replace(/ stream$/, "");
      const goal = !k.endsWith("stream") ? GOALS[goalKey] : undefined;
      return {
        metric: `${k} (${r.promptTokens} tok): overhead p50 / p99 [edge, direct p50] {edge-process CPU p50 / p99; isolate-thread CPU p50 / p99; index-process CPU mean} «proxy floor's edge-process CPU p50 (isolate thread p50); kvedge's own: edge − floor per request, p50»`,
        value: `${fmt(r.overheadP50)} / ${fmt(r.overheadP99)} [${fmt(r.edgeP50)}, ${fmt(r.directP50)}] {${r.edgeCpuP50.toFixed(2)} / ${r.edgeCpuP99.toFixed(2)}; ${r.edgeIsolateCpuP50.toFixed(2)} / ${r.edgeIsolateCpuP99.toFixed(2)}; ${r.indexCpuMean.toFixed(2)}} «${r.floorCpuP50.toFixed(2)} (${r.floorIsolateCpuP50.toFixed(2)}); ${r.ownCpuP50.toFixed(2)}»`,
        unit: "ms",
        goal: goal ? `edge CPU p50 ≤ ${goal}` : "",
        pass: goal ? r.edgeCpuP50 <= goal : null,
      };
    });
    if (conversations) {
      const convGoals = { chat: { "24–40k (32k)": 2, "80–120k (100k)": 3 }, agent: { "24–40k (32k)": 2, "80–120k (100k)": 3 }, vision: Object.fromEntries(HISTORY_BINS.map(([b]) => [b, 3])) };
      for (const [kind, k] of Object.entries(conversations.kinds)) {
        for (const [bin, r] of Object.entries(k.bins)) {
          const goal = convGoals[kind]?.[bin];
          const a = r.all;
          const allTurns = `all ${a.n} turns (${(100 * a.hitRate).toFixed(0)} % turn-chain hits): ${a.edgeCpuP50.toFixed(2)} / ${a.edgeCpuP99.toFixed(2)}`;
          summary.push({
            metric: `conversations ${kind}, turns at ${bin} history: warm (turn-chain hit, n=${r.n}) edge-process CPU p50 / p99 (isolate-thread CPU p50 / p99) [index-process CPU mean] {wall overhead p50 / p99} «proxy floor's edge-process CPU p50 (isolate thread p50); kvedge's own: edge − floor per turn, p50»; all turns' edge CPU p50 / p99`,
            value: r.n === 0 ? `– ; ${allTurns}` : `${r.edgeCpuP50.toFixed(2)} / ${r.edgeCpuP99.toFixed(2)} (${r.edgeIsolateCpuP50.toFixed(2)} / ${r.edgeIsolateCpuP99.toFixed(2)}) [${r.indexCpuMean.toFixed(2)}] {${fmt(r.overheadP50)} / ${fmt(r.overheadP99)}} «${r.floorCpuP50.toFixed(2)} (${r.floorIsolateCpuP50.toFixed(2)}); ${r.ownCpuP50.toFixed(2)}»; ${allTurns}`,
            unit: "ms",
            goal: goal && r.n > 0 ? `edge CPU p50 ≤ ${goal}` : "",
            pass: goal && r.n > 0 ? r.edgeCpuP50 <= goal : null,
          });
        }
        const runs = conversations.perRun[kind];
        if (runs.length > 0) {
          // Per run, then the range over the runs: "a, b, c (min–max)".
          const perRun = (bin, key) => {
            const xs = runs.map((r) => r[bin][key]);
            const known = xs.filter((x) => x !== null);
            return `${xs.map((x) => (x === null ? "–" : x.toFixed(2))).join(", ")}${known.length ? ` (${Math.min(...known).toFixed(2)}–${Math.max(...known).toFixed(2)})` : ""}`;
          };
          const n = (bin) => runs.map((r) => r[bin].n).join(", ");
          summary.push({ metric: `conversations ${kind}: warm turns' edge-process CPU per run (${runs.length} runs; min–max): at 32k p50; p99 [n per run] | at 100k p50; p99 [n per run]`, value: `${perRun("at32k", "edgeCpuP50")}; ${perRun("at32k", "edgeCpuP99")} [${n("at32k")}] | ${perRun("at100k", "edgeCpuP50")}; ${perRun("at100k", "edgeCpuP99")} [${n("at100k")}]`, unit: "ms", goal: "", pass: null });
        }
        summary.push({ metric: `conversations ${kind}: turns whose history the turn chain supplied (of ${k.turns} turns, first turns excluded)`, value: k.reuseRate === null ? "–" : `${(100 * k.reuseRate).toFixed(0)} %`, unit: "", goal: "", pass: null });
        if (k.edgeCpuGrowthTheilSenUsPer1kTokens !== null) summary.push({ metric: `conversations ${kind}: warm edge-CPU growth (Theil–Sen over history tokens; least squares) [wall overhead growth, least squares] «proxy floor's CPU growth; kvedge's own (edge − floor), Theil–Sen»`, value: `${f1(k.edgeCpuGrowthTheilSenUsPer1kTokens)}; ${f1(k.edgeCpuGrowthUsPer1kTokens)} [${f1(k.growthUsPer1kTokens)}] «${f1(k.floorCpuGrowthTheilSenUsPer1kTokens)}; ${f1(k.ownCpuGrowthTheilSenUsPer1kTokens)}»`, unit: "µs per 1k tokens", goal: "≤ 15", pass: k.edgeCpuGrowthTheilSenUsPer1kTokens <= 15 });
      }
      const pct = (x) => (x === null ? "–" : `${(100 * x).toFixed(0)} %`);
      const cc = conversations.concurrent;
      if (cc)
        summary.push({
          metric: `conversations, ${cc.inFlight} edge requests in flight (${cc.requests} requests, edge only): edge-process CPU per request [one at a time: mean over all turns] / index-process CPU per request / requests per s / edge latency p50 / p99 / turn-chain hits`,
          value: `${cc.edgeCpuPerRequest.toFixed(2)} [${conversations.edgeCpuMeanPerRequest.toFixed(2)}] / ${cc.indexCpuPerRequest === null ? "–" : cc.indexCpuPerRequest.toFixed(2)} / ${cc.requestsPerSecond.toFixed(1)} / ${fmt(cc.latencyP50)} / ${fmt(cc.latencyP99)} / ${pct(cc.turnChainHitRate)}`,
          unit: "ms",
          goal: "",
          pass: null,
        });
      const mib = (b) => `${+(b / 2 ** 20).toFixed(1)} MiB`;
      if (conversations.caches.length > 0)
        summary.push({
          metric: `conversations (all-hits pass: its state fits the caches), per run, hit rates: turn chain lookups; prompt-prefix lookups; prompt-prefix tokens supplied ÷ prompt tokens`,
          value: conversations.caches.map((c) => `${pct(c.turnChainHitRate)}; ${pct(c.promptPrefixHitRate)}; ${pct(c.promptPrefixTokenHitRate)}`).join(" | "),
          unit: "",
          goal: "",
          pass: null,
        });
      const p = conversations.pressured;
      // Every byte budget of the isolate's caches (src/edge/cache-budgets.ts), the prompt prefix's token budget beside its bytes.
      const budgets = p ?? (conversations.caches[0] && { budgets: conversations.caches[0].budget, promptPrefixMaxTokens: conversations.caches[0].promptPrefixMaxTokens });
      if (budgets)
        summary.push({
          metric: "edge caches' budgets per isolate (estimated bytes; the prompt prefix also in tokens)",
          value: Object.entries(budgets.budgets).map(([name, b]) => `${name} ${mib(b.maxBytes)}${name === "prompt_prefix" ? ` / ${budgets.promptPrefixMaxTokens} tokens` : ""}`).join("; "),
          unit: "",
          goal: "",
          pass: null,
        });
      if (p) {
        const live = Object.entries(p.perKind).filter(([, n]) => n > 0).map(([k, n]) => `${n} ${k}`).join(", ");
        const cpuOf = (x) => (x.n === 0 ? "–" : `${x.edgeCpuP50.toFixed(2)} / ${x.edgeCpuP99.toFixed(2)} / ${x.edgeCpuMean.toFixed(2)}`);
        for (const [kind, k] of Object.entries(p.kinds)) {
          const allHits = conversations.kinds[kind]?.bins ?? {};
          const bin = (name) => {
            const b = k.bins[name];
            const warm = allHits[name];
            return `${name}: ${b.n === 0 ? "–" : `${cpuOf(b)} (n=${b.n}, ${pct(b.hitRate)} hits)`} [all-hits pass ${warm?.n ? `${warm.edgeCpuP50.toFixed(2)} / ${warm.edgeCpuP99.toFixed(2)}` : "–"}]`;
          };
          summary.push({
            metric: `conversations ${kind}, budget-pressured pass (${live} conversations live in one isolate, turns in random order, to ${p.targetTokens} tokens, ${p.liveHistoryTokensAtEnd} history tokens live at the end; isolate affinity assumed: all turns of a conversation reach this isolate), ${k.all.n} later turns: hit rates turn chain; prompt-prefix lookups; prompt-prefix tokens (supplied ÷ the worker's prompt tokens, media pads included); media views — edge-process CPU p50 / p99 / mean over all of them, hits and misses (isolate thread p50 / p99) {edge wall p50 / p99} «turn-chain hits alone; misses alone» — per goal bin, blended p50 / p99 / mean [the all-hits pass's warm turns, p50 / p99]`,
            value: `${pct(k.turnChainHitRate)}; ${pct(k.promptPrefixHitRate)}; ${pct(k.promptPrefixTokenHitRate)}; ${pct(k.viewHashHitRate)} — ${cpuOf(k.all)} (${k.all.n ? `${k.all.edgeIsolateCpuP50.toFixed(2)} / ${k.all.edgeIsolateCpuP99.toFixed(2)}` : "–"}) {${k.all.n ? `${fmt(k.all.wallP50)} / ${fmt(k.all.wallP99)}` : "–"}} «${cpuOf(k.hits)} (n=${k.hits.n}); ${cpuOf(k.misses)} (n=${k.misses.n})» — ${Object.keys(k.bins).map(bin).join("; ")}`,
            unit: "ms",
            goal: "",
            pass: null,
          });
        }
      }
    }
    for (const [size, st] of Object.entries(stages)) {
      summary.push({
        metric: `per-turn stages in process (Node, chat history ${st.promptTokens} tok, p50): parse+validate whole / via turn chain / render whole / via turn chain / tokens+hashes / worker body whole / from the chain's pieces`,
        value: [st.parse, st.parseChain, st.renderWhole, st.renderChain, st.tokensAndHashes, st.body, st.bodyChain].map((x) => x.toFixed(2)).join(" / "),
        unit: "ms",
        goal: "",
        pass: null,
      });
    }
    summary.push({
      metric: `cold request's stages in process (Node, ${cold.promptTokens} tok, CPU p50): parse+validate / render / tokens+hashes / namespace / worker body [sum]`,
      value: `${[cold.parse, cold.render, cold.tokensAndHashes, cold.namespace, cold.body].map((x) => x.toFixed(2)).join(" / ")} [${cold.total.toFixed(2)}]`,
      unit: "ms",
      goal: "",
      pass: null,
    });
    summary.push({ metric: "first chat request through the edge (1k text; the isolate had served only health and admin requests, the worker was warm) [edge stages before upstream]", value: `${fmt(firstMs)} [${firstStages["kvedge-route"] ?? "–"}]`, unit: "ms", goal: "", pass: null });
    summary.push({ metric: "the simulated worker's own first chat request (reference: its cold start)", value: fmt(workerFirst.total), unit: "ms", goal: "", pass: null });
    const hopFloor = { edgeHealthzP50: summarize(hop.edge).p50, workerHealthP50: summarize(hop.worker).p50, healthzEdgeCpuMean };
    summary.push({ metric: "proxy floor, a warm 1k body unstreamed: edge-process CPU p50 with its 2 index RPCs / the fetch alone (?rpc=0) [difference per RPC] / with a rate-limit take before them (?rl=1)", value: `${floorRpc.withRpcCpuP50.toFixed(2)} / ${floorRpc.fetchOnlyCpuP50.toFixed(2)} [${((floorRpc.withRpcCpuP50 - floorRpc.fetchOnlyCpuP50) / 2).toFixed(2)}] / ${floorRpc.withRateLimitTakeCpuP50.toFixed(2)}`, unit: "ms", goal: "", pass: null });
    for (const [name, r] of Object.entries(rateLimit ?? {}))
      summary.push({
        metric: `rate limiting off vs on (the default: the client's requests leased from its RateLimiter object a few at a time, the object in the index process), ${name} (n=${r.n}): edge-process CPU p50 off / on [per-pair on − off p50; mean] (isolate thread p50 off / on) {index-process CPU p50 off / on; per-pair on − off p50}`,
        value: `${r.offCpuP50.toFixed(2)} / ${r.onCpuP50.toFixed(2)} [${r.onMinusOffCpuP50.toFixed(2)}; ${r.onMinusOffCpuMean.toFixed(2)}] (${r.offIsolateCpuP50.toFixed(2)} / ${r.onIsolateCpuP50.toFixed(2)}) {${r.offIndexCpuP50.toFixed(2)} / ${r.onIndexCpuP50.toFixed(2)}; ${r.indexOnMinusOffCpuP50.toFixed(2)}}`,
        unit: "ms",
        goal: "",
        pass: null,
      });
    summary.push({ metric: "local hop floor: GET /healthz through the edge vs the worker's own /health, p50 [edge-process CPU mean per /healthz]", value: `${hopFloor.edgeHealthzP50.toFixed(2)} vs ${hopFloor.workerHealthP50.toFixed(2)} [${healthzEdgeCpuMean.toFixed(2)}]`, unit: "ms", goal: "", pass: null });
    const keys = Object.keys(results);
    const plot = barChart({
      title: "Edge overhead per request through the real handler (edge − direct, p50 and p99)",
      unit: "ms",
      log: true,
      bars: keys.flatMap((k) => [
        { label: `${k} p50`, value: Math.max(0.1, results[k].overheadP50), group: "p50", note: GOALS[k] ? `(goal ≤ ${GOALS[k]})` : "" },
        { label: `${k} p99`, value: Math.max(0.1, results[k].overheadP99), group: "p99" },
      ]),
    });
    ctx.progress(0.95, "edge: stopping the fleet");
    await fleet.stop();
    // Answer length, streamed and not (bench/edge/stream-length.mjs: fleets of its own, a paced
    // worker); KVEDGE_BENCH_EDGE_CASES selects it by "stream-length".
    let streamLength = null;
    if (!only || only.test("stream-length")) {
      const r = await streamLengthFigures({ tiny: ctx.tiny, quick: ctx.quick, model: MODEL, system: SYSTEM, fresh, progress: (f, label) => ctx.progress(0.95 + 0.05 * f, `edge stream-length: ${label}`) });
      summary.push(...r.summary);
      streamLength = r.figures;
    }
    return { summary, details: { conversations, streamLength, stages, coldStages: cold, firstRequestMs: firstMs, firstRequestStages: firstStages, workerFirstRequestMs: workerFirst.total, hopFloor, floorRpc, rateLimit, cases: results, worker: "services/sglang-sim, timing instant" }, plots: [{ file: "edge.svg", svg: plot }] };
  },
};
