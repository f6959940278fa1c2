// What an answer's length costs the edge: a warm 1k-token conversation turn answered with 16, 256
// and 1 024 output tokens (ignore_eos, so exactly that many), streamed and not, through the real
// edge and straight to the worker. The simulated worker paces its tokens (1 ms each), so a streamed
// answer's frames reach the edge one by one, as a GPU's do (SGLang's default stream_interval 1:
// one /generate frame per token). Its own fleet per worker mode: cumulative frames (SGLang's
// default: each frame repeats the text and ids so far) and, unless tiny, incremental ones
// (--incremental-streaming-output; streamed answers only: an unstreamed one is the same body). Figures: edge-process CPU per request (p50), its least-squares
// slope over the output tokens (µs per output token), and the worker process's CPU for the same
// answer sent to the edge (/generate) and straight to it (its own /v1 translation).
import { startEdgeFleet } from "../lib/edge-fleet.mjs";
import { replayFetch } from "../lib/replay-fetch.mjs";
import { nativeWorkerdPid, processCpuPreciseMs, waitForQuiet } from "../lib/process-cpu.mjs";
import { summarize } from "../lib/stats.mjs";

const DECODE_MS_PER_TOKEN = 1;

/** Least-squares slope of ys over xs. */
function slope(xs, ys) {
  const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
  const my = ys.reduce((a, b) => a + b, 0) / ys.length;
  let num = 0;
  let den = 0;
  xs.forEach((x, i) => {
    num += (x - mx) * (ys[i] - my);
    den += (x - mx) ** 2;
  });
  return den === 0 ? 0 : num / den;
}

