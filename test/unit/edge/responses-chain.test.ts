/**
 * Stored conversations (src/edge/responses/conversation-state.ts): a Responses conversation
 * continued with previous_response_id, each turn in a FRESH isolate (new turn chain and prefix
 * cache) seeded only from the stored records' prompt pieces, yields exactly the full path's prompt
 * text, media parts, token ids and block hashes on all three templates (text, tools with an agent
 * loop, an image, reasoning), while the template renders and the tokenizer encodes only about the
 * last turn: the work stays flat as the history grows. A 100k-token conversation's records each
 * stay within the 1 MiB cap and together linear in its size. A tampered stored text is caught by the
 * sampled full render (logged, dropped, answered with the full result); tampered stored tokens by the
 * sampled whole encode before seeding.
 */
import { beforeAll, describe, expect, it, vi } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { inputToMessages, ResponseCreateSchema, toChatRequest, type ChatMessage, type InputItem } from "../../../src/api/responses-schema.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { ModelConfigSchema, type ModelConfig } from "../../../src/config/config.ts";
import type { ParseWork } from "../../../src/api/validate.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { MAX_STORED_RECORD_BYTES } from "../../../src/edge/responses/stored-response.ts";
import { assembleState, hydrate, nextPiece, PromptPieceSchema, type PromptPiece } from "../../../src/edge/responses/conversation-state.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { PrefixCache, SPLIT_TOKEN } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const MODELS: ModelConfig[] = [
  ModelConfigSchema.parse({ id: "qwen2.5-vl", family: "qwen2_5_vl", templateId: "qwen2vl" }),
  ModelConfigSchema.parse({ id: "qwen3-vl", family: "qwen3_vl", templateId: "qwen3vl-instruct" }),
  ModelConfigSchema.parse({ id: "qwen3-vl-thinking", family: "qwen3_vl", templateId: "qwen3vl-thinking" }),
];
const TOOLS = [{ type: "function", name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } }, strict: false }];
const INSTRUCTIONS = "You are a careful agent. Answer briefly.";
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");
const PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

interface Turn {
  /** Responses input items of the request. */
  input: unknown[];
  /** The response's output items (what the store appends after the input). */
  output: unknown[];
}

const say = (text: string) => ({ type: "message", role: "assistant", content: [{ type: "output_text", text }] });
const TURNS: Turn[] = [
  { input: [{ role: "user", content: [{ type: "input_text", text: `Look at this. ${words(1, 200)}` }, { type: "input_image", image_url: PNG, detail: "auto" }] }], output: [{ type: "reasoning", content: [{ type: "reasoning_text", text: "An image." }] }, say(words(2, 120))] },
  { input: [{ role: "user", content: `Read a.txt. ${words(3, 80)}` }], output: [{ type: "function_call", call_id: "call_1", name: "read_file", arguments: '{"path": "a.txt"}' }] },
  { input: [{ type: "function_call_output", call_id: "call_1", output: words(4, 300) }], output: [{ type: "reasoning", content: [{ type: "reasoning_text", text: "Read it." }] }, say(words(5, 60))] },
  { input: [{ role: "user", content: `Now summarize. ${words(6, 50)}` }], output: [say(words(7, 90))] },
  { input: [{ role: "user", content: `And in one line? ${words(8, 40)}` }], output: [say("One line.")] },
];

/** The item without its image parts. */
function withoutImages(item: unknown): unknown {
  const content = (item as { content?: unknown }).content;
  if (!Array.isArray(content)) return item;
  return { ...(item as object), content: content.filter((p: { type?: string }) => p.type !== "input_image") };
}

interface Stored {
  messages: ChatMessage[];
  prompt: PromptPiece | null;
}

/** A piece's block hashes as a continuation reads them from the store (the piece assembled as a conversation's first). */
function hashesOf(piece: PromptPiece): bigint[] {
  return assembleState([{ ...piece, base: true, scope: "" }])!.tokens!.hashes;
}

/**
 * Runs the conversation as the handler does, each turn in a fresh isolate: the history and prompt
 * state come only from the stored records (JSON round trip). `withImage: false` drops the image;
 * `compare: false` skips the full path (the caches' own results are checked by the other tests).
 */
