// The edge's per-turn work in this process (Node, same code as the Worker runs): for a chat whose
// history grows by an answer and a question a turn, each stage's time at a given history size —
// body parse and validation (whole, or through the turn chain: only the messages it does not hold),
// the prompt rendered whole or through the turn chain, tokens and block hashes through the
// prompt-prefix cache, the /generate body as the edge makes it (upstream-body.ts: generateBodyParts
// made into a Blob, escaping the whole prompt, or sending the chain's escaped pieces, non-ASCII ones
// as their held UTF-8, and escaping the rest), then apart the Blob's bytes read back (the copy fetch
// makes as it sends, in workerd the runtime's, not the isolate's JS). workerd gives no clock inside a
// request (it advances across I/O only), so these in-process figures are what splits the Worker's
// CPU by stage; both paths are timed on the same requests.
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { parseEdgeConfig } from "../../src/config/config.ts";
import { parseChatBody, parseChatTurn } from "../../src/edge/chat/parse.ts";
import { promptTextOf } from "../../src/edge/chat/prompt.ts";
import { preparePrompt } from "../../src/prompt/index.ts";
import { PrefixCache } from "../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { TurnChainCache } from "../../src/prompt/turn-chain.ts";
import { bodyOfChunks, generateBodyParts } from "../../src/proxy/generate-body.ts";
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
    const t = { parse: [], parseChain: [], renderWhole: [], renderChain: [], tokensAndHashes: [], body: [], bodyChain: [], bodyRead: [], bodyChainRead: [] };
    const work = { parsedChars: [], escapedChars: [], bodyChars: [] };
    const bodies = [];
    for (let i = 0; i < turns + 2; i++) {
      bodies.push(JSON.stringify({ model: MODEL.id, messages, max_tokens: 16 }));
      messages.push({ role: "assistant", content: fresh(80) }, { role: "user", content: fresh(40) });
    }
    const timed = (k, i, f) => {
      const a = performance.now();
      const r = f();
      // The first two turns seed the caches (the history's first sighting, then its first extension).
      if (i >= 2) t[k].push(performance.now() - a);
      return r;
    };
    // The body's parts made into the Blob the edge sends: Node's Blob, as workerd's, encodes its
    // strings and copies its byte parts when it is made (its time here grows with the body's bytes),
    // so nothing of the build is left for the read, which is timed apart.
    const timedBody = async (k, i, parts) => {
      const a = performance.now();
      const blob = bodyOfChunks(parts());
      const b = performance.now();
      const bytes = new Uint8Array(await blob.arrayBuffer());
      if (i >= 2) {
        t[k].push(b - a);
        t[`${k}Read`].push(performance.now() - b);
      }
      return bytes;
    };
    const generateOf = (req, text) => buildGenerateBody(req, { text, rid: "r", defaultMaxNewTokens: null, requireReasoning: false, toolCallParser: null, media: {} });
    // Each path replays the conversation on its own, so each pays for its own garbage collection.
    const wholeBodies = [];
    for (const [i, bodyText] of bodies.entries()) {
      const literals = [];
      // As the edge reads a body: its size was capped in bytes while it was read (readBodyText).
      const req = timed("parse", i, () => parseChatBody(bodyText, LIMITS, { sizeChecked: true, literals }));
      const prompt = timed("renderWhole", i, () => preparePrompt(req, PROFILE));
      const generate = generateOf(req, prompt.text);
      wholeBodies.push(await timedBody("body", i, () => generateBodyParts(generate, literals)));
    }
    let tokens = 0;
    for (const [i, bodyText] of bodies.entries()) {
      const literals = [];
      const parseWork = { parsedChars: 0, validatedMessages: 0 };
      const escapeWork = { escapedChars: 0 };
      const { req, turn } = timed("parseChain", i, () => parseChatTurn(bodyText, CONFIG, "", { sizeChecked: true, literals, work: parseWork }, chain));
      const prompt = timed("renderChain", i, () => chain.prepare(req, bodyText, PROFILE, "", { found: turn, validated: true }));
      tokens = timed("tokensAndHashes", i, () => prefix.encode(tok, promptTextOf(prompt), 16, "")).length;
      const generate = generateOf(req, prompt.text);
      const bytes = await timedBody("bodyChain", i, () => generateBodyParts(generate, literals, prompt.pieces ?? null, escapeWork));
      // The /generate body holds the prompt: equal bodies are equal prompts and sampling.
      if (!Buffer.from(bytes.buffer).equals(Buffer.from(wholeBodies[i].buffer))) throw new Error("the turn chain's /generate body differs from the whole path's");
      if (i >= 2) {
        work.parsedChars.push(parseWork.parsedChars);
        work.escapedChars.push(escapeWork.escapedChars);
        work.bodyChars.push(bodyText.length);
      }
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
