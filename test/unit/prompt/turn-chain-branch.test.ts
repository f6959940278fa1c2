/**
 * Branches after a long query (src/prompt/turn-chain.ts storeFrom's cut after the last long query
 * of a stored span): a history of one long message answered differently each time (regenerated or
 * edited answers, a document's second turn) reuses that message instead of parsing, copying and
 * storing it again, and every prompt equals the whole path's (preparePrompt).
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import type { ParseWork } from "../../../src/api/validate.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { preparePrompt, type ModelFamily, type TemplateId } from "../../../src/prompt/index.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { expectSamePrompt } from "../../helpers/same-prompt.ts";

beforeAll(() => initHashing());

type Msg = Record<string, unknown>;
const PROFILES: { family: ModelFamily; templateId: TemplateId }[] = [
  { family: "qwen2_5_vl", templateId: "qwen2vl" },
  { family: "qwen3_vl", templateId: "qwen3vl-instruct" },
  { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
];
const TOOLS = [{ type: "function", function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" } } } } }];
const longText = (seed: number, words: number) => Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");
const img = (n: number) => ({ type: "image_url", image_url: { url: `https://example.com/img-${n}.png` } });
/** ~130k characters: the edge bench's single-history case at ~30k tokens. */
const DOCUMENT = longText(1, 26_000);

function bodyOf(messages: Msg[], extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: "m", ...extra, messages, max_tokens: 8 });
}

/** Sends each request through a chain and a fully checked one; each prompt must equal the whole path's. Returns reusedMessages per request. */
function sendAll(profile: { family: ModelFamily; templateId: TemplateId }, requests: Msg[][], extra: Record<string, unknown> = {}): { reused: number[]; chain: TurnChainCache } {
  const chain = new TurnChainCache({ checkRate: 0 });
  const checked = new TurnChainCache({ checkRate: 1 });
  const reused: number[] = [];
  for (const messages of requests) {
    const body = bodyOf(messages, extra);
    const req = parseChatBody(body, DEFAULT_LIMITS);
    const full = preparePrompt(req, profile);
    const inc = chain.prepare(req, body, profile, "");
    expectSamePrompt(inc, full);
    if (inc.pieces) expect(inc.pieces.stable.join("") + inc.pieces.rest).toBe(full.text);
    expect(checked.prepare(req, body, profile, "").text).toBe(full.text);
    reused.push(inc.reusedMessages ?? 0);
  }
  expect(chain.stats().mismatches).toBe(0);
  expect(checked.stats().mismatches).toBe(0);
  return { reused, chain };
}

