// The edge's per-turn work in this process (Node, same code as the Worker runs): for a chat whose
// history grows by an answer and a question a turn, each stage's time at a given history size —
// body parse and validation (whole, or through the turn chain: only the messages it does not hold),
// the prompt rendered whole or through the turn chain, tokens and block hashes through the
// prompt-prefix cache, the /generate body (escaping the whole prompt, or sending the chain's
// escaped pieces and escaping the rest). workerd gives no clock inside a
// request (it advances across I/O only), so these in-process figures are what splits the Worker's
// CPU by stage; both paths are timed on the same requests.
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { parseEdgeConfig } from "../../src/config/config.ts";
import { parseChatBody, parseChatTurn } from "../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../src/prompt/index.ts";
import { PrefixCache } from "../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { TurnChainCache } from "../../src/prompt/turn-chain.ts";
import { generateBodyChunks } from "../../src/proxy/generate-body.ts";
import { buildGenerateBody } from "../../src/proxy/generate-request.ts";
import { initHashing } from "../../src/util/hash.ts";
import { summarize } from "../lib/stats.mjs";

const LIMITS = { ...DEFAULT_LIMITS, maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 };
// The default pool (qwen3_vl, qwen3vl-instruct): parseChatTurn finds the chain's scope from the body's model.
const CONFIG = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0", KVEDGE_LIMITS: JSON.stringify(LIMITS) });
const MODEL = CONFIG.models[0];
const PROFILE = { family: MODEL.family, templateId: MODEL.templateId };

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
    const t = { parse: [], parseChain: [], renderWhole: [], renderChain: [], tokensAndHashes: [], body: [], bodyChain: [] };
    const work = { parsedChars: [], escapedChars: [], bodyChars: [] };
    let tokens = 0;
    for (let i = 0; i < turns + 2; i++) {
      const bodyText = JSON.stringify({ model: MODEL.id, messages, max_tokens: 16 });
      let a = performance.now();
      const literals = [];
      const req = parseChatBody(bodyText, LIMITS, { literals });
      let b = performance.now();
      const parseMs = b - a;
      a = b;
      const chainLiterals = [];
      const parseWork = { parsedChars: 0, validatedMessages: 0 };
      const { req: chainReq, turn } = parseChatTurn(bodyText, CONFIG, { literals: chainLiterals, work: parseWork }, chain);
      b = performance.now();
      const parseChainMs = b - a;
      a = b;
      const whole = preparePrompt(req, PROFILE);
      b = performance.now();
      const wholeMs = b - a;
      a = b;
      const chained = chain.prepare(chainReq, bodyText, PROFILE, { found: turn, validated: true });
      b = performance.now();
      const chainMs = b - a;
      if (chained.text !== whole.text) throw new Error("turn chain differs from the full render");
      a = b;
      const enc = prefix.encode(tok, chained.text, 16);
      b = performance.now();
      const encMs = b - a;
      const generate = buildGenerateBody(req, { text: chained.text, rid: "r", defaultMaxNewTokens: null, requireReasoning: false, toolCallParser: null, media: {} });
      a = performance.now();
      const wholeBody = generateBodyChunks(generate, literals);
      b = performance.now();
      const bodyMs = b - a;
      const escapeWork = { escapedChars: 0 };
      a = b;
      const chainBody = generateBodyChunks(generate, chainLiterals, chained.escapedPrefix ?? null, escapeWork);
      b = performance.now();
      if (chainBody.join("") !== wholeBody.join("")) throw new Error("the /generate body from the chain's pieces differs");
      tokens = enc.length;
      // The first two turns seed the caches (the history's first sighting, then its first extension).
      if (i >= 2) {
        t.parse.push(parseMs);
        t.parseChain.push(parseChainMs);
        t.renderWhole.push(wholeMs);
        t.renderChain.push(chainMs);
        t.tokensAndHashes.push(encMs);
        t.body.push(bodyMs);
        t.bodyChain.push(b - a);
        work.parsedChars.push(parseWork.parsedChars);
        work.escapedChars.push(escapeWork.escapedChars);
        work.bodyChars.push(bodyText.length);
      }
      messages.push({ role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) });
    }
    out[size] = {
      promptTokens: tokens,
      ...Object.fromEntries(Object.entries(t).map(([k, v]) => [k, summarize(v).p50])),
      // Characters per turn (p50): the body, what the parse read through the chain, what the body build escaped.
      work: Object.fromEntries(Object.entries(work).map(([k, v]) => [k, summarize(v).p50])),
    };
  }
  return out;
}