function converse(model: ModelConfig, opts: { withImage: boolean; checkRate: number; tamper?: boolean; tamperTokens?: boolean; turns?: Turn[]; compare?: boolean; sameIsolate?: boolean }) {
  const profile = { family: model.family, templateId: model.templateId };
  const tok = getQwenTokenizer(model.family);
  const records: Stored[] = [];
  /** Each record's stored size (its messages and prompt piece as JSON). */
  const recordBytes: number[] = [];
  const isolate = { turnChain: null as TurnChainCache | null, prefixCache: null as PrefixCache | null };
  const perTurn: { pieceEncodes: number; hashesFromPrompt: boolean | null; rendered: number; encoded: number; reusedTokens: number; tokens: number; promptChars: number; reusedMessages: number; validatedMessages: number; messages: number; mismatches: number; seeded: { messages: number; chars: number; media: number; tokens: number | null } | null }[] = [];
  for (const [i, turn] of (opts.turns ?? TURNS).entries()) {
    const input = opts.withImage ? turn.input : turn.input.map(withoutImages);
    const req = ResponseCreateSchema.parse({ model: model.id, instructions: INSTRUCTIONS, input, tools: TOOLS });
    const history = records.flatMap((r) => r.messages);
    const state = assembleState(records.map((r) => (r.prompt === null ? null : PromptPieceSchema.parse(r.prompt))));
    const inputMessages = inputToMessages(req.input);
    const body = JSON.stringify(toChatRequest(req, history, inputMessages));

    // A fresh isolate: nothing cached but what the store seeds.
    const mismatches: unknown[] = [];
    const turnChain = (opts.sameIsolate ? isolate.turnChain : null) ?? new TurnChainCache({ checkRate: opts.checkRate, onMismatch: (d) => mismatches.push(d) });
    const prefixCache = (opts.sameIsolate ? isolate.prefixCache : null) ?? new PrefixCache();
    Object.assign(isolate, { turnChain, prefixCache });
    if (state !== null && !opts.sameIsolate) {
      if (opts.tamper) state.text = state.text.replace("w", "W");
      if (opts.tamperTokens && state.tokens) state.tokens.hashes[0] = state.tokens.hashes[0]! ^ 1n;
      hydrate(state, history, body, model, { checkRate: opts.checkRate, turnChain, prefixCache, onMismatch: (d) => mismatches.push(d), partition: "" });
    }
    // The parse stage as the edge runs it: the messages the seeded entry holds are not read again.
    const found = turnChain.find(body, profile, "");
    const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    const chatReq = parseChatBody(body, DEFAULT_LIMITS, { reuse: turnChain.reusedMessages(found), layout: found?.layout ?? null, work });
    expect(JSON.stringify(chatReq), `turn ${i}`).toBe(JSON.stringify(parseChatBody(body, DEFAULT_LIMITS)));
    const renderedBefore = turnChain.renderedChars;
    const prompt = turnChain.prepare(chatReq, body, profile, "", { found, validated: true });
    const rendered = turnChain.renderedChars - renderedBefore;
    const encoded = prefixCache.encode(tok, prompt.text, model.blockSize, "");

    const full = opts.compare === false ? prompt : preparePrompt(chatReq, profile);
    const ids = opts.compare === false ? encoded.tokens() : tok.encode(full.text, "");
    expect(prompt.text, `turn ${i}`).toBe(full.text);
    expect(prompt.mediaParts).toEqual(full.mediaParts);
    expect(prompt.droppedParts).toEqual(full.droppedParts);
    expect(encoded.length).toBe(ids.length);
    expect(encoded.localHashes).toEqual(localBlockHashes(ids, model.blockSize));
    expect(encoded.tokens()).toEqual(ids);
    // The stored piece, its ids read from the prompt's (as the handler does) and encoded: the same piece.
    const stable = prompt.stable?.() ?? null;
    const promptTokens = encoded.idPieces && prompt.mediaParts.length === 0 ? { idPieces: encoded.idPieces, hashPieces: encoded.hashPieces } : null;
    const encodes = vi.spyOn(tok, "encode");
    const prompt_ = stable === null ? null : nextPiece(state, stable, INSTRUCTIONS, model, "", promptTokens);
    const pieceEncodes = encodes.mock.calls.filter(([t]) => t !== SPLIT_TOKEN).length;
    encodes.mockRestore();
    if (stable !== null) expect(prompt_, `turn ${i}`).toEqual(nextPiece(state, stable, INSTRUCTIONS, model, ""));
    // Its block hashes are the prompt's: given the prompt's hashes each with a bit flipped, the piece holds them flipped
    // (hashed again, it would hold the true ones). Null: no piece tokens, no prompt tokens or no full block.
    let hashesFromPrompt: boolean | null = null;
    if (stable !== null && prompt_?.tokens && promptTokens) {
      const own = hashesOf(prompt_);
      const flipped = hashesOf(nextPiece(state, stable, INSTRUCTIONS, model, "", { ...promptTokens, hashPieces: promptTokens.hashPieces.map((p) => p.map((h) => h ^ 1n)) }));
      if (own.length > 0) hashesFromPrompt = flipped.length === own.length && flipped.every((h, b) => h === (own[b]! ^ 1n));
    }
    perTurn.push({
      pieceEncodes,
      hashesFromPrompt,
      rendered,
      encoded: encoded.length - encoded.reusedTokens,
      reusedTokens: encoded.reusedTokens,
      tokens: ids.length,
      promptChars: full.text.length,
      reusedMessages: prompt.reusedMessages ?? 0,
      validatedMessages: work.validatedMessages,
      messages: chatReq.messages.length,
      mismatches: mismatches.length,
      seeded: state === null ? null : { messages: state.messages, chars: state.text.length, media: state.media.length, tokens: state.tokens?.count ?? null },
    });

    // The handler's record of this turn: its messages and its piece of the prompt state.
    // What prepare kept for this request (none after a failed check): a prefix of its prompt, with that prefix's media and dropped parts.
    if (stable !== null) {
      expect(full.text.startsWith(stable.text), `turn ${i}`).toBe(true);
      expect(stable.messages).toBeLessThan(chatReq.messages.length);
      expect(stable.media).toEqual(full.mediaParts.filter((p) => p.messageIndex < stable.messages));
      expect(stable.dropped).toEqual(full.droppedParts.filter((d) => d.messageIndex < stable.messages));
    }
    const output = inputToMessages(ResponseCreateSchema.parse({ model: model.id, input: turn.output }).input as InputItem[]);
    records.push(JSON.parse(JSON.stringify({ messages: [...inputMessages, ...output], prompt: prompt_ })) as Stored);
    recordBytes.push(new TextEncoder().encode(JSON.stringify(records.at(-1))).byteLength);
  }
  return { perTurn, records, recordBytes };
}