describe("turn chain: a long query ends an entry of its own", () => {
  for (const profile of PROFILES) {
    it(`${profile.templateId}: one long message answered differently each time reuses it, held once`, () => {
      const history: Msg[] = [{ role: "system", content: "You are helpful." }, { role: "user", content: DOCUMENT }];
      const requests = [history, ...[0, 1, 2, 3].map((i) => [...history, { role: "assistant", content: longText(10 + i, 60) }, { role: "user", content: `Question ${i}?` }])];
      const chain = new TurnChainCache({ checkRate: 0 });
      const bytes: number[] = [];
      const reused: number[] = [];
      for (const messages of requests) {
        const body = bodyOf(messages);
        const req = parseChatBody(body, DEFAULT_LIMITS);
        const inc = chain.prepare(req, body, profile, "");
        expect(inc.text).toBe(preparePrompt(req, profile).text);
        reused.push(inc.reusedMessages ?? 0);
        bytes.push(chain.stats().bytes);
      }
      // The 2nd request finds the system message; from the 3rd on, system and document.
      expect(reused).toEqual([0, 1, 2, 2, 2]);
      // The document is held once: later requests add their answer and question only.
      expect(bytes[4]! - bytes[1]!).toBeLessThan(DOCUMENT.length / 4);
    });

    it(`${profile.templateId}: reasoning, tool loops and a final assistant message after the long query equal the whole path`, () => {
      const extra = { tools: TOOLS, chat_template_kwargs: { enable_thinking: true } };
      const history: Msg[] = [{ role: "system", content: "You are an agent." }, { role: "user", content: DOCUMENT }];
      const call = (k: number, reasoning: boolean): Msg => ({ role: "assistant", content: "", ...(reasoning ? { reasoning_content: `why ${k}` } : {}), tool_calls: [{ id: `c${k}`, type: "function", function: { name: "read_file", arguments: `{"path": "f${k}"}` } }] });
      const requests: Msg[][] = [
        history,
        [...history, { role: "assistant", content: "A first answer.", reasoning_content: "first thoughts" }, { role: "user", content: "More?" }],
        // A loop after the document (no later query: the calls keep their reasoning).
        [...history, call(1, true), { role: "tool", tool_call_id: "c1", content: longText(3, 300) }],
        [...history, call(1, true), { role: "tool", tool_call_id: "c1", content: longText(3, 300) }, call(2, false), { role: "tool", tool_call_id: "c2", content: "ok" }],
        // Then a query after it: the loop's reasoning is dropped.
        [...history, call(1, true), { role: "tool", tool_call_id: "c1", content: longText(3, 300) }, { role: "assistant", content: "<think>\nhm\n</think>\n\nDone.", reasoning_content: "done" }, { role: "user", content: "Thanks." }],
        // A final assistant message (rendered as a query) and one continued (continue_final_message).
        [...history, { role: "assistant", content: "Answer as the last message." }],
        [...history, { role: "assistant", content: "Another answer." }, { role: "user", content: "Next?" }],
      ];
      const { reused } = sendAll(profile, requests, extra);
      // The loop's steps extend entries after the document's (the second step the one through the
      // first step's tool result); a query after the loop falls back to the document's.
      expect(reused.slice(2)).toEqual([2, 4, 2, 2, 2]);
      const continued = sendAll(profile, [...requests.slice(0, 2), [...history, { role: "assistant", content: "To be contin" }]], { ...extra, continue_final_message: true, add_generation_prompt: false });
      expect(continued.reused[1]).toBe(1);
    });

    it(`${profile.templateId}: images before and in the long query keep their counters (add_vision_id)`, () => {
      const extra = { chat_template_kwargs: { add_vision_id: true } };
      const history: Msg[] = [{ role: "user", content: [img(1), { type: "text", text: "Look." }] }, { role: "assistant", content: "Seen." }, { role: "user", content: [img(2), { type: "text", text: DOCUMENT.slice(0, 20_000) }, img(3)] }];
      const requests = [history, ...[0, 1, 2].map((i) => [...history, { role: "assistant", content: `Answer ${i}.` }, { role: "user", content: [img(4 + i), { type: "text", text: `And ${i}?` }] }])];
      const { reused } = sendAll(profile, requests, extra);
      // The stand-in carries the three images' counters; the entry through the long query serves from the 3rd request on.
      expect(reused).toEqual([0, 2, 3, 3]);
    });

    it(`${profile.templateId}: a whole conversation sent at once cuts after its last long query; short and tool-wrapped messages do not`, () => {
      const start: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: longText(2, 2_000) }, { role: "assistant", content: "One." }, { role: "user", content: "Short question." }];
      const requests: Msg[][] = [
        [...start, { role: "assistant", content: "Two." }, { role: "user", content: "Third?" }],
        // Another answer to the short question: the entry through the long message (2 messages) serves it.
        [...start, { role: "assistant", content: "Two, again." }, { role: "user", content: "Third?" }],
        [...start.slice(0, 2), { role: "assistant", content: "Other one." }, { role: "user", content: "Fourth?" }],
      ];
      expect(sendAll(profile, requests).reused).toEqual([0, 2, 2]);
      // A long tool-wrapped user message is no query, a short query is below the threshold: neither ends an entry.
      const wrapped = `<tool_response>\n${longText(4, 2_000)}\n</tool_response>`;
      for (const content of [wrapped, "A short first question."]) {
        const first: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content }];
        const branches = [1, 2].map((i) => [...first, { role: "assistant", content: `Answer ${i}.` }, { role: "user", content: `Question ${i}?` }]);
        expect(sendAll(profile, branches).reused).toEqual([0, 0]);
      }
    });
  }

  describe("random branching conversations equal the whole path", () => {
    type Kind = "long" | "short" | "image" | "wrapped" | "answer" | "reasoning" | "call";
    const KINDS: Kind[] = ["long", "short", "image", "wrapped", "answer", "reasoning", "call"];
    /** The messages of one step; `v` varies its text (a different answer, an edited message). */
    const stepOf = (kind: Kind, v: number, at: number): Msg[] => {
      const seed = 100 * at + v;
      switch (kind) {
        case "long":
          return [{ role: "user", content: longText(seed, 900 + v) }];
        case "short":
          return [{ role: "user", content: `Short ${seed}?` }];
        case "image":
          return [{ role: "user", content: [img(seed), { type: "text", text: longText(seed, 1_000) }] }];
        case "wrapped":
          return [{ role: "user", content: `<tool_response>\n${longText(seed, 900)}\n</tool_response>` }];
        case "answer":
          return [{ role: "assistant", content: v % 2 === 0 ? `Answer ${seed}.` : `<think>\nhm ${seed}\n</think>\n\nAnswer ${seed}.` }];
        case "reasoning":
          return [{ role: "assistant", content: `Reasoned ${seed}.`, reasoning_content: `because ${seed}` }];
        case "call":
          return [
            { role: "assistant", content: "", ...(v % 2 === 1 ? { reasoning_content: `call ${seed}` } : {}), tool_calls: [{ id: `c${seed}`, type: "function", function: { name: "read_file", arguments: `{"path": "f${seed}"}` } }] },
            { role: "tool", tool_call_id: `c${seed}`, content: longText(seed, 200) },
          ];
      }
    };
    const step = fc.record({ kind: fc.constantFrom(...KINDS), v: fc.nat(3) });
    const plan = fc.record({
      system: fc.boolean(),
      base: fc.array(step, { minLength: 1, maxLength: 7 }),
      requests: fc.array(fc.record({ len: fc.nat(), changeAt: fc.nat() }), { minLength: 2, maxLength: 6 }),
    });
    for (const profile of PROFILES) {
      it(`${profile.templateId}`, () => {
        fc.assert(
          fc.property(plan, ({ system, base, requests }) => {
            const extra = { tools: TOOLS, chat_template_kwargs: { add_vision_id: true, enable_thinking: true } };
            const sequences = requests.map(({ len, changeAt }, k) => {
              const n = 1 + (len % base.length);
              const from = changeAt % (n + 1);
              const messages: Msg[] = system ? [{ role: "system", content: "Be brief." }] : [];
              base.slice(0, n).forEach((st, at) => messages.push(...stepOf(st.kind, at >= from ? st.v + k : st.v, at)));
              return messages;
            });
            sendAll(profile, sequences, extra);
          }),
          { numRuns: 150, seed: 9 },
        );
      });
    }
  });

  it("the edge's parse reads the long message once: later branches parse only their new messages", () => {
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
    const model = config.models[0]!;
    const profile = { family: model.family, templateId: model.templateId };
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "system", content: "You are helpful." }, { role: "user", content: DOCUMENT }];
    const parsedChars: number[] = [];
    const reused: number[] = [];
    for (let i = -1; i < 4; i++) {
      const messages = i < 0 ? history : [...history, { role: "assistant", content: longText(20 + i, 60) }, { role: "user", content: `Question ${i}?` }];
      const body = JSON.stringify({ model: model.id, messages, max_tokens: 8 });
      const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
      const parsed = parseChatTurn(body, config, "", { work }, chain);
      const out = chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
      expect(out.text).toBe(preparePrompt(parseChatBody(body, DEFAULT_LIMITS), profile).text);
      parsedChars.push(work.parsedChars);
      reused.push(out.reusedMessages ?? 0);
    }
    expect(reused).toEqual([0, 1, 2, 2, 2]);
    for (const n of parsedChars.slice(2)) expect(n).toBeLessThan(2_000);
    expect(chain.stats().bytes).toBeLessThan(4 * DOCUMENT.length);
  });
});

