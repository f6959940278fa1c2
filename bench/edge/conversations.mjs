// Growing conversations through the real edge (part of the "edge" suite): many live conversations
// in one isolate, their turns interleaved round-robin, each request the whole history plus what the
// turn adds, until the history passes `targetTokens`:
//   chat   a user question (~300 tokens) and, on the next turn, the answer (~3000 tokens);
//   agent  an assistant tool call and its tool output (~10000 tokens), then the next call;
//   vision a user question with an image each turn (one of four, 1024–1920 px), the answer (~1500 tokens).
// Requests go one at a time (a shared two-core box would otherwise measure contention), so
// "concurrent" means interleaved in one isolate: every conversation's state competes for the
// isolate's caches. Per turn, overhead = edge − direct as in the rest of the suite (the worker sees
// the body once first; edge and direct sends alternate). Per round, workerd's own CPU time (utime +
// stime of the workerd process from /proc: the Worker and its Durable Objects, 10 ms ticks, so a
// mean over the round's edge requests, not a per-request figure). Reuse: the share of turns whose
// earlier messages came from the turn chain (x-kvedge-prompt-reused-messages, admin callers).
import { readFileSync } from "node:fs";
import { processCpuMs } from "../lib/process-cpu.mjs";
import { summarize } from "../lib/stats.mjs";

/** History bins (tokens) the figures are reported in; the goals are set at 32k and 100k. */
export const HISTORY_BINS = [
  ["≤8k", 0, 8_000],
  ["8–24k", 8_000, 24_000],
  ["24–40k (32k)", 24_000, 40_000],
  ["40–80k", 40_000, 80_000],
  ["80–120k (100k)", 80_000, 120_000],
];

/**
 * The workerd binary's pid: the fleet spawns the npm package's bin, a Node launcher whose child is
 * the native workerd (its CPU is the Worker's; the launcher's is not).
 */
function workerdPid(pid) {
  for (let depth = 0; depth < 3; depth++) {
    const comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
    if (comm !== "node") return pid;
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean);
    if (children.length !== 1) break;
    pid = Number(children[0]);
  }
  return pid;
}

function binOf(tokens) {
  return HISTORY_BINS.find(([, lo, hi]) => tokens > lo && tokens <= hi)?.[0] ?? null;
}

/**
 * Runs `runs` passes of the workload. `io`: { edge, direct, admin, body(messages), fresh(tokens),
 * image(i) → a content part, timedPost, edgePid }. Returns per-kind, per-bin figures.
 */
export async function runConversations(ctx, io, { runs, perKind, targetTokens }) {
  const samples = [];
  const pid = workerdPid(io.edgePid);
  for (let run = 0; run < runs; run++) {
    const convs = [];
    for (const kind of ["chat", "agent", "vision"]) for (let i = 0; i < perKind[kind]; i++) convs.push({ kind, id: `${kind}-${run}-${i}`, messages: [{ role: "system", content: `You are assistant ${i}. Keep answers grounded in the conversation.` }], turn: 0, done: false });
    let round = 0;
    while (convs.some((c) => !c.done)) {
      ctx.progress?.(0, `edge conversations: run ${run + 1}/${runs}, round ${round++}`);
      const cpu0 = processCpuMs(pid);
      const roundSamples = [];
      for (const c of convs) {
        if (c.done) continue;
        extend(c, io);
        const b = io.body(c.messages);
        await io.timedPost(io.direct, b, false);
        let e;
        let d;
        if (c.turn % 2 === 0) {
          e = await io.timedPost(io.edge, b, false, io.admin);
          d = await io.timedPost(io.direct, b, false);
        } else {
          d = await io.timedPost(io.direct, b, false);
          e = await io.timedPost(io.edge, b, false, io.admin);
        }
        const tokens = JSON.parse(d.text).usage?.prompt_tokens ?? Number(e.headers.get("x-kvedge-total-blocks")) * 16;
        const reused = Number(e.headers.get("x-kvedge-prompt-reused-messages") ?? 0);
        roundSamples.push({ kind: c.kind, run, tokens, overhead: e.total - d.total, edge: e.total, reused: reused > 0, first: c.turn === 0 });
        c.turn++;
        if (tokens >= targetTokens) c.done = true;
      }
      const cpuPer = (processCpuMs(pid) - cpu0) / Math.max(1, roundSamples.length);
      for (const s of roundSamples) samples.push({ ...s, cpuRoundMean: cpuPer });
    }
  }
  return summarizeConversations(samples);
}

/** Appends what turn `c.turn` adds to conversation `c`. */
function extend(c, io) {
  const m = c.messages;
  if (c.kind === "chat") {
    if (c.turn > 0) m.push({ role: "assistant", content: io.fresh(3000) });
    m.push({ role: "user", content: io.fresh(300) });
  } else if (c.kind === "agent") {
    if (c.turn === 0) m.push({ role: "user", content: `Investigate the repository and report. ${io.fresh(200)}` });
    else {
      const id = `call_${c.id}_${c.turn}`;
      m.push({ role: "assistant", content: "", tool_calls: [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/file-${c.turn}.ts` }) } }] });
      m.push({ role: "tool", tool_call_id: id, content: io.fresh(10_000) });
    }
  } else {
    if (c.turn > 0) m.push({ role: "assistant", content: io.fresh(1500) });
    m.push({ role: "user", content: [{ type: "text", text: io.fresh(100) }, io.image(c.turn)] });
  }
}

function summarizeConversations(samples) {
  const out = { kinds: {}, perRun: {}, samples: samples.length };
  for (const kind of ["chat", "agent", "vision"]) {
    const ks = samples.filter((s) => s.kind === kind);
    const reuse = ks.filter((s) => !s.first);
    const bins = {};
    for (const [name] of HISTORY_BINS) {
      const warm = ks.filter((s) => !s.first && s.reused && binOf(s.tokens) === name);
      if (warm.length === 0) continue;
      const o = summarize(warm.map((s) => s.overhead));
      bins[name] = { n: warm.length, overheadP50: o.p50, overheadP99: o.p99, workerdCpuMeanPerRequest: warm.reduce((a, s) => a + s.cpuRoundMean, 0) / warm.length };
    }
    // Least squares of warm overhead on history tokens: the growth per 1k tokens.
    const w = ks.filter((s) => !s.first && s.reused);
    let slope = null;
    if (w.length > 2) {
      const mx = w.reduce((a, s) => a + s.tokens, 0) / w.length;
      const my = w.reduce((a, s) => a + s.overhead, 0) / w.length;
      const sxy = w.reduce((a, s) => a + (s.tokens - mx) * (s.overhead - my), 0);
      const sxx = w.reduce((a, s) => a + (s.tokens - mx) ** 2, 0);
      slope = sxx > 0 ? (sxy / sxx) * 1000 * 1000 : null; // µs per 1k tokens
    }
    out.kinds[kind] = { turns: ks.length, reuseRate: reuse.length ? reuse.filter((s) => s.reused).length / reuse.length : null, bins, growthUsPer1kTokens: slope };
    const runs = [...new Set(ks.map((s) => s.run))];
    out.perRun[kind] = runs.map((r) => {
      const rs = ks.filter((s) => s.run === r && !s.first && s.reused && s.tokens > 24_000 && s.tokens <= 40_000);
      return rs.length ? summarize(rs.map((s) => s.overhead)).p50 : null;
    });
  }
  return out;
}
