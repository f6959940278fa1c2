// A cold request's edge work in this process (Node, same code as the Worker runs), stage by stage:
// each request a new conversation (a system prompt and a fresh user text of `tokens`), so nothing is
// in the turn chain or the prompt-prefix cache — body parse and validation, the prompt rendered,
// tokens and block hashes through the prompt-prefix cache (a miss, then its store), the hashes moved
// into a tenant's cache namespace, the /generate body as the edge makes it (its parts into a Blob,
// which encodes and copies them when made). CPU time (process.cpuUsage: this process's
// user + system time, so a shared box's load moves it less than wall time), p50 over `n` requests.
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { namespacedLocalHashes, namespaceTag } from "../../src/blocks/block-hash.ts";
import { parseChatBody } from "../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../src/prompt/index.ts";
import { PrefixCache } from "../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { bodyOfChunks, generateBodyParts } from "../../src/proxy/generate-body.ts";
import { buildGenerateBody } from "../../src/proxy/generate-request.ts";
import { initHashing } from "../../src/util/hash.ts";
import { summarize } from "../lib/stats.mjs";

const LIMITS = { ...DEFAULT_LIMITS, maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 };
const PROFILE = { family: "qwen3_vl", templateId: "qwen3vl-instruct" };
const STAGES = ["parse", "render", "tokensAndHashes", "namespace", "body"];

/** p50 CPU ms of each stage and of their sum over `n` cold requests of about `tokens` tokens (after 3 unmeasured). */
export async function coldStageFigures({ tokens, n, fresh }) {
  await initHashing();
  const tok = getQwenTokenizer(PROFILE.family);
  const prefix = new PrefixCache();
  const tag = namespaceTag("bench-tenant");
  const samples = [];
  let promptTokens = 0;
  for (let i = 0; i < n + 3; i++) {
    const bodyText = JSON.stringify({ model: "m", messages: [{ role: "system", content: "You are a careful assistant." }, { role: "user", content: fresh(tokens) }], max_tokens: 16 });
    const t = {};
    let mark = process.cpuUsage();
    const lap = (stage) => {
      const d = process.cpuUsage(mark);
      t[stage] = (d.user + d.system) / 1000;
      mark = process.cpuUsage();
    };
    const literals = [];
    const req = parseChatBody(bodyText, LIMITS, { literals });
    lap("parse");
    const prompt = preparePrompt(req, PROFILE);
    lap("render");
    const enc = prefix.encode(tok, prompt.text, 16, "");
    lap("tokensAndHashes");
    namespacedLocalHashes(enc.localHashes, tag);
    lap("namespace");
    bodyOfChunks(generateBodyParts(buildGenerateBody(req, { text: prompt.text, rid: "r", defaultMaxNewTokens: null, requireReasoning: false, toolCallParser: null, media: {} }), literals));
    lap("body");
    promptTokens = enc.length;
    if (i >= 3) samples.push(t);
  }
  const p50 = (f) => summarize(samples.map(f)).p50;
  return { promptTokens, n, ...Object.fromEntries(STAGES.map((s) => [s, p50((t) => t[s])])), total: p50((t) => STAGES.reduce((a, s) => a + t[s], 0)) };
}