describe("turn chain: entries around a long query", () => {
  const profile = PROFILES[2]!;
  const S: Msg = { role: "system", content: "sys" };
  const L: Msg = { role: "user", content: longText(2, 2000) };
  /** reusedMessages and the stable prefix's message count per request, each prompt checked against the whole path. */
  function run(requests: Msg[][], extras: Record<string, unknown>[] = []): { reused: number; stable: number | null }[] {
    const chain = new TurnChainCache({ checkRate: 0 });
    return requests.map((messages, i) => {
      const body = bodyOf(messages, extras[i] ?? {});
      const req = parseChatBody(body, DEFAULT_LIMITS);
      const inc = chain.prepare(req, body, profile, "");
      expect(inc.text).toBe(preparePrompt(req, profile).text);
      return { reused: inc.reusedMessages ?? 0, stable: inc.stable?.().messages ?? null };
    });
  }

  it("a continued final message right after the long query reuses the entry before it", () => {
    const cont = { continue_final_message: true, add_generation_prompt: false };
    const out = run([[S, L], [S, L, { role: "assistant", content: "a1" }, { role: "user", content: "u2" }], [S, L, { role: "assistant", content: "partial" }]], [{}, {}, cont]);
    expect(out[2]!.reused).toBe(1);
  });

  it("the stable prefix reaches the entry before a long query, as without the cut", () => {
    const call = { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] };
    // A whole conversation first, then a tool loop after the long query: the hit is the query's own entry.
    const loop = run([[S, L, { role: "assistant", content: "a1" }, { role: "user", content: "u2" }], [S, L, call, { role: "tool", tool_call_id: "c1", content: "r" }]]);
    expect(loop[1]).toEqual({ reused: 2, stable: 1 });
    // A long query inside a stored span, then a tool loop after it: the stable prefix ends right before it.
    const turns: Msg[] = [S, { role: "user", content: "q1" }, { role: "assistant", content: "a1" }, { role: "user", content: "q2" }];
    const span = run([turns, [...turns, { role: "assistant", content: "a2" }, L, { role: "assistant", content: "a3" }, { role: "user", content: "q4" }], [...turns, { role: "assistant", content: "a2" }, L, call, { role: "tool", tool_call_id: "c1", content: "r" }]]);
    expect(span[2]).toEqual({ reused: 6, stable: 5 });
  });
});
