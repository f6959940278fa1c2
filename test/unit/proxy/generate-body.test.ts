/**
 * The `/generate` body's chunks against JSON.stringify (the oracle): byte for byte the same JSON
 * as the body with `text` first, for texts that cross slice boundaries with surrogate pairs,
 * escapes and lone-free Unicode; and the fetch body made of the chunks carries exactly those bytes.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { bodyOfChunks, generateBodyParts } from "../../../src/proxy/generate-body.ts";
import { generateBodyChunks } from "../../helpers/generate-body-chunks.ts";
import type { EscapeWork } from "../../../src/util/json-escape.ts";
import { parseRecordingLiterals, type JsonLiteral } from "../../../src/util/json-scan.ts";
import type { GenerateRequestBody } from "../../../src/proxy/sglang-wire.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const concat = (chunks: readonly string[]): string => chunks.join("");

function body(text: string, extra: Partial<GenerateRequestBody> = {}): GenerateRequestBody {
  return { text, sampling_params: { max_new_tokens: 16 }, stream: false, rid: "r1", ...extra } as GenerateRequestBody;
}

describe("generateBodyChunks", () => {
  it("is JSON.stringify of the body with text first, whatever the text", () => {
    // Long runs of one unit so that slices of 8192 units land on every kind of boundary.
    const unit = fc.constantFrom("a", "é", "\n", '"', "\\", "\u2028", "😀", "中", "\u0001", "<|im_start|>");
    const textArb = fc.tuple(fc.array(fc.tuple(unit, fc.integer({ min: 1, max: 9000 })), { maxLength: 6 }), fc.string({ unit: "grapheme", maxLength: 50 })).map(([runs, tail]) => runs.map(([u, n]) => u.repeat(n)).join("") + tail);
    fc.assert(
      fc.property(textArb, fc.integer({ min: 0, max: 8191 }), (text, pad) => {
        const t = "x".repeat(pad) + text;
        const b = body(t);
        const { text: _, ...rest } = b;
        expect(concat(generateBodyChunks(b))).toBe(JSON.stringify({ text: t, ...rest }));
      }),
      { numRuns: 150, seed: 4242 },
    );
  });

  it("never splits a surrogate pair at a slice boundary, and handles an empty rest", () => {
    const t = "a".repeat(8191) + "😀" + "b";
    expect(JSON.parse(concat(generateBodyChunks(body(t)))).text).toBe(t);
    expect(concat(generateBodyChunks({ text: "hi" } as GenerateRequestBody))).toBe('{"text":"hi"}');
  });

  it("reusing the client's escaping of message texts gives the same bytes, found or not, in any order", () => {
    const unit = fc.constantFrom("a", "é", "\n", '"', "\\", "😀", "中", "<|im_start|>", "\u0001");
    const piece = fc.array(fc.tuple(unit, fc.integer({ min: 1, max: 3000 })), { minLength: 1, maxLength: 4 }).map((runs) => runs.map(([u, n]) => u.repeat(n)).join(""));
    fc.assert(
      fc.property(fc.array(piece, { minLength: 1, maxLength: 4 }), fc.array(fc.nat(3), { minLength: 1, maxLength: 6 }), fc.string({ maxLength: 40 }), (contents, order, glue) => {
        // The client's body (some texts sent with Python's \u escapes), and a prompt that uses the
        // texts in another order, twice, or not at all, with template text around them.
        const sent = contents.map((c, i) => (i % 2 ? JSON.stringify(c).replace(/[^\x00-\x7f]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`) : JSON.stringify(c)));
        const literals: JsonLiteral[] = [];
        parseRecordingLiterals(`{"messages":[${sent.map((l) => `{"role":"user","content":${l}}`).join(",")}]}`, new Set(["content"]), literals);
        const text = order.map((k) => `${glue}<|im_start|>user\n${contents[k % contents.length]}<|im_end|>`).join("\n");
        const b = body(text);
        const { text: _, ...rest } = b;
        expect(concat(generateBodyChunks(b, literals))).toBe(JSON.stringify({ text, ...rest }));
      }),
      { numRuns: 120, seed: 77 },
    );
  });

  it("a reused text is one part, not escaped again", () => {
    const long = "word ".repeat(1000) + "\n".repeat(10);
    const literals: JsonLiteral[] = [];
    parseRecordingLiterals(JSON.stringify({ messages: [{ role: "user", content: long }] }), new Set(["content"]), literals);
    const chunks = generateBodyChunks(body(`<|im_start|>user\n${long}<|im_end|>`), literals);
    expect(chunks).toContain(JSON.stringify(long).slice(1, -1));
  });

  it("with the turn chain's escaped pieces, the bytes are the same and only the text after them is escaped", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
    // Texts that need escaping (quotes, backslashes, controls, line separators) and surrogate pairs.
    const odd = (n: number) => `say "hi" \\ \t\u0001\u2028 😀 中 ${n} `.repeat(40);
    const messages: Record<string, unknown>[] = [{ role: "system", content: odd(0) }, { role: "user", content: odd(1) }];
    let escapedShare = 1;
    for (let turn = 0; turn < 5; turn++) {
      const bodyText = JSON.stringify({ model: "m", messages });
      const prompt = chain.prepare(parseChatBody(bodyText, DEFAULT_LIMITS), bodyText, profile, "");
      const work: EscapeWork = { escapedChars: 0 };
      const b = body(prompt.text);
      const { text: _, ...rest } = b;
      expect(concat(generateBodyChunks(b, [], prompt.pieces ?? null, work))).toBe(JSON.stringify({ text: prompt.text, ...rest }));
      if (turn >= 1) {
        expect(prompt.pieces?.stable.join("") + prompt.pieces!.rest).toBe(prompt.text);
        expect(work.escapedChars).toBe(prompt.pieces!.rest.length);
        expect(work.escapedChars).toBe(prompt.text.length - prompt.pieces!.chars);
      }
      escapedShare = work.escapedChars / prompt.text.length;
      messages.push({ role: "assistant", content: odd(10 + turn) }, { role: "user", content: `next ${turn} "q"` });
    }
    // The last turn escaped its new question and answer only (~1/6 of the prompt).
    expect(escapedShare).toBeLessThan(0.25);
  });

  it("a turn's own text is escaped once: the entries it stored go as their escaping, only what follows them is escaped again", async () => {
    const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
    const odd = (n: number) => `say "hi" \\ \t\u0001\u2028 😀 中 ${n} `.repeat(40);
    const call = (k: number) => ({ role: "assistant", content: "", tool_calls: [{ id: `call_${k}`, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/f${k}.ts` }) } }] });
    // A chat conversation (the entry through the new question) and an agent's steps (the entry through the tool result).
    const shapes: { first: Record<string, unknown>[]; next: (k: number) => Record<string, unknown>[] }[] = [
      { first: [{ role: "system", content: odd(0) }, { role: "user", content: odd(1) }], next: (k) => [{ role: "assistant", content: odd(10 + k) }, { role: "user", content: `next ${k} "q" é` }] },
      { first: [{ role: "system", content: "S" }, { role: "user", content: `task ${odd(2)}` }], next: (k) => [call(k), { role: "tool", tool_call_id: `call_${k}`, content: odd(20 + k) }] },
    ];
    for (const { first, next } of shapes) {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages = [...first];
      for (let turn = 0; turn < 4; turn++) {
        const bodyText = JSON.stringify({ model: "m", messages });
        const literals: JsonLiteral[] = [];
        const prompt = chain.prepare(parseChatBody(bodyText, DEFAULT_LIMITS, { literals }), bodyText, profile, "", { validated: true });
        const b = body(prompt.text);
        const work: EscapeWork = { escapedChars: 0 };
        const parts = generateBodyParts(b, literals, prompt.pieces ?? null, work);
        const expected = Buffer.from(concat(generateBodyChunks(b, literals, prompt.pieces ?? null)), "utf8");
        expect(Buffer.from(await bodyOfChunks(parts).arrayBuffer()).equals(expected)).toBe(true);
        if (turn >= 1) {
          const pieces = prompt.pieces!;
          // Only the generation prompt after the stored entry is escaped here.
          const own = pieces.restEscaped!;
          expect(own.chars).toBeGreaterThan(0);
          expect(own.chunks.join("")).toBe(JSON.stringify(pieces.rest.slice(0, own.chars)).slice(1, -1));
          expect(pieces.rest.slice(own.chars)).toBe("<|im_start|>assistant\n");
          expect(work.escapedChars).toBe(pieces.rest.length - own.chars);
        }
        messages.push(...next(turn));
      }
    }
  });

  it("with the chain's pieces as UTF-8 arrays, the fetch body carries the string chunks' bytes", async () => {
    // Non-ASCII, astral pairs, JSON escapes, line separators; some conversations sent escaped as Python's ensure_ascii does.
    const unit = fc.constantFrom("a", "é", "\n", '"', "\\", "\u2028", "😀", "中", "\u0001", "\t", "</s>", "<|im_end|>");
    const content = fc.array(fc.tuple(unit, fc.integer({ min: 1, max: 700 })), { minLength: 1, maxLength: 5 }).map((runs) => runs.map(([u, n]) => u.repeat(n)).join(""));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(content, content), { minLength: 2, maxLength: 4 }), fc.boolean(), async (turns, ensureAscii) => {
        const chain = new TurnChainCache({ checkRate: 0 });
        const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
        const messages: Record<string, unknown>[] = [{ role: "system", content: "S — 😀" }];
        let held = 0;
        for (let k = 0; k < turns.length; k++) {
          const [question, answer] = turns[k]!;
          messages.push({ role: "user", content: question });
          const json = JSON.stringify({ model: "m", messages });
          const bodyText = ensureAscii ? json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) : json;
          const prompt = chain.prepare(parseChatBody(bodyText, DEFAULT_LIMITS), bodyText, profile, "", { validated: true });
          const b = body(prompt.text);
          const parts = generateBodyParts(b, [], prompt.pieces ?? null);
          const expected = Buffer.from(concat(generateBodyChunks(b, [], prompt.pieces ?? null)), "utf8");
          expect(Buffer.from(await bodyOfChunks(parts).arrayBuffer()).equals(expected)).toBe(true);
          // Each held piece with non-ASCII text goes as its bytes (one array), the rest as strings.
          const arrays = parts.filter((p) => p instanceof Uint8Array).length;
          const stable = prompt.pieces?.stable ?? [];
          expect(arrays).toBeGreaterThanOrEqual(stable.filter((t) => /[^\x00-\x7f]/.test(t)).length);
          expect(arrays).toBeLessThanOrEqual(stable.length);
          if (prompt.pieces) {
            held++;
            // The first piece holds the system message's dash and emoji.
            expect(parts[1]).toBeInstanceOf(Uint8Array);
          }
          messages.push({ role: "assistant", content: answer });
        }
        expect(held).toBe(turns.length - 1);
      }),
      { numRuns: 40, seed: 99 },
    );
  });

  it("a long conversation of short turns goes in a few parts, short text pieces joined, with the same bytes", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
    // A long ASCII answer (a piece of its own, over the join's length) among short turns, and one non-ASCII turn (its bytes).
    const messages: Record<string, unknown>[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "q0" }];
    for (let turn = 1; turn <= 60; turn++) {
      const bodyText = JSON.stringify({ model: "m", messages });
      const prompt = chain.prepare(parseChatBody(bodyText, DEFAULT_LIMITS), bodyText, profile, "", { validated: true });
      const b = body(prompt.text);
      const parts = generateBodyParts(b, [], prompt.pieces ?? null);
      const expected = Buffer.from(concat(generateBodyChunks(b, [], prompt.pieces ?? null)), "utf8");
      expect(Buffer.from(await bodyOfChunks(parts).arrayBuffer()).equals(expected)).toBe(true);
      if (turn === 60) {
        const held = prompt.pieces!.bodyParts;
        expect(held.length).toBeGreaterThan(50);
        // The long answer, the non-ASCII turn's bytes and the short runs between them: a handful of parts.
        expect(parts.length).toBeLessThan(10);
        expect(parts.filter((p) => p instanceof Uint8Array)).toHaveLength(held.filter((p) => p instanceof Uint8Array).length);
      }
      const answer = turn === 20 ? `long ${"x".repeat(3000)}` : turn === 40 ? "é 😀" : `a${turn}`;
      messages.push({ role: "assistant", content: answer }, { role: "user", content: `q${turn} "quoted"` });
    }
  });

  it("a joined run of short pieces stops at 64 Ki characters, with the same bytes", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
    // Turn by turn (each a held piece of ~700 characters): ~140k characters of short pieces, two runs' worth and more.
    const messages: Record<string, unknown>[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "q0" }];
    let parts: ReturnType<typeof generateBodyParts> = [];
    for (let turn = 1; turn <= 200; turn++) {
      messages.push({ role: "assistant", content: `a${turn} ${"y".repeat(340)}` }, { role: "user", content: `q${turn} ${"z".repeat(340)}` });
      const bodyText = JSON.stringify({ model: "m", messages });
      const prompt = chain.prepare(parseChatBody(bodyText, DEFAULT_LIMITS), bodyText, profile, "", { validated: true });
      const b = body(prompt.text);
      parts = generateBodyParts(b, [], prompt.pieces ?? null);
      const expected = Buffer.from(concat(generateBodyChunks(b, [], prompt.pieces ?? null)), "utf8");
      expect(Buffer.from(await bodyOfChunks(parts).arrayBuffer()).equals(expected)).toBe(true);
    }
    const strings = parts.filter((p): p is string => typeof p === "string");
    expect(Math.max(...strings.map((p) => p.length))).toBeLessThan(64 * 1024 + 1024);
    expect(strings.filter((p) => p.length >= 64 * 1024).length).toBeGreaterThanOrEqual(2);
  });

  it("the fetch body carries the same UTF-8 bytes, as often as it is sent", async () => {
    const chunks = generateBodyChunks(body("q".repeat(20_000) + "é😀\ud800" + "中".repeat(9000)));
    const blob = bodyOfChunks(chunks);
    const expected = Buffer.from(concat(chunks), "utf8");
    for (let k = 0; k < 2; k++) expect(Buffer.from(await new Response(blob).arrayBuffer()).equals(expected)).toBe(true);
  });
});