/** The body read whole; for a stream, the completion tokens its usage chunk reports. */
async function post(url, body, headers = {}) {
  const { response: r, start: t } = await replayFetch(url, { method: "POST", body, headers: { "content-type": "application/json", ...headers } });
  const text = await r.text();
  const ms = performance.now() - t;
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text.slice(0, 300)}`);
  let usage;
  if (r.headers.get("content-type")?.includes("text/event-stream")) {
    const last = text.split("\n\n").filter((s) => s.startsWith("data: {")).at(-1);
    usage = last ? JSON.parse(last.slice(6)).usage : undefined;
  } else usage = JSON.parse(text).usage;
  return { ms, completionTokens: usage?.completion_tokens ?? null, bytes: text.length };
}

/** One worker mode's figures, on a fleet of its own. */
async function runMode({ incremental, lengths, streams, reps, model, system, fresh, progress }) {
  const fleet = await startEdgeFleet({ splitIndex: true, workerArgs: ["--decode-ms-per-token", String(DECODE_MS_PER_TOKEN), ...(incremental ? ["--incremental-streaming-output"] : [])] });
  try {
    const edgePid = nativeWorkerdPid(fleet.edgePid);
    const indexPid = nativeWorkerdPid(fleet.indexPid);
    const edge = `${fleet.edgeUrl}/v1/chat/completions`;
    const direct = `${fleet.workerUrl}/v1/chat/completions`;
    const admin = { authorization: `Bearer ${fleet.adminToken}` };
    const body = (messages, maxTokens, stream) => JSON.stringify({ model, messages, max_tokens: maxTokens, ignore_eos: true, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
    const history = [{ role: "system", content: system }, { role: "user", content: fresh(1000) }];
    const turn = () => [...history, { role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) }];
    // The isolate's and the worker's first requests (JIT, tables), then the history seen once.
    for (let i = 0; i < 4; i++) {
      await post(edge, body([{ role: "user", content: fresh(1000) }], 64, i % 2 === 1), admin);
      await post(direct, body([{ role: "user", content: fresh(1000) }], 64, i % 2 === 1));
    }
    await post(edge, body(history, 16, false), admin);
    // A fresh fleet's first two longest streamed answers cost the edge and the worker ~20-40 % more
    // than later ones (measured per rep: 155-175 ms falling to 108-130 at 1 024 tokens): two per
    // side before measuring, so each mode's p50 reads steady state, not how many reps it had.
    const longest = Math.max(...lengths);
    if (streams.includes(true))
      for (let i = 0; i < 2; i++) {
        await post(edge, body(turn(), longest, true), admin);
        await post(direct, body(turn(), longest, true));
      }
    await waitForQuiet([edgePid, indexPid, fleet.workerPid, fleet.relayPid]);
    const cases = {};
    for (const tokens of lengths) for (const stream of streams) cases[`${tokens}${stream ? " stream" : ""}`] = { tokens, stream, edgeCpu: [], workerCpuEdge: [], workerCpuDirect: [], edgeMs: [], directMs: [], upstreamBytes: 0 };
    for (let r = 0; r < reps; r++) {
      progress?.(r / reps, `${incremental ? "incremental" : "cumulative"} rep ${r + 1}/${reps}`);
      for (const c of Object.values(cases)) {
        const b = body(turn(), c.tokens, c.stream);
        const sides = r % 2 === 0 ? ["edge", "direct"] : ["direct", "edge"];
        const e0 = processCpuPreciseMs(edgePid);
        for (const side of sides) {
          const w0 = processCpuPreciseMs(fleet.workerPid);
          const res = await post(side === "edge" ? edge : direct, b, side === "edge" ? admin : {});
          const w = processCpuPreciseMs(fleet.workerPid) - w0;
          if (res.completionTokens !== c.tokens) throw new Error(`stream-length: ${side} answered ${res.completionTokens} tokens, asked ${c.tokens}`);
          if (side === "edge") {
            c.workerCpuEdge.push(w);
            c.edgeMs.push(res.ms);
          } else {
            c.workerCpuDirect.push(w);
            c.directMs.push(res.ms);
          }
        }
        // Both requests inside the window: the edge's work after its last byte (settle) is counted.
        c.edgeCpu.push(processCpuPreciseMs(edgePid) - e0);
      }
    }
    const out = {};
    for (const [k, c] of Object.entries(cases)) {
      out[k] = {
        tokens: c.tokens,
        stream: c.stream,
        n: c.edgeCpu.length,
        edgeCpuP50: summarize(c.edgeCpu).p50,
        edgeCpuMean: summarize(c.edgeCpu).mean,
        workerCpuEdgeP50: summarize(c.workerCpuEdge).p50,
        workerCpuDirectP50: summarize(c.workerCpuDirect).p50,
        edgeWallP50: summarize(c.edgeMs).p50,
        directWallP50: summarize(c.directMs).p50,
      };
    }
    const slopes = {};
    for (const stream of streams) {
      const rows = Object.values(out).filter((c) => c.stream === stream);
      slopes[stream ? "streamed" : "unstreamed"] = {
        edgeCpuUsPerToken: 1000 * slope(rows.map((c) => c.tokens), rows.map((c) => c.edgeCpuP50)),
        workerCpuDirectUsPerToken: 1000 * slope(rows.map((c) => c.tokens), rows.map((c) => c.workerCpuDirectP50)),
      };
    }
    return { cases: out, slopes };
  } finally {
    await fleet.stop();
  }
}

/**
 * Figures for the edge suite: { decodeMsPerToken, lengths, modes: { cumulative, incremental? } } and its
 * summary rows. `tiny`: 16 and 256 tokens, one rep, cumulative frames only.
 */
export async function streamLengthFigures({ tiny, quick, model, system, fresh, progress }) {
  const lengths = tiny ? [16, 256] : [16, 256, 1024];
  // Both modes the same number of reps: their p50s are compared with each other.
  const reps = tiny ? 1 : quick ? 3 : 4;
  const modes = { cumulative: await runMode({ incremental: false, lengths, streams: [false, true], reps, model, system, fresh, progress }) };
  if (!tiny) modes.incremental = await runMode({ incremental: true, lengths, streams: [true], reps, model, system, fresh, progress });
  const summary = [];
  for (const [mode, m] of Object.entries(modes)) {
    const at = (stream) => lengths.map((t) => m.cases[`${t}${stream ? " stream" : ""}`].edgeCpuP50.toFixed(2)).join(" / ");
    const direct = lengths.map((t) => m.cases[`${t} stream`].workerCpuDirectP50.toFixed(2)).join(" / ");
    const unstreamed = m.slopes.unstreamed !== undefined;
    summary.push({
      metric: `answer length, warm 1k turn, ${mode} worker frames (${DECODE_MS_PER_TOKEN} ms/token): edge-process CPU p50 ${unstreamed ? "unstreamed / streamed" : "streamed"} at ${lengths.join(" / ")} output tokens [slope µs per output token${unstreamed ? " unstreamed; streamed" : ""}] {worker-process CPU p50, streamed straight to it}`,
      value: `${unstreamed ? `${at(false)} / ` : ""}${at(true)} [${unstreamed ? `${m.slopes.unstreamed.edgeCpuUsPerToken.toFixed(1)}; ` : ""}${m.slopes.streamed.edgeCpuUsPerToken.toFixed(1)}] {${direct}}`,
      unit: "ms",
      goal: "",
      pass: null,
    });
  }
  return { figures: { decodeMsPerToken: DECODE_MS_PER_TOKEN, lengths, modes }, summary };
}
