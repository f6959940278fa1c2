// What the perf-based profiling scripts (scripts/perf-edge.mjs, scripts/trace-edge.mjs) share: the
// check for Linux `perf`, the workerd process to record, and the request shape they replay through
// the bench's edge fleet (a 32k-token conversation's next turn, or fresh text each time).
import { execFileSync } from "node:child_process";
import { makePng } from "../../test/helpers/png.ts";
import { freshText } from "./corpus.mjs";
import { rng } from "./stats.mjs";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SYSTEM = "You are a careful assistant.";

/** The edge bench's four vision images' sizes (bench/suites/edge.mjs), served as /img-<i>.png. */
const IMAGE_SIZES = [
  [1920, 1080],
  [1280, 720],
  [1024, 1024],
  [800, 1200],
];

/** The media a vision shape needs: start the fleet with `{ media: visionMedia(), decode: true }`. */
export function visionMedia() {
  return Object.fromEntries(IMAGE_SIZES.map(([w, h], i) => [`/img-${i}.png`, Buffer.from(makePng(w, h, { seed: i + 1 }))]));
}

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
 * the bench does: routing headers and server-timing on every answer). `vision`: the edge bench's
 * vision turns instead (conversations.mjs extend): user messages of ~100 tokens and an image (the
 * four of visionMedia() in turn, from the fleet's media server), answers of ~1500 tokens; each body
 * adds an answer and such a user message, its image the next of the four. `agent`: the edge bench's
 * agent steps instead (conversations.mjs extend): a user task (~200 tokens), then steps of an
 * assistant tool call (content "", one `tool_calls` entry) and its tool output (~10000 tokens) up
 * to `tokens`; each body adds one such step. Streams ask for usage.
 */
export function requestShape(fleet, { tokens, cold = false, stream = false, conversation = false, vision = false, agent = false, warm = 20, seed }) {
  const random = rng(seed);
  const edge = `${fleet.edgeUrl}/v1/chat/completions`;
  const headers = { "content-type": "application/json", ...(conversation || vision || agent ? { authorization: `Bearer ${fleet.adminToken}` } : {}) };
  const body = (messages) => JSON.stringify({ model: MODEL, messages, max_tokens: 16, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
  const turns = [];
  let images = 0;
  let steps = 0;
  const toolStep = () => {
    const id = `call_${++steps}`;
    return [
      { role: "assistant", content: "", tool_calls: [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/file-${steps}.ts` }) } }] },
      { role: "tool", tool_call_id: id, content: freshText(10_000, random) },
    ];
  };
  // ~1300 tokens an image on average (Qwen3-VL: a token per 32×32 px of the four sizes).
  const question = () => [{ type: "text", text: freshText(100, random) }, { type: "image_url", image_url: { url: `${fleet.mediaUrl}/img-${images++ % IMAGE_SIZES.length}.png` } }];
  if (vision) {
    for (let k = 0, size = 0; k === 0 || size + 2 * 2900 <= tokens; k++) {
      if (k > 0) turns.push({ role: "assistant", content: freshText(1500, random) });
      turns.push({ role: "user", content: question() });
      size += k > 0 ? 2900 : 1400;
    }
  } else if (agent) {
    // Whole steps while the history and the next body's new ~10000 tokens stay within `tokens`.
    turns.push({ role: "user", content: `Investigate the repository and report. ${freshText(200, random)}` });
    for (let size = 200; size + 2 * 10_000 <= tokens; size += 10_000) turns.push(...toolStep());
  } else if (conversation) {
    // Whole turns while the history and the next body's new ~3300 tokens stay within `tokens`.
    for (let k = 0, size = 0; k === 0 || size + 6600 <= tokens; k++) {
      if (k > 0) turns.push({ role: "assistant", content: freshText(3000, random) });
      turns.push({ role: "user", content: freshText(300, random) });
      size += k > 0 ? 3300 : 300;
    }
  }
  const history = conversation || vision || agent ? [{ role: "system", content: SYSTEM }, ...turns] : [{ role: "system", content: SYSTEM }, { role: "user", content: freshText(tokens, random) }];
  const [answer, asked] = conversation ? [3000, 300] : [80, 40];
  const next = () =>
    cold
      ? body([{ role: "system", content: SYSTEM }, { role: "user", content: freshText(tokens, random) }])
      : vision
        ? body([...history, { role: "assistant", content: freshText(1500, random) }, { role: "user", content: question() }])
        : agent
          ? body([...history, ...toolStep()])
          : body([...history, { role: "assistant", content: freshText(answer, random) }, { role: "user", content: freshText(asked, random) }]);
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