describe("stored conversations continue in a fresh isolate from their stored prompt state", () => {
  for (const model of MODELS) {
    it(`${model.templateId}: text, tools and an image — every turn equals the full path; the work stays with the last turn`, () => {
      for (const withImage of [false, true]) {
        const { perTurn, records } = converse(model, { withImage, checkRate: 1 });
        for (const [i, t] of perTurn.entries()) {
          expect(t.mismatches, `turn ${i}`).toBe(0);
          if (i === 0) continue;
          // The seeded entry was used: everything before the previous turn's query came from the store.
          expect(t.seeded, `turn ${i}`).not.toBeNull();
          expect(t.reusedMessages, `turn ${i}`).toBe(t.seeded!.messages);
          // Nor were they parsed: only the messages after the stored prefix were validated.
          expect(t.validatedMessages, `turn ${i}`).toBe(t.messages - t.seeded!.messages);
          if (t.seeded!.media === 0) {
            // And its tokens: only what follows the stored prefix was encoded.
            expect(t.reusedTokens, `turn ${i}`).toBe(t.seeded!.tokens);
            expect(t.encoded).toBe(t.tokens - t.seeded!.tokens!);
          } else expect(t.seeded!.tokens, "a prefix with media keeps no tokens (the media path encodes whole)").toBeNull();
        }
        // Records keep only their own turn: each piece of stable text is new text.
        for (const r of records.slice(1)) expect(r.prompt?.base, "a piece extends its parent").toBe(false);
        const last = perTurn.at(-1)!;
        if (!withImage) expect(last.reusedTokens).toBeGreaterThan(0.8 * last.tokens);
      }
    });
  }

  it("in the isolate that served the conversation, a stored piece's ids and block hashes come from the prompt's, not a second encode or hash", () => {
    for (const model of MODELS) {
      const { perTurn, records } = converse(model, { withImage: false, checkRate: 0, sameIsolate: true });
      expect(records.slice(1).every((r) => r.prompt?.tokens), model.templateId).toBe(true);
      expect(perTurn.map((t) => t.pieceEncodes), model.templateId).toEqual(perTurn.map(() => 0));
      // Pieces that add full blocks (a turn whose stable prefix ends before one adds none) hold the prompt's.
      const hashesRead = perTurn.map((t) => t.hashesFromPrompt);
      expect(hashesRead.filter((r) => r === true).length, model.templateId).toBeGreaterThanOrEqual(3);
      expect(hashesRead.filter((r) => r === false), model.templateId).toEqual([]);
    }
  });

  it("rendering on a continuation is bounded by the new turn (checks off): flat while the prompt grows", () => {
    const { perTurn } = converse(MODELS[1]!, { withImage: false, checkRate: 0 });
    // A fresh isolate without the store renders the whole prompt (and the stable prefix's tail once more).
    expect(perTurn[0]!.rendered).toBeGreaterThanOrEqual(perTurn[0]!.promptChars);
    // The template's fixed head (the tools' system block and the instructions) is rendered with each stand-in.
    const head = perTurn[1]!.seeded!.chars;
    for (const t of perTurn.slice(1)) {
      // What is rendered is what follows the stored prefix (the tail, then the next prefix's tail) and three heads, never the history.
      const after = t.promptChars - t.seeded!.chars;
      expect(t.rendered).toBeLessThanOrEqual(2 * after + 3 * head);
    }
    const last = perTurn.at(-1)!;
    expect(last.promptChars - last.seeded!.chars).toBeLessThan(0.25 * last.promptChars);
    expect(last.rendered).toBeLessThan(0.6 * last.promptChars);
  });

  it("a 100k-token conversation: every record within the 1 MiB cap, all of them together linear in the conversation", () => {
    // A ~65k-token document first (its rendering and blocks go into the next record's piece), then growing turns.
    const doc: Turn = { input: [{ role: "user", content: `Read this. ${words(11, 16_500)}` }], output: [say(words(12, 100))] };
    const more = Array.from({ length: 8 }, (_, k): Turn => ({ input: [{ role: "user", content: `Part ${k}. ${words(20 + k, 1_000)}` }], output: [say(words(40 + k, 200))] }));
    const { perTurn, records, recordBytes } = converse(MODELS[1]!, { withImage: false, checkRate: 0, turns: [doc, ...more], compare: false });
    const last = perTurn.at(-1)!;
    expect(last.tokens).toBeGreaterThan(100_000);
    for (const [i, bytes] of recordBytes.entries()) expect(bytes, `record ${i}`).toBeLessThan(MAX_STORED_RECORD_BYTES);
    // Each turn's text is kept about twice (its messages, then its rendering in the next record) plus 8 bytes a block (base64):
    // linear, where whole-conversation records would hold the document in every one of the nine.
    const total = recordBytes.reduce((a, b) => a + b, 0);
    expect(total).toBeLessThan(3 * last.promptChars);
    expect(records.at(-1)!.prompt!.tokens).not.toBeNull();
    expect(last.reusedTokens).toBe(last.seeded!.tokens);
  });

  it("stored tokens that differ from the tokenizer's are caught by the sampled check before seeding: logged, not seeded", () => {
    const { perTurn } = converse(MODELS[1]!, { withImage: false, checkRate: 1, tamperTokens: true });
    for (const t of perTurn.slice(1)) {
      expect(t.mismatches).toBe(1);
      // The rendering is still seeded (its own check passes); the tokens are encoded whole.
      expect(t.reusedMessages).toBe(t.seeded!.messages);
      expect(t.reusedTokens).toBe(0);
    }
  });

  it("a stored text that differs from the render is caught by the sampled full render: logged, dropped, the full prompt used", () => {
    const { perTurn } = converse(MODELS[1]!, { withImage: false, checkRate: 1, tamper: true });
    // Caught twice: the turn chain's render check, and the tokens (the stored ones are not the tampered text's).
    // The record then carries no piece, and the next turn's record starts anew (base).
    expect(perTurn[1]!.mismatches).toBe(2);
    expect(perTurn[2]!.seeded).toBeNull();
    expect(perTurn[3]!.mismatches).toBe(2);
  });
});
