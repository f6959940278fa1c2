// What the perf-based profiling scripts (scripts/perf-edge.mjs, scripts/trace-edge.mjs) share: the
// check for Linux `perf`, the workerd process to record, and the request shape they replay through
// the bench's edge fleet (a 32k-token conversation's next turn, or fresh text each time).
import { execFileSync } from "node:child_process";
import { freshText } from "./corpus.mjs";
import { rng } from "./stats.mjs";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SYSTEM = "You are a careful assistant.";

/** Exits with status 2 and a message naming `script` when `perf` is not on PATH. */
export function requirePerf(script) {
  try {
    execFileSync("perf", ["--version"], { stdio: "ignore" });
  } catch {
    console.error(`${script}: needs Linux \`perf\` on PATH`);
    process.exit(2);
  }
}

/** The workerd runtime's pid (workerd's npm launcher is a node script; the runtime is its child). */
export function workerdPid(fleet) {
  return execFileSync("pgrep", ["-P", String(fleet.edgePid)], { encoding: "utf8" }).trim().split("\n")[0];
}

/**
 * Requests of one shape against the fleet's edge: `next()` makes a body (warm: a conversation of
 * `tokens` the edge has seen, plus a new answer and user turn; cold: fresh text of `tokens`),
 * `post(body)` sends it and reads the answer, `warmUp()` sends the conversation once and `warm`
 * bodies (the isolate's JIT keeps compiling for some hundred requests: its background threads
 * count in the process's CPU). `conversation`: the edge bench's chat turns instead
 * (bench/edge/conversations.mjs): a history of user (~300 tokens) and assistant (~3000) messages
 * up to `tokens`, each body adding an answer and a question of those sizes, sent as an admin (as
 * the bench does: routing headers and server-timing on every answer). Streams ask for usage.
 */
export function requestShape(fleet, { tokens, cold = false, stream = false, conversation = false, warm = 20, seed }) {
  const random = rng(seed);
  const edge = `${fleet.edgeUrl}/v1/chat/completions`;
  const headers = { "content-type": "application/json", ...(conversation ? { authorization: `Bearer ${fleet.adminToken}` } : {}) };
  const body = (messages) => JSON.stringify({ model: MODEL, messages, max_tokens: 16, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
  const turns = [];
  if (conversation) {
    // Whole turns while the history and the next body's new ~3300 tokens stay within `tokens`.
    for (let k = 0, size = 0; k === 0 || size + 6600 <= tokens; k++) {
      if (k > 0) turns.push({ role: "assistant", content: freshText(3000, random) });
      turns.push({ role: "user", content: freshText(300, random) });
      size += k > 0 ? 3300 : 300;
    }
  }
  const history = conversation ? [{ role: "system", content: SYSTEM }, ...turns] : [{ role: "system", content: SYSTEM }, { role: "user", content: freshText(tokens, random) }];
  const [answer, question] = conversation ? [3000, 300] : [80, 40];
  const next = () =>
    cold
      ? body([{ role: "system", content: SYSTEM }, { role: "user", content: freshText(tokens, random) }])
      : body([...history, { role: "assistant", content: freshText(answer, random) }, { role: "user", content: freshText(question, random) }]);
  const post = async (b) => {
    const r = await fetch(edge, { method: "POST", body: b, headers });
    await r.arrayBuffer();
    if (!r.ok) throw new Error(`edge answered ${r.status}`);
  };
  const warmUp = async () => {
    await post(body(history));
    for (let i = 0; i < warm; i++) await post(next());
  };
  return { next, post, warmUp };
}
