import fc from "fast-check";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { preparePrompt, renderTemplate, type ModelFamily, type TemplateId } from "../../../src/prompt/index.ts";
import { PrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { DEFAULT_TURN_CHECK_RATE, scanBodyLayout, sharedTurnChain, TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { PieceText } from "../../../src/util/piece-text.ts";
import { expectSamePrompt } from "../../helpers/same-prompt.ts";

beforeAll(() => initHashing());

const PROFILES: { family: ModelFamily; templateId: TemplateId }[] = [
  { family: "qwen2_5_vl", templateId: "qwen2vl" },
  { family: "qwen3_vl", templateId: "qwen3vl-instruct" },
  { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
];
const BLOCK = 16;
const TOOLS = [{ type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" }, limit: { type: "number", default: 0.0 } } } } }];

type Msg = Record<string, unknown>;
interface Conversation {
  name: string;
  /** Extra top-level members of every request. */
  extra: Record<string, unknown>;
  /** Requests that find their history (a first request of one message stores nothing: nothing comes before its query). */
  hits: number;
  /** Each turn: what is appended (the assistant's answer to the previous request, then the new input). */
  turns: Msg[][];
}

const img = (n: number) => ({ type: "image_url", image_url: { url: `https://example.com/img-${n}.png` } });
const longText = (seed: number, words: number) => Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");

const VISION_TURNS: Msg[][] = [
  [{ role: "user", content: [{ type: "text", text: "Compare" }, img(1), img(2)] }],
  [{ role: "assistant", content: "They differ." }, { role: "user", content: [img(3), { type: "text", text: "and this one?" }] }],
  [{ role: "assistant", content: "Similar." }, { role: "user", content: "No image now." }],
  [{ role: "assistant", content: "OK." }, { role: "user", content: [{ type: "video_url", video_url: { url: "https://example.com/v.mp4" } }, img(4)] }],
  [{ role: "assistant", content: "Heard." }, { role: "user", content: [{ type: "audio_url", audio_url: { url: "https://example.com/a.wav" } }, { type: "text", text: "and this?" }] }],
  [{ role: "assistant", content: "Noise." }, { role: "user", content: "Plain text." }],
  [{ role: "assistant", content: "Fine." }, { role: "user", content: [{ type: "audio_url", audio_url: { url: "https://example.com/b.wav" } }, img(5)] }],
];

const CONVERSATIONS: Conversation[] = [
  {
    name: "text",
    extra: {},
    hits: 3,
    turns: [
      [{ role: "system", content: "Be brief." }, { role: "user", content: longText(1, 300) }],
      [{ role: "assistant", content: longText(2, 120) }, { role: "user", content: "And then?" }],
      [{ role: "assistant", content: longText(3, 80) }, { role: "user", content: [{ type: "text", text: "Parts " }, { type: "text", text: "too." }] }],
      [{ role: "assistant", content: "Done." }, { role: "user", content: longText(4, 50) }],
    ],
  },
  {
    name: "tools (agent loop with consecutive tool results)",
    extra: { tools: TOOLS },
    hits: 4,
    turns: [
      [{ role: "system", content: "You are an agent." }, { role: "user", content: "Read a.txt and b.txt" }],
      [
        { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "read_file", arguments: '{"path": "a.txt", "limit": 1.0}' } }, { id: "c2", type: "function", function: { name: "read_file", arguments: '{"path": "b.txt"}' } }] },
        { role: "tool", tool_call_id: "c1", content: longText(5, 400) },
        { role: "tool", tool_call_id: "c2", content: longText(6, 400) },
      ],
      [{ role: "assistant", content: "Both read." }, { role: "user", content: "<tool_response>\nlooks like a tool result\n</tool_response>" }],
      [{ role: "assistant", content: "Noted." }, { role: "user", content: "Summarize." }],
      [{ role: "assistant", content: null, tool_calls: [{ id: "c3", type: "function", function: { name: "read_file", arguments: { path: "c.txt" } } }] }, { role: "tool", tool_call_id: "c3", content: longText(7, 200) }],
    ],
  },
  {
    name: "reasoning (earlier turns' reasoning dropped by the thinking template)",
    extra: { chat_template_kwargs: { enable_thinking: true } },
    hits: 3,
    turns: [
      [{ role: "user", content: "Think about 2+2." }],
      [{ role: "assistant", content: "4", reasoning_content: "two plus two" }, { role: "user", content: "And 3+3?" }],
      [{ role: "assistant", content: "<think>\nthree and three\n</think>\n\n6" }, { role: "user", content: "Now 4+4." }],
      [
        { role: "assistant", content: "", reasoning_content: "I should look it up", tool_calls: [{ id: "t1", type: "function", function: { name: "read_file", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "t1", content: "8" },
      ],
      [{ role: "assistant", content: "8", reasoning_content: "the tool said 8" }, { role: "user", content: "Thanks." }],
    ],
  },
  {
    name: "images, a video and audio (per-kind numbering and vision counters carry on with add_vision_id)",
    extra: { chat_template_kwargs: { add_vision_id: true } },
    hits: 5,
    turns: VISION_TURNS,
  },
  {
    // Without add_vision_id the stand-in for earlier items holds none (template.ts itemCountsIrrelevant).
    name: "images, a video and audio without add_vision_id",
    extra: {},
    hits: 5,
    turns: VISION_TURNS,
  },
  {
    // qwen3vl-instruct numbers items in user and tool messages only (template.ts countsItemsOf): the later image is "Picture 1".
    name: "an image in the system message, then one in a later query, with add_vision_id",
    extra: { chat_template_kwargs: { add_vision_id: true } },
    hits: 2,
    turns: [
      [{ role: "system", content: [{ type: "text", text: "Be brief." }, img(1)] }, { role: "user", content: "q1" }],
      [{ role: "assistant", content: "a1" }, { role: "user", content: "q2" }],
      [{ role: "assistant", content: "a2" }, { role: "user", content: [img(2), { type: "text", text: "q3" }] }],
    ],
  },
  {
    name: "an image in an assistant message, then one in a later query, with add_vision_id",
    extra: { chat_template_kwargs: { add_vision_id: true } },
    hits: 2,
    turns: [
      [{ role: "user", content: "q1" }],
      [{ role: "assistant", content: [{ type: "text", text: "a1" }, img(1)] }, { role: "user", content: "q2" }],
      [{ role: "assistant", content: "a2" }, { role: "user", content: "q3" }],
      [{ role: "assistant", content: "a3" }, { role: "user", content: [img(2), { type: "text", text: "q4" }] }],
    ],
  },
];

function bodyOf(messages: Msg[], extra: Record<string, unknown>): string {
  return JSON.stringify({ model: "m", ...extra, messages, max_tokens: 8 });
}

describe("turn chain: the incremental prompt equals the full path at every turn", () => {
  for (const profile of PROFILES) {
    for (const conv of CONVERSATIONS) {
      it(`${profile.templateId}: ${conv.name}`, () => {
        const chain = new TurnChainCache({ checkRate: 0 });
        const prefix = new PrefixCache();
        const byPieces = new PrefixCache();
        const tok = getQwenTokenizer(profile.family);
        const messages: Msg[] = [];
        let reused = 0;
        for (const turn of conv.turns) {
          messages.push(...turn);
          const body = bodyOf(messages, conv.extra);
          const req = parseChatBody(body, DEFAULT_LIMITS);
          const full = preparePrompt(req, profile);
          const inc = chain.prepare(req, body, profile, "");
          expectSamePrompt(inc, full);
          // Token ids and block hashes as the edge computes them (prefix cache) against a fresh encode.
          const encoded = prefix.encode(tok, inc.text, BLOCK, "");
          const ids = tok.encode(full.text, "");
          expect(encoded.tokens()).toEqual(ids);
          expect(encoded.localHashes).toEqual(localBlockHashes(ids, BLOCK));
          // The same through the chain's pieces, never joined (with their identities: a piece found equal once is not compared again): the text, the /generate pieces and the prefix cache's hit.
          if (inc.pieces) {
            expect(inc.pieces.stable.join("") + inc.pieces.rest).toBe(full.text);
            expect(inc.pieces.bodyParts.map((p) => (typeof p === "string" ? p : new TextDecoder().decode(p))).join("")).toBe(JSON.stringify(inc.pieces.stable.join("")).slice(1, -1));
            // The entries this turn stored: their escaping is the start of its own part's.
            const own = inc.pieces.restEscaped;
            if (own) expect(own.chunks.join("")).toBe(JSON.stringify(inc.pieces.rest.slice(0, own.chars)).slice(1, -1));
            const pieced = byPieces.encode(tok, new PieceText([...inc.pieces.stable, inc.pieces.rest], inc.pieces.ids), BLOCK, "");
            expect(pieced.tokens()).toEqual(ids);
            expect(pieced.localHashes).toEqual(encoded.localHashes);
          }
          reused = chain.stats().reusedMessages;
        }
        expect(chain.stats().hits).toBe(conv.hits);
        expect(reused).toBeGreaterThan(0);
        expect(chain.stats().mismatches).toBe(0);
      });
    }
  }

  it("random conversations with images and videos in every role render as the full path under add_vision_id", () => {
    // A seeded generator: system, user, assistant and tool messages each may carry items, so a
    // template that numbers items in some roles only (countsItemsOf) meets items in the others.
    let state = 7;
    const next = () => (state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32;
    const items = (n: number): Msg[] => Array.from({ length: Math.floor(next() * 3) }, (_, i) => (next() < 0.7 ? img(n * 10 + i) : { type: "video_url", video_url: { url: `https://example.com/v-${n}-${i}.mp4` } }));
    const withItems = (role: string, text: string, n: number, more: Msg = {}): Msg => ({ role, content: next() < 0.3 ? text : [{ type: "text", text }, ...items(n)], ...more });
    for (const profile of PROFILES) {
      for (const extra of [{ chat_template_kwargs: { add_vision_id: true } }, { tools: TOOLS, chat_template_kwargs: { add_vision_id: true } }]) {
        const chain = new TurnChainCache({ checkRate: 0 });
        for (let conversation = 0; conversation < 6; conversation++) {
          const messages: Msg[] = [...(next() < 0.5 ? [withItems("system", "S", 0)] : []), withItems("user", "q0", 1)];
          for (let n = 2; n < 12; n++) {
            const x = next();
            if (x < 0.4) messages.push(withItems("assistant", `a${n}`, n, { tool_calls: [{ id: `c${n}`, type: "function", function: { name: "read_file", arguments: "{}" } }] }), withItems("tool", `o${n}`, n + 100, { tool_call_id: `c${n}` }));
            else messages.push(withItems("assistant", `a${n}`, n), ...(x < 0.5 ? [withItems("system", `s${n}`, n + 200)] : []), withItems("user", `q${n}`, n + 300));
            const body = bodyOf(messages, extra);
            const req = parseChatBody(body, DEFAULT_LIMITS);
            expectSamePrompt(chain.prepare(req, body, profile, ""), preparePrompt(req, profile));
          }
        }
        expect(chain.stats().hits).toBeGreaterThan(30);
      }
    }
  });

  describe("agent loop: steps after the last query extend the entry through the previous step", () => {
    // One step: the assistant's tool call (with reasoning on odd steps), then one or two tool results.
    const step = (k: number): Msg[] => [
      { role: "assistant", content: k % 3 === 0 ? "" : `Step ${k}.`, ...(k % 2 === 1 ? { reasoning_content: `why step ${k}` } : {}), tool_calls: [{ id: `c${k}`, type: "function", function: { name: "read_file", arguments: `{"path": "f${k}.txt"}` } }] },
      { role: "tool", tool_call_id: `c${k}`, content: longText(100 + k, 600) },
      ...(k % 2 === 0 ? [{ role: "tool", tool_call_id: `c${k}`, content: longText(200 + k, 300) }] : []),
    ];
    const extra = { tools: TOOLS, chat_template_kwargs: { add_vision_id: true } };
    const first: Msg[] = [{ role: "system", content: "You are an agent." }, { role: "user", content: [img(1), { type: "text", text: "Fix the bug shown." }] }];

    for (const profile of PROFILES) {
      it(`${profile.templateId}: every step equals the full path, renders only the recent steps, and a new query falls back to the query entry`, () => {
        const chain = new TurnChainCache({ checkRate: 0 });
        const checked = new TurnChainCache({ checkRate: 1 });
        const prefix = new PrefixCache();
        const tok = getQwenTokenizer(profile.family);
        const messages: Msg[] = [...first];
        const same = (extraMembers: Record<string, unknown> = extra) => {
          const body = bodyOf(messages, extraMembers);
          const req = parseChatBody(body, DEFAULT_LIMITS);
          const full = preparePrompt(req, profile);
          const before = chain.renderedChars;
          const inc = chain.prepare(req, body, profile, "");
          expect(inc.text).toBe(full.text);
          expect(inc.mediaParts).toEqual(full.mediaParts);
          expect(inc.droppedParts).toEqual(full.droppedParts);
          const ids = tok.encode(full.text, "");
          const encoded = prefix.encode(tok, inc.pieces ? new PieceText([...inc.pieces.stable, inc.pieces.rest], inc.pieces.ids) : inc.text, BLOCK, "");
          expect(encoded.tokens()).toEqual(ids);
          expect(encoded.localHashes).toEqual(localBlockHashes(ids, BLOCK));
          expect(checked.prepare(req, body, profile, "").text).toBe(full.text);
          return { inc, rendered: chain.renderedChars - before };
        };
        same();
        for (let k = 1; k <= 9; k++) {
          const appended = step(k);
          messages.push(...appended);
          const { inc, rendered } = same();
          const size = JSON.stringify(appended).length;
          // The new step once (its tail; the entry through its last tool result needs no render of
          // its own), plus the stand-in's header and tools: not the previous step's tool results.
          expect(rendered).toBeLessThan(size + 2000);
          // From the second step on, the entry through the previous step's last tool result serves.
          if (k >= 2) expect(inc.reusedMessages).toBe(messages.length - appended.length);
        }
        // A late result of the last call (a tool message, or a function one: the template's tool
        // role): the entry through the step's result closed its block, so it may not serve; the
        // one through the step before does.
        for (const late of [{ role: "tool", tool_call_id: "c9", content: "late" }, { role: "Function", name: "read_file", content: "late" }]) {
          messages.push(late);
          expect(same().inc.reusedMessages).toBe(messages.length - 3);
          messages.pop();
        }
        // A new query after the loop: the thinking template now drops the loop's reasoning, so no provisional entry may serve it.
        messages.push({ role: "assistant", content: "Fixed.", reasoning_content: "tests pass" }, { role: "user", content: "Now explain." });
        expect(same().inc.reusedMessages).toBe(1);
        // A final assistant message is rendered as a user query too (no continue_final_message); the
        // turn that asked "Now explain." ended with it, so its entry reaches through it.
        messages.push({ role: "assistant", content: "", tool_calls: [{ id: "d1", type: "function", function: { name: "read_file", arguments: "{}" } }] }, { role: "tool", tool_call_id: "d1", content: "x" }, { role: "assistant", content: "Explained." });
        expect(same().inc.reusedMessages).toBe(messages.length - 3);
        // Then a tool result in its place: the entry before the relabelled message does not start a query, the one through "Now explain." serves it.
        messages.pop();
        messages.push({ role: "tool", tool_call_id: "d1", content: "y" });
        expect(same().inc.reusedMessages).toBe(messages.length - 3);
        expect(chain.stats().mismatches).toBe(0);
        expect(checked.stats().mismatches).toBe(0);
        expect(checked.stats().checks).toBeGreaterThan(8);
      });
    }
  });

  it("a user message of an image or video and a tool-response-wrapped text is a query, as the thinking template reads it", () => {
    // render_content prints the item where it stands (before or after the text), so the template's
    // last-query scan finds this message a query and drops the loop's earlier reasoning: an entry
    // stored from it is not one for requests without it (a later step of the loop, which keeps
    // that reasoning).
    const call = (k: number) => ({ role: "assistant", content: "", ...(k === 1 ? { reasoning_content: "why" } : {}), tool_calls: [{ id: `c${k}`, type: "function", function: { name: "read_file", arguments: "{}" } }] });
    const loop: Msg[] = [{ role: "user", content: "Fix it." }, call(1), { role: "tool", content: "r1" }, call(2), { role: "tool", content: "r2" }];
    const text = { type: "text", text: "<tool_response>x</tool_response>" };
    const video = { type: "video_url", video_url: { url: "https://example.com/v.mp4" } };
    for (const profile of PROFILES) for (const content of [[img(1), text], [video, text], [text, img(1)]]) {
      const chain = new TurnChainCache({ checkRate: 0 });
      const wrapped: Msg = { role: "user", content };
      for (const messages of [[...loop, wrapped], [...loop, call(3), { role: "tool", content: "r3" }]]) {
        const body = bodyOf(messages, { tools: TOOLS });
        const req = parseChatBody(body, DEFAULT_LIMITS);
        expect(chain.prepare(req, body, profile, "").text).toBe(preparePrompt(req, profile).text);
      }
    }
  });

  it("parallel tool results sent one request at a time go on from the entry through their calls", () => {
    const call = (id: string) => ({ id, type: "function", function: { name: "read_file", arguments: "{}" } });
    const history: Msg[] = [{ role: "system", content: "agent" }, { role: "user", content: "Fix it." }, { role: "assistant", content: "", tool_calls: [call("c0")] }, { role: "tool", content: "r0" }];
    const calls: Msg = { role: "assistant", content: "", tool_calls: [call("c1"), call("c2"), call("c3")] };
    // Results as `tool` or as the legacy `function` role, which the templates render alike.
    for (const profile of PROFILES) for (const result of [{ role: "tool" }, { role: "function", name: "read_file" }]) {
      const chain = new TurnChainCache({ checkRate: 0 });
      const reused: (number | undefined)[] = [];
      const next: Msg[] = [{ role: "assistant", content: "", tool_calls: [call("c4")] }, { role: "tool", content: "r4" }];
      for (const results of [0, 1, 2, 3, 4]) {
        const answered = Array.from({ length: Math.min(results, 3) }, (_, i) => ({ ...result, content: `r${i + 1}` }));
        const messages = results === 0 ? history : [...history, calls, ...answered, ...(results === 4 ? next : [])];
        const body = bodyOf(messages, { tools: TOOLS });
        const req = parseChatBody(body, DEFAULT_LIMITS);
        const out = chain.prepare(req, body, profile, "");
        expect(out.text).toBe(preparePrompt(req, profile).text);
        reused.push(out.reusedMessages);
      }
      // The first result goes on from the step before; the second and third from the calls' message
      // (5 messages), not again from there; the next step from the afterTool entry the third stored
      // under it (8 messages).
      expect(reused.slice(1)).toEqual([4, 5, 5, 8]);
    }
  });

  it("parallel tool results sent one request at a time hold about what the same loop holds sending them together", () => {
    // An entry through a result that other results follow is never gone on from: only the calls'
    // entry is stored then, so the chain keeps each result once (in its step's afterTool entry).
    const loop = (perRequest: number) => {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages: Msg[] = [{ role: "system", content: "agent" }, { role: "user", content: "Fix it." }];
      for (let k = 1; k <= 12; k++) {
        messages.push({ role: "assistant", content: "", tool_calls: [0, 1, 2].map((i) => ({ id: `c${k}_${i}`, type: "function", function: { name: "read_file", arguments: `{"p":"${k}"}` } })) });
        for (let i = 0; i < 3; i++) {
          messages.push({ role: "tool", tool_call_id: `c${k}_${i}`, content: `output ${k}.${i} `.repeat(200) });
          if ((i + 1) % perRequest !== 0) continue;
          const body = bodyOf(messages, { tools: TOOLS });
          const req = parseChatBody(body, DEFAULT_LIMITS);
          expect(chain.prepare(req, body, PROFILES[1]!, "").text).toBe(preparePrompt(req, PROFILES[1]!).text);
        }
      }
      return chain.stats().bytes;
    };
    const together = loop(3);
    expect(loop(1)).toBeLessThan(together * 1.1);
  });

  it("a changed earlier message, tool list or kwarg is never reused", () => {
    const profile = PROFILES[2]!;
    const chain = new TurnChainCache({ checkRate: 0 });
    const first: Msg[] = [{ role: "user", content: "Q1" }, { role: "assistant", content: "A1", reasoning_content: "r1" }, { role: "user", content: "Q2" }];
    chain.prepare(parseChatBody(bodyOf(first, {}), DEFAULT_LIMITS), bodyOf(first, {}), profile, "");
    const variants: [Msg[], Record<string, unknown>][] = [
      [[{ role: "user", content: "Q1!" }, ...first.slice(1), { role: "assistant", content: "A2" }, { role: "user", content: "Q3" }], {}],
      [[...first, { role: "assistant", content: "A2" }, { role: "user", content: "Q3" }], { tools: TOOLS }],
      [[...first, { role: "assistant", content: "A2" }, { role: "user", content: "Q3" }], { chat_template_kwargs: { enable_thinking: false } }],
    ];
    for (const [messages, extra] of variants) {
      const body = bodyOf(messages, extra);
      const req = parseChatBody(body, DEFAULT_LIMITS);
      const before = chain.stats().hits;
      expect(chain.prepare(req, body, profile, "").text).toBe(preparePrompt(req, profile).text);
      expect(chain.stats().hits).toBe(before);
    }
  });

  it("a forced mismatch is found by the sampled check, logged, and the full result is used", () => {
    const profile = PROFILES[1]!;
    // A renderer that corrupts the incremental path's renders of more than one new message (the
    // stand-in first; the tail's skeleton too): the first request stores a sound entry, the second
    // reuses it wrongly.
    const faulty = (id: TemplateId, input: Parameters<typeof renderTemplate>[1]) => {
      const out = renderTemplate(id, input);
      const first = input.messages[0];
      return input.messages.length > 2 && first?.["role"] === "user" && first["content"] === "" ? out.replace("<|im_start|>assistant\n", "<|im_start|>assistant\n(corrupted) ") : out;
    };
    const mismatches: unknown[] = [];
    const chain = new TurnChainCache({ checkRate: 1, render: faulty, onMismatch: (d) => mismatches.push(d) });
    const history: Msg[] = [{ role: "user", content: "Q1" }, { role: "assistant", content: "A1" }, { role: "user", content: "Q2" }];
    const body1 = bodyOf(history, {});
    chain.prepare(parseChatBody(body1, DEFAULT_LIMITS), body1, profile, "");
    const next = [...history, { role: "assistant", content: "A2" }, { role: "user", content: "Q3" }];
    const body2 = bodyOf(next, {});
    const req2 = parseChatBody(body2, DEFAULT_LIMITS);
    const out = chain.prepare(req2, body2, profile, "");
    expect(out.text).toBe(preparePrompt(req2, profile).text);
    expect(mismatches).toEqual([{ templateId: "qwen3vl-instruct", messages: 5, reusedMessages: 2 }]);
    expect(chain.stats().mismatches).toBe(1);
    // Neither the entry it came from nor anything built from the wrong result is used again.
    const third = [...next, { role: "assistant", content: "A3" }, { role: "user", content: "Q4" }];
    const body3 = bodyOf(third, {});
    const req3 = parseChatBody(body3, DEFAULT_LIMITS);
    expect(chain.prepare(req3, body3, profile, "").text).toBe(preparePrompt(req3, profile).text);
    expect(chain.stats().hits).toBe(1);
  });

  it("a mismatch stops tail skeletons for the template: later turns of that shape, unchecked, are rendered, not filled from the same wrong skeleton", () => {
    const profile = PROFILES[1]!;
    // A chat turn's skeleton render ([assistant, user] placeholders) comes out wrong; every other render is the library's.
    const faulty = (id: TemplateId, input: Parameters<typeof renderTemplate>[1]) => {
      const out = renderTemplate(id, input);
      // (Stores render messages after empty slots: `m` may be undefined.)
      const placeholders = input.messages.filter((m) => typeof m?.["content"] === "string" && m["content"].includes("\u0001kvedge-tail-"));
      return placeholders.length === 2 ? `${out}(corrupted)` : out;
    };
    const mismatches: unknown[] = [];
    let check = true;
    const chain = new TurnChainCache({ render: faulty, random: () => (check ? 0 : 1), onMismatch: (d) => mismatches.push(d) });
    const send = (messages: Msg[]): string => {
      const body = bodyOf(messages, {});
      const req = parseChatBody(body, DEFAULT_LIMITS);
      return chain.prepare(req, body, profile, "").text;
    };
    const turns = (q: string, n: number): Msg[][] => {
      const out: Msg[][] = [[{ role: "user", content: `${q}0` }, { role: "assistant", content: `${q}-a0` }, { role: "user", content: `${q}1` }]];
      for (let t = 1; t < n; t++) out.push([...out[t - 1]!, { role: "assistant", content: `${q}-a${t}` }, { role: "user", content: `${q}${t + 1}` }]);
      return out;
    };
    const a = turns("A", 5);
    const expected = (messages: Msg[]) => preparePrompt(parseChatBody(bodyOf(messages, {}), DEFAULT_LIMITS), profile).text;
    send(a[0]!);
    // The first hit's tail is [user, assistant, user] (after the entry before the first query); the next one's a chat turn's, checked and wrong.
    expect(send(a[1]!)).toBe(expected(a[1]!));
    expect(mismatches).toHaveLength(0);
    expect(send(a[2]!)).toBe(expected(a[2]!));
    expect(mismatches).toHaveLength(1);
    const hits = chain.stats().hits;
    // From now on nothing is checked: the same shape, in this and another conversation, must not come from that skeleton again.
    check = false;
    for (const messages of [a[3]!, a[4]!, ...turns("B", 3)]) expect(send(messages)).toBe(expected(messages));
    expect(chain.stats().hits - hits).toBeGreaterThanOrEqual(2);
    expect(mismatches).toHaveLength(1);
  });

  it("a large tool list's stand-in and skeleton stay memoized together: at most one render a turn, none once warm", () => {
    const profile = PROFILES[1]!;
    let renders = 0;
    const counting = (id: TemplateId, input: Parameters<typeof renderTemplate>[1]) => {
      renders++;
      return renderTemplate(id, input);
    };
    const chain = new TurnChainCache({ checkRate: 0, render: counting });
    // The scope (its tools' text) takes most of the stand-in memo's bound, once in the key and once rendered.
    const tools = [{ type: "function", function: { name: "f", description: "d".repeat(400_000), parameters: { type: "object" } } }];
    const messages: Msg[] = [{ role: "user", content: "Q0" }];
    const perTurn: number[] = [];
    for (let t = 1; t <= 7; t++) {
      const body = bodyOf(messages, { tools });
      const req = parseChatBody(body, DEFAULT_LIMITS);
      const before = renders;
      expect(chain.prepare(req, body, profile, "").text).toBe(preparePrompt(req, profile).text);
      perTurn.push(renders - before);
      messages.push({ role: "assistant", content: `A${t}` }, { role: "user", content: `Q${t}` });
    }
    expect(chain.stats().hits).toBe(5);
    // Turn 2 builds the memo (stand-in, skeleton) and stores; later turns render at most their store's new cut, warm ones nothing.
    expect(perTurn.slice(2).every((n) => n <= 1)).toBe(true);
    expect(perTurn.slice(4)).toEqual([0, 0, 0]);
  });

  it("stays within its byte budget, evicting least recently used conversations", () => {
    const profile = PROFILES[1]!;
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 300_000 });
    for (let c = 0; c < 60; c++) {
      const messages: Msg[] = [{ role: "user", content: longText(c, 2000) }, { role: "assistant", content: "ok" }, { role: "user", content: "next" }];
      const body = bodyOf(messages, {});
      chain.prepare(parseChatBody(body, DEFAULT_LIMITS), body, profile, "");
      expect(chain.stats().bytes).toBeLessThanOrEqual(300_000);
    }
    expect(chain.stats().evictions).toBeGreaterThan(0);
  });

  it("the isolate's chain takes the configured check rate even after a first use without one (the cache-budget listing)", () => {
    expect(sharedTurnChain().checkRate).toBe(DEFAULT_TURN_CHECK_RATE);
    expect(sharedTurnChain(0.25).checkRate).toBe(0.25);
    expect(sharedTurnChain().checkRate).toBe(0.25);
  });

  it("scans a body's members and message elements as JSON.parse reads them", () => {
    const body = ' { "model" : "m", "messages" : [ {"role":"user","content":"a \\" ] , }"} ,{"role":"assistant","content":[1,{"x":"}"}]} ], "messages2": [] } ';
    const layout = scanBodyLayout(body)!;
    const parsed = JSON.parse(body) as { messages: unknown[] };
    expect(layout.messages.map(([s, e]) => JSON.parse(body.slice(s, e)))).toEqual(parsed.messages);
    expect([...layout.members.keys()]).toEqual(["model", "messages", "messages2"]);
  });

  it("ends on any text, and on JSON finds the elements JSON.parse keeps (the last messages member)", () => {
    const token = fc.constantFrom("{", "}", "[", "]", ",", ":", " ", '"messages"', '"a"', '"\\""', "1", "null", '{"role":"user"}');
    fc.assert(
      fc.property(fc.array(token, { maxLength: 40 }), (tokens) => {
        const text = `{"messages":[${tokens.join("")}`;
        const layout = scanBodyLayout(text);
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          return;
        }
        const messages = (parsed as { messages?: unknown }).messages;
        if (!Array.isArray(messages)) return;
        expect(layout?.messages.map(([s, e]) => JSON.parse(text.slice(s, e)))).toEqual(messages);
      }),
      { numRuns: 3000, seed: 99 },
    );
  });

  it("a key JSON cannot decode ends the scan (the parse answers it), it does not throw", () => {
    expect(scanBodyLayout('{"\\q": 1, "messages": [{"role":"user","content":"hi"}]}')).toBeNull();
    expect(scanBodyLayout('{"messages": [{"r\\u006fle":"user","content":"hi"}]}')?.messages).toHaveLength(1);
  });

  it("a lookup reads the new messages' roles, not their texts", () => {
    const profile = PROFILES[1]!;
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "system", content: "S" }, { role: "user", content: longText(1, 100) }, { role: "assistant", content: "A" }];
    const json = (messages: Msg[]) => messages.map((m) => JSON.stringify(m)).join(",");
    // Stores the entry of the first three messages (the text before this request's query).
    const stored = JSON.stringify({ model: "m", messages: [...history, { role: "user", content: "Q" }] });
    chain.prepare(parseChatBody(stored, DEFAULT_LIMITS), stored, profile, "");
    // After them a long message whose role comes after its text, written twice: JSON.parse keeps the
    // last (assistant), so it opens no query and the three-message entry is not used.
    const odd = `{"content":${JSON.stringify(longText(2, 20_000))},"role":"user","role":"assistant"}`;
    const body = `{"model":"m","messages":[${json(history)},${odd},{"content":${JSON.stringify(longText(3, 20_000))},"role":"user"}]}`;
    const parse = vi.spyOn(JSON, "parse");
    let parsedChars = 0;
    try {
      expect(chain.find(body, profile, "")?.hit).toBeNull();
      for (const [text] of parse.mock.calls) parsedChars += String(text).length;
    } finally {
      parse.mockRestore();
    }
    expect(parsedChars, "characters JSON.parse read to find the roles").toBeLessThan(100);
    // As the last message, an assistant's may be a query (preprocessing makes it one): the three-message entry is used.
    expect(chain.find(`{"model":"m","messages":[${json(history)},${odd}]}`, profile, "")?.hit?.node.messages).toBe(3);
  });
});
