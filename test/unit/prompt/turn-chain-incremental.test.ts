/**
 * The per-turn state the turn chain, the prompt-prefix cache and the routed hashes keep per entry
 * (a chain's joined tally, the held spans found by walking up only to an entry already found equal,
 * a prefix found equal through a head identity, namespaced hash runs) equals what walking the whole
 * history gives, over random turn sequences: growing conversations, branches from earlier turns
 * (regenerated answers), agent steps (a tool call and its result), texts with and without
 * non-ASCII characters (held bodies), and budgets small enough to evict. Each turn goes through the
 * edge's read, parse, prompt and body stages as parseChat, prepareRouting and the upstream body
 * run them; each result is compared with the whole path's (the /generate body's bytes with
 * JSON.stringify's of the whole render).
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { readBody, tallyMessages } from "../../../src/api/validate.ts";
import { localBlockHashes, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { routedHashes } from "../../../src/edge/cache-salt.ts";
import { checkedHeldRead, parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { PrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { bodyOfChunks, generateBodyParts } from "../../../src/proxy/generate-body.ts";
import type { GenerateRequestBody } from "../../../src/proxy/sglang-wire.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { scanBodyLayout, TurnChainCache, type BodyLayout } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import type { JsonLiteral } from "../../../src/util/json-scan.ts";
import { PieceText } from "../../../src/util/piece-text.ts";
import { framedBody, seededText } from "../../helpers/held-body-input.ts";

beforeAll(() => initHashing());

const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
const tok = getQwenTokenizer(model.family);
const salt = "tenant-incremental";
const ASCII_WORDS = ["edge", "plain", "turn", 'q"uote', "back\\slash", "line\n"];
const WIDE_WORDS = [...ASCII_WORDS, "naïve", "—", "日本語", "😀"];

function layoutOf(l: BodyLayout | null): unknown {
  return l && { members: [...l.members], open: l.messagesOpen, messages: l.messages };
}

describe("incremental per-turn state against the whole walk", () => {
  it("layout, reused messages and tally, prompt, tokens and routed hashes equal the whole path's over random turns, branches and evictions", async () => {
    const tag = namespaceTag(salt);
    let reusedTurns = 0;
    let turnsSent = 0;
    const turn = fc.record({ from: fc.nat(), answer: fc.integer({ min: 1, max: 400 }), question: fc.integer({ min: 1, max: 200 }), wide: fc.boolean(), seed: fc.nat(), tool: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 12_000, max: 200_000 }), fc.integer({ min: 2_000, max: 40_000 }), fc.array(turn, { minLength: 2, maxLength: 14 }), async (chainBytes, prefixTokens, turns) => {
        const chain = new TurnChainCache({ checkRate: 0, maxBytes: chainBytes });
        const prefix = new PrefixCache({ maxTokens: prefixTokens });
        // Every conversation state sent so far: a turn goes on from one of them (the latest: a growing chat; another: a branch).
        const states: Record<string, unknown>[][] = [[{ role: "system", content: "You are terse." }, { role: "user", content: "Hello there, a first question." }]];
        for (const t of turns) {
          turnsSent++;
          const from = states[states.length - 1 - (t.from % Math.min(states.length, 3))]!;
          const words = t.wide ? WIDE_WORDS : ASCII_WORDS;
          // A chat turn (an answer, a question) or an agent step (a call, its result).
          const id = `call_${t.seed}`;
          const call = { role: "assistant", content: "", tool_calls: [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: seededText(t.seed, 3, words) }) } }] };
          const added = t.tool ? [call, { role: "tool", tool_call_id: id, content: seededText(t.seed + 1, t.answer, words) }] : [{ role: "assistant", content: seededText(t.seed, t.answer, words) }, { role: "user", content: seededText(t.seed + 1, t.question, words) }];
          const messages = [...from, ...added];
          states.push(messages);
          const body = JSON.stringify({ model: model.id, messages, max_tokens: 8 });
          // As parseChat reads and parses a body: a held prefix's text from the chain, the rest decoded.
          const read = await readBody(framedBody(new TextEncoder().encode(body)), config.limits, (b) => chain.heldBodyText(b, ""));
          const split = checkedHeldRead(read, chain, "");
          expect(split.joined).toBe(body);
          const layout = chain.scanLayout(split, "");
          expect(layoutOf(layout)).toEqual(layoutOf(scanBodyLayout(body)));
          const found = chain.find(split, profile, "", layout);
          const whole = parseChatBody(body, config.limits);
          const reuse = chain.reusedMessages(found);
          if (reuse) {
            reusedTurns++;
            const q = reuse.messages.length;
            expect(reuse.messages).toEqual(whole.messages.slice(0, q));
            expect(reuse.tally).toEqual(tallyMessages(body, layout!.messages.slice(0, q), whole.messages.slice(0, q)));
          }
          const literals: JsonLiteral[] = [];
          const parsed = parseChatTurn(split, config, "", { bytes: read.bytes, layout, literals }, chain);
          expect(parsed.req).toEqual(whole);
          const prompt = chain.prepare(parsed.req, split, profile, "", { found: parsed.turn, validated: true });
          const expected = preparePrompt(whole, profile).text;
          expect(prompt.text).toBe(expected);
          // The worker's body: held pieces and stored entries as their escaping, the rest escaped now.
          const gen = { text: prompt.text, sampling_params: { max_new_tokens: 8 }, rid: "r" } as GenerateRequestBody;
          const sent = Buffer.from(await bodyOfChunks(generateBodyParts(gen, literals, prompt.pieces ?? null)).arrayBuffer());
          expect(sent.equals(Buffer.from(JSON.stringify({ ...gen, text: expected }), "utf8"))).toBe(true);
          const p = prompt.pieces;
          const text = p ? new PieceText([...p.stable, p.rest], p.ids, p.heads) : prompt.text;
          const encoded = prefix.encode(tok, text, model.blockSize, "");
          const ids = tok.encode(expected, "");
          expect(encoded.tokens()).toEqual(ids);
          const plain = localBlockHashes(ids, model.blockSize);
          expect(Array.from(routedHashes({ cacheSalt: salt, tag }, encoded))).toEqual(namespacedLocalHashes(plain, tag));
          expect(Array.from(routedHashes({ cacheSalt: null, tag: null }, encoded))).toEqual(plain);
        }
      }),
      { numRuns: 40 },
    );
    // Most turns went on from a held prefix (the first of each run, and some after evictions, did not).
    expect(reusedTurns / turnsSent).toBeGreaterThan(0.4);
  });

  it("a reused chain's joined tally lists its data URLs in the body's order, turn after turn", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const image = (k: number) => ({ type: "image_url", image_url: { url: `data:image/png;base64,${"QUJD".repeat(3 + ((k * 7) % 11))}` } });
    const messages: unknown[] = [{ role: "system", content: "You are terse." }, { role: "user", content: [{ type: "text", text: "first" }, image(0), image(1)] }];
    let reused = 0;
    let listed = 0;
    for (let k = 1; k <= 6; k++) {
      const body = JSON.stringify({ model: model.id, messages, max_tokens: 8 });
      const parsed = parseChatTurn(body, config, "", {}, chain);
      const reuse = chain.reusedMessages(parsed.turn);
      if (reuse) {
        reused++;
        const q = reuse.messages.length;
        const whole = tallyMessages(body, parsed.turn!.layout.messages.slice(0, q), parsed.req.messages.slice(0, q));
        listed = Math.max(listed, whole.dataUrls.length);
        expect(reuse.tally).toEqual(whole);
      }
      chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
      messages.push({ role: "assistant", content: seededText(k, 20, ASCII_WORDS) }, { role: "user", content: [image(2 * k), { type: "text", text: `turn ${k}` }, image(2 * k + 1)] });
    }
    expect(reused, "later turns reused the chain").toBeGreaterThan(3);
    expect(listed, "data URLs of several entries, each of a different length, were joined").toBeGreaterThan(6);
  });

  it("a conversation whose first message changed in one character keeps no prefix its pieces' heads do not stand for", () => {
    // Same lengths, so every piece boundary and the prefix cache's keys (its first and last characters) coincide with the first conversation's.
    const prefix = new PrefixCache();
    const chain = new TurnChainCache({ checkRate: 0 });
    const first = seededText(3, 600, ASCII_WORDS);
    const mid = first.length >> 1;
    const edited = first.slice(0, mid) + (first[mid] === "Z" ? "Y" : "Z") + first.slice(mid + 1);
    const send = (messages: { role: string; content: string }[]) => {
      const body = JSON.stringify({ model: model.id, messages, max_tokens: 8 });
      const parsed = parseChatTurn(body, config, "", {}, chain);
      const prompt = chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
      const p = prompt.pieces;
      const text = p ? new PieceText([...p.stable, p.rest], p.ids, p.heads) : PieceText.of(prompt.text);
      expect(prefix.encode(tok, text, model.blockSize, "").tokens()).toEqual(tok.encode(prompt.text, ""));
      return p !== null;
    };
    const turns = (firstText: string, n: number) => {
      const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: firstText }];
      for (let k = 0; k < n; k++) messages.push({ role: "assistant", content: seededText(10 + 2 * k, 60, ASCII_WORDS) }, { role: "user", content: seededText(11 + 2 * k, 30, ASCII_WORDS) });
      return messages;
    };
    for (let n = 0; n < 4; n++) send(turns(first, n));
    let pieced = 0;
    for (let n = 0; n < 4; n++) if (send(turns(edited, n))) pieced++;
    expect(pieced, "the edited conversation's later turns came with pieces and heads").toBeGreaterThan(1);
  });

  it("a warm turn compares only the prefix cache's entries it added since its last hit, not each earlier turn's", () => {
    const prefix = new PrefixCache();
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages: { role: string; content: string }[] = [{ role: "system", content: "You are terse." }, { role: "user", content: seededText(1, 300, ASCII_WORDS) }];
    let compared = 0;
    for (let k = 0; k < 40; k++) {
      const body = JSON.stringify({ model: model.id, messages, max_tokens: 8 });
      const parsed = parseChatTurn(body, config, "", {}, chain);
      if (k > 1) {
        // The held messages through the last turn's query, with their tally (the chain's joined one), as the whole body's.
        const reuse = chain.reusedMessages(parsed.turn);
        const q = reuse?.messages.length ?? 0;
        expect(q).toBe(messages.length - 2);
        expect(reuse!.tally).toEqual(tallyMessages(body, parsed.turn!.layout.messages.slice(0, q), parsed.req.messages.slice(0, q)));
      }
      const prompt = chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
      const p = prompt.pieces;
      const text = p ? new PieceText([...p.stable, p.rest], p.ids, p.heads) : PieceText.of(prompt.text);
      // Counts the compares the lookup makes of cached text (one per entry it reads).
      const matches = text.matches.bind(text);
      compared = 0;
      text.matches = (start, s, seen) => {
        compared++;
        return matches(start, s, seen);
      };
      expect(prefix.encode(tok, text, model.blockSize, "").tokens()).toEqual(tok.encode(prompt.text, ""));
      messages.push({ role: "assistant", content: seededText(2 * k, 200, ASCII_WORDS) }, { role: "user", content: seededText(2 * k + 1, 100, ASCII_WORDS) });
    }
    expect(compared, "entries compared by the 40th turn's lookup").toBeLessThanOrEqual(2);
  });
});
