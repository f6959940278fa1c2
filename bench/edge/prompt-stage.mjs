// The edge's per-turn work in this process (Node, same code as the Worker runs): for a chat whose
// history grows by an answer and a question a turn, each stage's time at a given history size —
// body parse and validation, the prompt rendered whole or through the turn chain, tokens and block
// hashes through the prompt-prefix cache, the /generate body. workerd gives no clock inside a
// request (it advances across I/O only), so these in-process figures are what splits the Worker's
// CPU by stage; both paths are timed on the same requests.
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { parseChatBody } from "../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../src/prompt/index.ts";
import { PrefixCache } from "../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { TurnChainCache } from "../../src/prompt/turn-chain.ts";
import { generateBodyChunks } from "../../src/proxy/generate-body.ts";
import { buildGenerateBody } from "../../src/proxy/generate-request.ts";
import { initHashing } from "../../src/util/hash.ts";
import { summarize } from "../lib/stats.mjs";

const PROFILE = { family: "qwen3_vl", templateId: "qwen3vl-instruct" };
const LIMITS = { ...DEFAULT_LIMITS, maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 };

/** p50 (ms) of each stage over `turns` warm turns at each history size in `sizes` (tokens). */
export async function promptStageFigures({ sizes, turns, fresh }) {
  await initHashing();
  const tok = getQwenTokenizer(PROFILE.family);
  const out = {};
  for (const size of sizes) {
    const chain = new TurnChainCache({ checkRate: 0 });
    const prefix = new PrefixCache();
    const messages = [{ role: "system", content: "You are a careful assistant." }];
    while (JSON.stringify(messages).length < size * 3.6) messages.push({ role: "user", content: fresh(300) }, { role: "assistant", content: fresh(3000) });
    messages.push({ role: "user", content: fresh(300) });
    const t = { parse: [], renderWhole: [], renderChain: [], tokensAndHashes: [], body: [] };
    let tokens = 0;
    for (let i = 0; i < turns + 2; i++) {
      const bodyText = JSON.stringify({ model: "m", messages, max_tokens: 16 });
      let a = performance.now();
      const literals = [];
      const req = parseChatBody(bodyText, LIMITS, { literals });
      let b = performance.now();
      const parseMs = b - a;
      a = b;
      const whole = preparePrompt(req, PROFILE);
      b = performance.now();
      const wholeMs = b - a;
      a = b;
      const chained = chain.prepare(req, bodyText, PROFILE);
      b = performance.now();
      const chainMs = b - a;
      if (chained.text !== whole.text) throw new Error("turn chain differs from the full render");
      a = b;
      const enc = prefix.encode(tok, chained.text, 16);
      b = performance.now();
      const encMs = b - a;
      a = b;
      generateBodyChunks(buildGenerateBody(req, { text: chained.text, rid: "r", defaultMaxNewTokens: null, requireReasoning: false, toolCallParser: null, media: {} }), literals);
      b = performance.now();
      tokens = enc.length;
      // The first two turns seed the caches (the history's first sighting, then its first extension).
      if (i >= 2) {
        t.parse.push(parseMs);
        t.renderWhole.push(wholeMs);
        t.renderChain.push(chainMs);
        t.tokensAndHashes.push(encMs);
        t.body.push(b - a);
      }
      messages.push({ role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) });
    }
    out[size] = { promptTokens: tokens, ...Object.fromEntries(Object.entries(t).map(([k, v]) => [k, summarize(v).p50])) };
  }
  return out;
}
