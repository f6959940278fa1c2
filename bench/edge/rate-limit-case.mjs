// The default rate limit's cost at the edge (part of the "edge" suite). Production runs with rate
// limiting on (`KVEDGE_RATE_LIMIT` unset): every generate request first takes one token from its
// bucket, a RateLimiter Durable Object, leased to the isolate a few tokens per RPC for a client sending
// steadily (src/edge/rate-lease.ts: a steady client's requests mostly make no call); the rest of the suite's edge
// runs with it off. A second edge Worker in the edge's workerd process (the same bundle, its own
// isolate) runs with it on, its RateLimiter objects served by the index process, so each take is one
// Cap'n Proto call to another process as a remote object's is (bench/lib/workerd-serve.mjs), at a
// rate that never refuses (bench/lib/edge-fleet.mjs). Per request: the worker sees the body once
// (unmeasured), then the edge with rate limiting off and on, alternating which goes first; each
// send's edge-process CPU is read apart with its waitUntil tail (turn-sends.mjs edgeSendCpu), and
// the index process's CPU in the same window (the take's object side is there, beside the route
// and receipts calls'). on − off per pair is the default limiter's edge-side cost.
import { summarize } from "../lib/stats.mjs";
import { edgeSendCpu } from "./turn-sends.mjs";

/**
 * The cases: warm 1k text (a seen history plus a new answer and user turn), unstreamed and streamed,
 * and a chat turn on a seen history of `turnHistoryTokens` (a ~3,000-token answer and a ~300-token
 * question added, unstreamed, as the suite's conversation turns). `io`: { post(target, body, stream)
 * with target "off" | "on" | "direct", body(messages, stream), fresh(tokens), system, cpu(), pids }.
 * Returns { [case]: figures }.
 */
export async function rateLimitFigures(io, { reps, turnReps, turnHistoryTokens }) {
  const cases = [
    { name: "text-1k warm", history: 1000, turn: [80, 40], stream: false, n: reps },
    { name: "text-1k warm stream", history: 1000, turn: [80, 40], stream: true, n: reps },
    { name: `chat turn ${Math.round(turnHistoryTokens / 1000)}k`, history: turnHistoryTokens, turn: [3000, 300], stream: false, n: turnReps },
  ];
  const out = {};
  for (const c of cases) {
    const history = [
      { role: "system", content: io.system },
      { role: "user", content: io.fresh(c.history) },
    ];
    for (const target of ["off", "on"]) await io.post(target, io.body(history, false), false);
    const s = { off: [], on: [], offIsolate: [], onIsolate: [], offIndex: [], onIndex: [], diff: [], indexDiff: [] };
    for (let i = 0; i < c.n; i++) {
      const b = io.body([...history, { role: "assistant", content: io.fresh(c.turn[0]) }, { role: "user", content: io.fresh(c.turn[1]) }], c.stream);
      await io.post("direct", b, c.stream);
      const sent = {};
      for (const target of i % 2 === 0 ? ["off", "on"] : ["on", "off"]) sent[target] = await edgeSendCpu(() => io.post(target, b, c.stream), io.cpu, io.pids);
      // The limiter took (its x-ratelimit-* headers) on the one side only: else the pair prices nothing.
      if (!sent.on.response.headers.has("x-ratelimit-remaining-requests") || sent.off.response.headers.has("x-ratelimit-remaining-requests")) throw new Error("rate-limit case: the rate-limited edge sent no x-ratelimit headers, or the other one did");
      for (const t of ["off", "on"]) {
        s[t].push(sent[t].process);
        s[`${t}Isolate`].push(sent[t].mainThread);
        s[`${t}Index`].push(sent[t].index);
      }
      s.diff.push(sent.on.process - sent.off.process);
      s.indexDiff.push(sent.on.index - sent.off.index);
    }
    const p50 = (k) => summarize(s[k]).p50;
    out[c.name] = {
      n: c.n,
      offCpuP50: p50("off"),
      onCpuP50: p50("on"),
      /** p50 of per-pair on − off (edge process): the default limiter's edge-side cost. */
      onMinusOffCpuP50: p50("diff"),
      onMinusOffCpuMean: summarize(s.diff).mean,
      offIsolateCpuP50: p50("offIsolate"),
      onIsolateCpuP50: p50("onIsolate"),
      offIndexCpuP50: p50("offIndex"),
      onIndexCpuP50: p50("onIndex"),
      /** p50 of per-pair on − off in the index process: the take's object side (and its storage write). */
      indexOnMinusOffCpuP50: p50("indexDiff"),
    };
  }
  return out;
}
