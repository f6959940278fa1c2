/**
 * The tool-call, reasoning, constraint and logprob translation against SGLang's own goldens. Cases
 * marked "golden" are copied from sgl-project/sglang tests or derived by hand from its source:
 * - test/registered/unit/function_call/test_qwen25_detector.py (TestQwen25Detector),
 * - test/srt/test_reasoning_parser.py (TestQwen3Detector, TestReasoningParser),
 * - python/sglang/srt/function_call/utils.py get_json_schema_constraint (forced-call schema),
 * - python/sglang/srt/entrypoints/openai/utils.py to_openai_style_logprobs + serving_chat.py
 *   _process_logprobs_tokens (logprob shape).
 * Python's `json.dumps` text is written out literally (", " / ": " separators, ensure_ascii).
 */
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import type { ToolDefinition } from "../../../src/api/openai-schema.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { ChoiceOutput, chatOutputPlan, finishChoiceText, modelParsers, requiresReasoning, type StreamDelta } from "../../../src/proxy/chat-output.ts";
import { createChatStreamCore } from "../../../src/proxy/chat-stream.ts";
import { buildGenerateBody } from "../../../src/proxy/generate-request.ts";
import { LogprobMetaSchema, toChoiceLogprobs } from "../../../src/proxy/logprobs.ts";
import { ReasoningStream, splitReasoning } from "../../../src/proxy/reasoning.ts";
import { forcedToolCallSchema } from "../../../src/proxy/tool-calls/constraint.ts";
import { parsePyJson, pyJsonDumps } from "../../../src/proxy/tool-calls/json.ts";
import { callsOfBlock, parseQwenToolCalls, QwenToolCallStream, type ToolCallDelta } from "../../../src/proxy/tool-calls/qwen25.ts";
import { pyStrip } from "../../../src/util/py-str.ts";

const tool = (name: string, parameters?: Record<string, unknown>): ToolDefinition => ({
  type: "function",
  function: { name, description: undefined, parameters, strict: false },
});
// test_qwen25_detector.py setUp: get_weather(city, unit) and search(query)
const TOOLS = [
  tool("get_weather", { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } }, required: ["city"] }),
  tool("search", { type: "object", properties: { query: { type: "string" } }, required: ["query"] }),
];

/** Feeds chunks; returns content, names in order, and per index the concatenated arguments. */
function streamAll(chunks: readonly string[], tools = TOOLS) {
  const s = new QwenToolCallStream(tools);
  let content = "";
  const calls: ToolCallDelta[] = [];
  for (const c of chunks) {
    const r = s.push(c);
    content += r.content;
    calls.push(...r.calls);
  }
  const end = s.finish();
  content += end.content;
  calls.push(...end.calls);
  const names = calls.filter((c) => c.name !== undefined).map((c) => c.name);
  const args: string[] = [];
  for (const c of calls) args[c.index] = (args[c.index] ?? "") + c.arguments;
  return { content, names, args, calls };
}

describe("qwen25 tool calls, non-stream (golden: test_qwen25_detector.py)", () => {
  it("single call: name, json.dumps arguments, empty content", () => {
    const r = parseQwenToolCalls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Beijing"}}\n</tool_call>', TOOLS);
    expect(r.calls).toEqual([{ name: "get_weather", arguments: '{"city": "Beijing"}' }]);
    expect(r.content).toBe("");
  });

  it("normal text before the call is stripped (test_normal_text_before_tool_call)", () => {
    const r = parseQwenToolCalls('Let me check the weather. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>', TOOLS);
    expect(r.content).toBe("Let me check the weather.");
    expect(r.calls).toHaveLength(1);
  });

  it("parallel calls in order (test_parallel_tool_calls)", () => {
    const text =
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Beijing"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "search", "arguments": {"query": "restaurants"}}\n</tool_call>';
    expect(parseQwenToolCalls(text, TOOLS).calls).toEqual([
      { name: "get_weather", arguments: '{"city": "Beijing"}' },
      { name: "search", arguments: '{"query": "restaurants"}' },
    ]);
  });

  it("a block that does not parse is skipped (test_malformed_json_is_skipped)", () => {
    const text = '<tool_call>\n{not valid json}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "books"}}\n</tool_call>';
    expect(parseQwenToolCalls(text, TOOLS).calls).toEqual([{ name: "search", arguments: '{"query": "books"}' }]);
  });

  it("no markup, or no surviving call: the whole text stays content (function_call_parser.py parse_non_stream)", () => {
    expect(parseQwenToolCalls("The weather is nice today.", TOOLS)).toEqual({ content: "The weather is nice today.", calls: [] });
    const bad = 'Sure <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>';
    expect(parseQwenToolCalls(bad, TOOLS)).toEqual({ content: bad, calls: [] });
    // bot_token is "<tool_call>\n": without the newline there is no call (test_has_tool_call_requires_newline_after_tag)
    expect(parseQwenToolCalls('<tool_call>{"name": "search"}', TOOLS).calls).toEqual([]);
  });

  it("arguments are Python json.dumps text: ensure_ascii=False, number lexemes kept, parameters preferred", () => {
    const text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "杭州", "n": 1.0, "e": 1e2, "big": 12345678901234567890}}\n</tool_call>';
    expect(parseQwenToolCalls(text, TOOLS).calls[0]!.arguments).toBe('{"city": "杭州", "n": 1.0, "e": 100.0, "big": 12345678901234567890}');
    const viaParams = '<tool_call>\n{"name": "search", "parameters": {"query": "x"}}\n</tool_call>';
    expect(parseQwenToolCalls(viaParams, TOOLS).calls[0]!.arguments).toBe('{"query": "x"}');
    const none = '<tool_call>\n{"name": "search"}\n</tool_call>';
    expect(parseQwenToolCalls(none, TOOLS).calls[0]!.arguments).toBe("{}");
  });

  it("arguments Python dumps as Infinity/NaN are sent in Python's text (json.dumps allow_nan, as SGLang sends them)", () => {
    for (const [v, py] of [["1E400", "Infinity"], ["-1e999", "-Infinity"], ["NaN", "NaN"], ["Infinity", "Infinity"], ["-Infinity", "-Infinity"]]) {
      const text = `<tool_call>\n{"name": "search", "arguments": {"query": "x", "n": [${v}]}}\n</tool_call>`;
      expect(parseQwenToolCalls(text, TOOLS).calls, v).toEqual([{ name: "search", arguments: `{"query": "x", "n": [${py}]}` }]);
    }
    // Tiny and negative-zero numbers: kept, in Python's text.
    expect(parseQwenToolCalls('<tool_call>\n{"name": "search", "arguments": {"x": 1.0e-7, "y": -0.0}}\n</tool_call>', TOOLS).calls[0]!.arguments).toBe('{"x": 1e-07, "y": -0.0}');
  });
});

describe("qwen25 tool calls, streaming (golden: test_qwen25_detector.py streaming tests)", () => {
  it("chunked single call reconstructs the payload (test_streaming_single_tool_call_chunked)", () => {
    const r = streamAll(["<tool_", 'call>\n{"name": "get_weather",', ' "arguments": {"city": "Beijing"', "}}\n</tool_call>"]);
    expect(r.names).toEqual(["get_weather"]);
    expect(JSON.parse(r.args[0]!)).toEqual({ city: "Beijing" });
    expect(r.content).toBe("");
  });

  it("text then a call (test_streaming_text_then_tool_call)", () => {
    const r = streamAll(["I'll look that up. ", '<tool_call>\n{"name": "get_weather",', ' "arguments": {"city": "Tokyo", "unit": "celsius"', "}}\n</tool_call>"]);
    // The space before the block is not sent: the non-stream answer strips it (SGLang's stream sends it).
    expect(r.content).toBe("I'll look that up.");
    expect(JSON.parse(r.args[0]!)).toEqual({ city: "Tokyo", unit: "celsius" });
  });

  it("a partial <tool_call> tail is held back, never leaked (test_streaming_partial_bot_token_*)", () => {
    const s = new QwenToolCallStream(TOOLS);
    expect(s.push("I think <tool")).toEqual({ content: "I think", calls: [] });
    expect(s.push("s> are")).toEqual({ content: " <tools> are", calls: [] }); // not a block: the held text goes on
    const s2 = new QwenToolCallStream(TOOLS);
    expect(s2.push("hello <tool_").content).toBe("hello");
    const r = s2.push('call>\n{"name": "search", "arguments": {"query": "hi"}}\n</tool_call>');
    expect(r.calls.filter((c) => c.name).map((c) => c.name)).toEqual(["search"]);
  });

  it("a call goes out whole when its block ends: name and complete arguments in one delta (deliberate difference)", () => {
    const s = new QwenToolCallStream(TOOLS);
    expect(s.push('<tool_call>\n{"name": "search",').calls).toEqual([]);
    expect(s.push(' "arguments": {"query": "x"').calls).toEqual([]);
    expect(s.push("}}\n</tool_").calls).toEqual([]);
    expect(s.push("call>")).toEqual({ content: "", calls: [{ index: 0, name: "search", arguments: '{"query": "x"}' }] });
    expect(s.push("\n")).toEqual({ content: "", calls: [] });
    expect(s.finish()).toEqual({ content: "", calls: [] });
  });

  it("a block that is no call is never sent as one: broken, cut off, cut by a stop string, unknown tool (text as it is)", () => {
    const cases = [
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>', // broken after the name
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', // end of output (EOS or max_tokens) mid-value
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "', // a stop string cut the value
      '<tool_call>\n{"name": "get_weather", "argu', // max_tokens inside the block
      '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', // no such tool: closing tag kept, as non-stream keeps it
      '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n', // stop string "</tool_call>", or max_tokens before the end
      '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}</tool_call>', // no newline before the end tag
      '<tool_call>\n{"name": "search", "arguments": {"query": "x"}} x\n</tool_call>', // text after the JSON
      '<tool_call>\nnot json\n</tool_call>', // known early: sent as it streams
    ];
    for (const text of cases) {
      for (const chunks of [[text], [...text]]) {
        const r = streamAll(chunks);
        expect(r.calls, text).toEqual([]);
        expect(r.content, text).toBe(text);
      }
      expect(parseQwenToolCalls(text, TOOLS), text).toEqual({ content: text, calls: [] });
    }
  });

  it("two parallel calls at every split point equal the non-stream result (indices 0 and 1)", () => {
    const text =
      'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "search", "arguments": {"query": "Paris \\"events\\""}}\n</tool_call>';
    const whole = parseQwenToolCalls(text, TOOLS);
    for (let cut = 0; cut <= text.length; cut++) {
      const r = streamAll([text.slice(0, cut), text.slice(cut)]);
      expect(r.names, `cut ${cut}`).toEqual(["get_weather", "search"]);
      expect(r.args.map((a) => JSON.parse(a))).toEqual(whole.calls.map((c) => JSON.parse(c.arguments)));
      expect(r.content.trim()).toBe(whole.content);
    }
    // token by token (one character per frame): ASCII args as the exact non-stream text, one delta per call
    const byChar = streamAll([...text]);
    expect(byChar.args).toEqual(whole.calls.map((c) => c.arguments));
    expect(byChar.calls.map((c) => c.index)).toEqual([0, 1]);
  });

  it("read as the non-stream parse reads the whole: duplicate keys, blocks ended only by newline + tag, text after a call", () => {
    const same = (text: string) => {
      const whole = parseQwenToolCalls(text, TOOLS);
      for (const chunks of [[text], [...text]]) {
        const r = streamAll(chunks);
        expect(r.calls.map((c) => [c.name, JSON.parse(c.arguments)]), text).toEqual(whole.calls.map((c) => [c.name, JSON.parse(c.arguments)]));
        if (whole.calls.length === 0) expect(r.content, text).toBe(text);
        else expect(r.content.trim(), text).toBe(whole.content);
      }
    };
    // Python's json.loads keeps the last of two equal keys.
    same('<tool_call>\n{"name": "nope", "name": "search", "arguments": {"query": "q"}}\n</tool_call>');
    // The first block runs to the first "\n</tool_call>": it swallows the second, and no call parses.
    same('<tool_call>\n{"name": "search"}</tool_call>\n<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>');
    // After a call, other text and blocks that are no call are not sent (the non-stream content is the text before the first call).
    same('Sure. <tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>\nDone <tool_call>\n{"name": "nope"}\n</tool_call> bye');
  });

  it("an unknown tool or broken JSON falls back to content", () => {
    expect(streamAll(['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>']).content).toContain('"nope"');
    const broken = streamAll(["<tool_call>\n{not json"]);
    expect(broken.content).toBe("<tool_call>\n{not json");
    expect(broken.names).toEqual([]);
  });
});

describe("forced tool calls (tool_choice required / named)", () => {
  it("schema as SGLang builds it (utils.py get_json_schema_constraint)", () => {
    expect(forcedToolCallSchema(TOOLS, { type: "function", function: { name: "search" } }, true)).toEqual({
      type: "array",
      minItems: 1,
      items: { properties: { name: { type: "string", enum: ["search"] }, parameters: TOOLS[1]!.function.parameters }, required: ["name", "parameters"] },
    });
    const req = forcedToolCallSchema([tool("noargs")], "required", false)!;
    expect(req).toEqual({
      type: "array",
      minItems: 1,
      items: { type: "object", anyOf: [{ properties: { name: { type: "string", enum: ["noargs"] }, parameters: { type: "object", properties: {} } }, required: ["name", "parameters"] }] },
      maxItems: 1,
    });
    expect(forcedToolCallSchema(TOOLS, "auto", true)).toBeNull();
  });

  it("without a tool-call parser the schema goes to sampling_params.json_schema as json.dumps text, unless response_format already constrains", () => {
    const body = (extra: Record<string, unknown>) =>
      buildGenerateBody(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f" } }], ...extra })), { text: "p" });
    expect(body({ tool_choice: "required" }).sampling_params.json_schema).toBe(
      '{"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [{"properties": {"name": {"type": "string", "enum": ["f"]}, "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]}]}}',
    );
    expect(body({ tool_choice: "required", response_format: { type: "json_object" } }).sampling_params.json_schema).toBe('{"type": "object"}');
    expect(body({ tool_choice: "auto" }).sampling_params.json_schema).toBeUndefined();
  });

  it("with the qwen25 parser a forced call is constrained in the native <tool_call> format (function_call_parser.py get_legacy_structural_tag, at_least_one)", () => {
    const tools = [
      { type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { x: { type: "integer" } } } } },
      { type: "function", function: { name: "g" } },
    ];
    const params = (extra: Record<string, unknown>) =>
      buildGenerateBody(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools, ...extra })), { text: "p", toolCallParser: "qwen25" }).sampling_params;
    const f = '{"begin": "<tool_call>\\n{\\"name\\":\\"f\\", \\"arguments\\":", "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}, "end": "}\\n</tool_call>"}';
    const g = '{"begin": "<tool_call>\\n{\\"name\\":\\"g\\", \\"arguments\\":", "schema": {}, "end": "}\\n</tool_call>"}';
    expect(params({ tool_choice: "required" }).structural_tag).toBe(`{"type": "structural_tag", "structures": [${f}, ${g}], "triggers": ["<tool_call>"], "at_least_one": true}`);
    expect(params({ tool_choice: { type: "function", function: { name: "g" } } }).structural_tag).toBe(`{"type": "structural_tag", "structures": [${g}], "triggers": ["<tool_call>"], "at_least_one": true}`);
    expect(params({ tool_choice: "required" }).json_schema).toBeUndefined();
    // The forced output is the model's markup, read by the same parser as any other answer.
    const plan = chatOutputPlan(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools: TOOLS, tool_choice: "required" })), modelParsers({ templateId: "qwen3vl-instruct" }));
    const out = finishChoiceText(plan, '<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>', "stop", 151645);
    expect(out.tool_calls?.map((c) => c.function)).toEqual([{ name: "search", arguments: '{"query": "a"}' }]);
    expect(out.finishType).toBe("tool_calls");
  });
});

describe("reasoning (golden: test_reasoning_parser.py, reasoning_parser.py)", () => {
  it("qwen3 non-stream", () => {
    expect(splitReasoning("<think>Let me think about this problem</think>The answer is 42.", false)).toEqual({ reasoning: "Let me think about this problem", content: "The answer is 42." });
    expect(splitReasoning("Direct answer without thinking.", false)).toEqual({ reasoning: "", content: "Direct answer without thinking." });
    expect(splitReasoning("<think></think>Just the answer.", false)).toEqual({ reasoning: "", content: "Just the answer." });
  });

  it("qwen3-thinking: output starts inside reasoning; truncated output is all reasoning", () => {
    expect(splitReasoning("I think this is the answer</think>The final answer is 42.", true)).toEqual({ reasoning: "I think this is the answer", content: "The final answer is 42." });
    expect(splitReasoning("Still thinking", true)).toEqual({ reasoning: "Still thinking", content: "" });
  });

  it("streaming (test_parse_stream_chunk)", () => {
    const s = new ReasoningStream(false);
    expect(s.push("<think>")).toEqual({ reasoning: "", content: "" });
    expect(s.push("thinking...")).toEqual({ reasoning: "thinking...", content: "" });
    expect(s.push("</think>answer")).toEqual({ reasoning: "", content: "answer" });
    const held = new ReasoningStream(true, false);
    expect(held.push("a b")).toEqual({ reasoning: "", content: "" });
    expect(held.push(" c </think>x")).toEqual({ reasoning: "a b c ", content: "x" });
  });

  it("unstreamed reasoning (stream_reasoning false) is held in work linear in its length (characters searched, counted)", () => {
    const { includes, indexOf } = String.prototype;
    let searched = 0;
    const count = function (this: string, from?: number) {
      searched += this.length - Math.max(0, from ?? 0);
    };
    const spies = [
      vi.spyOn(String.prototype, "includes").mockImplementation(function (this: string, search: string, from?: number) {
        count.call(this, from);
        return includes.call(this, search, from);
      }),
      vi.spyOn(String.prototype, "indexOf").mockImplementation(function (this: string, search: string, from?: number) {
        count.call(this, from);
        return indexOf.call(this, search, from);
      }),
    ];
    const s = new ReasoningStream(true, false);
    let total = 0;
    let end: { reasoning: string; content: string };
    try {
      for (let i = 0; i < 20_000; i++) {
        const d = `step ${i % 10} <thi`.slice(0, 8 + (i % 4));
        total += d.length;
        expect(s.push(d)).toEqual({ reasoning: "", content: "" });
      }
      total += 13;
      end = s.push("</think>done.");
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
    expect(end.content).toBe("done.");
    expect(end.reasoning.length).toBeGreaterThan(150_000);
    // Each delta is searched with a few held characters; searching all that was held, per delta,
    // would be ~20 000 × 100 000 characters.
    expect(searched).toBeLessThan(4 * total);
  });

  it("plan: the thinking template forces reasoning; enable_thinking off stops the qwen3 parser forcing it", () => {
    const req = (extra: Record<string, unknown>) => parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], ...extra }));
    expect(modelParsers({ templateId: "qwen3vl-thinking" })).toEqual({ toolCallParser: "qwen25", reasoningParser: "qwen3-thinking" });
    expect(modelParsers({ templateId: "qwen3vl-instruct" }).reasoningParser).toBeNull();
    expect(chatOutputPlan(req({}), { toolCallParser: null, reasoningParser: "qwen3-thinking" }).reasoning).toEqual({ force: true, stream: true });
    expect(chatOutputPlan(req({ chat_template_kwargs: { enable_thinking: false } }), { toolCallParser: null, reasoningParser: "qwen3" }).reasoning).toEqual({ force: false, stream: true });
    expect(chatOutputPlan(req({ separate_reasoning: false }), { toolCallParser: null, reasoningParser: "qwen3" }).reasoning).toBeNull();
  });

  it("require_reasoning follows the parser and enable_thinking, not separate_reasoning (serving_chat.py _get_reasoning_from_request)", () => {
    const req = (extra: Record<string, unknown>) => parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], ...extra }));
    const thinking = { toolCallParser: null, reasoningParser: "qwen3-thinking" as const };
    const qwen3 = { toolCallParser: null, reasoningParser: "qwen3" as const };
    expect(requiresReasoning(req({ separate_reasoning: false }), thinking)).toBe(true);
    expect(requiresReasoning(req({ separate_reasoning: false }), qwen3)).toBe(true);
    expect(requiresReasoning(req({ chat_template_kwargs: { enable_thinking: false } }), qwen3)).toBe(false);
    // Python's `.get("enable_thinking", True) is True`: an explicit null is not True.
    expect(requiresReasoning(req({ chat_template_kwargs: { enable_thinking: null } }), qwen3)).toBe(false);
    expect(requiresReasoning(req({ chat_template_kwargs: { other: 1 } }), qwen3)).toBe(true);
    expect(requiresReasoning(req({ chat_template_kwargs: { enable_thinking: false } }), thinking)).toBe(true);
    expect(requiresReasoning(req({}), { toolCallParser: null, reasoningParser: null })).toBe(false);
  });
});

describe("reasoning then tool calls, finish_reason (serving_chat.py _build_chat_response / stream)", () => {
  const plan = chatOutputPlan(
    parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "search" } }] })),
    { toolCallParser: "qwen25", reasoningParser: "qwen3-thinking" },
  );
  const text = 'Need to search.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>';

  it("non-stream: reasoning split, call parsed, stop → tool_calls with matched_stop cleared", () => {
    const m = finishChoiceText(plan, text, "stop", 151645);
    expect(m).toMatchObject({ content: null, reasoning_content: "Need to search.\n", finishType: "tool_calls", matched: null });
    expect(m.tool_calls).toEqual([{ id: expect.stringMatching(/^call_[0-9a-f]{24}$/), index: 0, type: "function", function: { name: "search", arguments: '{"query": "q"}' } }]);
  });

  it("stream: reasoning deltas, then the call whole (id, type, name, arguments)", () => {
    const out = new ChoiceOutput(plan);
    const deltas: StreamDelta[] = [];
    for (const ch of text) deltas.push(...out.push(ch));
    deltas.push(...out.finish());
    expect(deltas.filter((d) => d.kind === "reasoning").map((d) => (d as { text: string }).text).join("")).toBe("Need to search.\n"); // the "\n" went out before "</think>" arrived; SGLang rstrips only the chunk holding the end tag
    const calls = deltas.filter((d) => d.kind === "tool_call").map((d) => (d as { call: { id?: string; function: { name?: string; arguments: string } } }).call);
    expect(calls).toEqual([{ index: 0, id: expect.stringMatching(/^call_[0-9a-f]{24}$/), type: "function", function: { name: "search", arguments: '{"query": "q"}' } }]);
    expect(out.sentToolCalls).toBe(true);
  });

  it("finish_reason tool_calls only with calls: markup that yields none stays stop, in both modes", () => {
    const tools = chatOutputPlan(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "search" } }] })), { toolCallParser: "qwen25", reasoningParser: null });
    const forced = chatOutputPlan(
      parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "search" } }], tool_choice: "required" })),
      { toolCallParser: "qwen25", reasoningParser: null },
    );
    for (const [plan, text] of [
      [tools, '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'],
      [tools, "ok <tool_call>\n"],
      [forced, "not an array"],
    ] as const) {
      expect(finishChoiceText(plan, text, "stop", 151645), text).toMatchObject({ content: text, tool_calls: null, finishType: "stop", matched: 151645 });
      const out = new ChoiceOutput(plan);
      const deltas = [...out.push(text), ...out.finish()];
      expect(deltas.filter((d) => d.kind === "tool_call"), text).toEqual([]);
      expect(out.sentToolCalls).toBe(false);
    }
  });
});

describe("json helpers", () => {
  it("pyJsonDumps matches Python json.dumps", () => {
    expect(pyJsonDumps({ a: [1, "é\n", null, true], b: {} })).toBe('{"a": [1, "\\u00e9\\n", null, true], "b": {}}');
    expect(pyJsonDumps({ a: "é" }, false)).toBe('{"a": "é"}');
    expect(pyJsonDumps("😀")).toBe('"\\ud83d\\ude00"');
  });
});

describe("logprobs (utils.py to_openai_style_logprobs, serving_chat.py _process_logprobs_tokens)", () => {
  it("token, UTF-8 bytes, logprob and top alternatives; equal top texts collapse like a Python dict", () => {
    const meta = LogprobMetaSchema.parse({
      output_token_logprobs: [[-0.1, 32, "A"], [-1.5, 19780, " é"]],
      output_top_logprobs: [[[-0.1, 32, "A"], [-2.3, 33, "B"]], [[-1.5, 19780, " é"], [-1.6, 1, "x"], [-1.7, 2, "x"]]],
    });
    expect(toChoiceLogprobs(meta)).toEqual({
      content: [
        { token: "A", bytes: [65], logprob: -0.1, top_logprobs: [{ token: "A", bytes: [65], logprob: -0.1 }, { token: "B", bytes: [66], logprob: -2.3 }] },
        {
          token: " é",
          bytes: [32, 195, 169],
          logprob: -1.5,
          top_logprobs: [{ token: " é", bytes: [32, 195, 169], logprob: -1.5 }, { token: "x", bytes: [120], logprob: -1.7 }],
        },
      ],
    });
    expect(toChoiceLogprobs(meta, 1).content.map((t) => t.token)).toEqual([" é"]);
    expect(toChoiceLogprobs(LogprobMetaSchema.parse({ output_token_logprobs: [[-0.5, 7, "z"]] })).content[0]!.top_logprobs).toEqual([]);
  });

  it("the /generate body asks for them as the chat endpoint does", () => {
    const b = buildGenerateBody(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], logprobs: true, top_logprobs: 3 })), { text: "p" });
    expect(b).toMatchObject({ return_logprob: true, top_logprobs_num: 3, logprob_start_len: -1, return_text_in_logprobs: true });
  });
});

describe("stream translation with a plan (chat-stream.ts + chat-output.ts)", () => {
  const enc = new TextEncoder();
  const frame = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
  const meta = (n: number, finish: unknown = null, extra: Record<string, unknown> = {}) => ({ id: "r", finish_reason: finish, prompt_tokens: 100, completion_tokens: n, cached_tokens: 96, ...extra });
  const run = (frames: string, plan: ReturnType<typeof chatOutputPlan>) => {
    const core = createChatStreamCore({ id: "c", model: "q", now: () => 1, plan, includeUsage: true });
    const out = [...core.push(enc.encode(frames)), ...core.end()];
    return out.filter((f) => f !== "data: [DONE]\n\n").map((f) => JSON.parse(f.slice(6)) as { choices: { delta: Record<string, unknown>; finish_reason: string | null; matched_stop: unknown; logprobs: { content: { token: string }[] } | null }[]; usage?: { completion_tokens: number } });
  };
  const req = (extra: Record<string, unknown>) => parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], ...extra }));

  it("tool-call deltas in OpenAI's shape; the finish chunk says tool_calls and keeps matched_stop (serving_chat.py stream)", () => {
    const text = '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>';
    let frames = "";
    for (let k = 1; k <= text.length; k += 7) frames += frame({ text: text.slice(0, k), meta_info: meta(k) });
    frames += frame({ text, meta_info: meta(30, { type: "stop", matched: 151645 }) }) + "data: [DONE]\n\n";
    const chunks = run(frames, chatOutputPlan(req({ tools: [{ type: "function", function: { name: "search" } }] }), { toolCallParser: "qwen25", reasoningParser: null }));
    const toolDeltas = chunks.flatMap((c) => c.choices.flatMap((x) => (x.delta["tool_calls"] as { index: number; id?: string; function: { name?: string; arguments: string } }[]) ?? []));
    expect(toolDeltas).toEqual([{ index: 0, id: expect.stringMatching(/^call_/), type: "function", function: { name: "search", arguments: '{"query": "q"}' } }]);
    const fin = chunks.find((c) => c.choices[0]?.finish_reason)!.choices[0]!;
    expect(fin).toMatchObject({ finish_reason: "tool_calls", matched_stop: 151645 });
    expect(chunks.some((c) => typeof c.choices[0]?.delta["content"] === "string" && c.choices[0]!.delta["content"] !== "")).toBe(false);
  });

  it("logprobs sliced per frame and carried on chunks; continuous usage on each delta chunk", () => {
    const lp = (n: number) => Array.from({ length: n }, (_, i) => [-0.1, i, ["A", " b", " c"][i]!]);
    const frames =
      frame({ text: "A", meta_info: meta(1, null, { output_token_logprobs: lp(1), output_top_logprobs: [[]] }) }) +
      frame({ text: "A b c", meta_info: meta(3, { type: "length", length: 3 }, { output_token_logprobs: lp(3), output_top_logprobs: [[], [], []] }) }) +
      "data: [DONE]\n\n";
    const chunks = run(frames, chatOutputPlan(req({ logprobs: true, stream: true, stream_options: { continuous_usage_stats: true } }), { toolCallParser: null, reasoningParser: null }));
    const tokens = chunks.flatMap((c) => c.choices.flatMap((x) => x.logprobs?.content.map((t) => t.token) ?? []));
    expect(tokens).toEqual(["A", " b", " c"]);
    const contentChunks = chunks.filter((c) => typeof c.choices[0]?.delta["content"] === "string" && c.choices[0]!.delta["content"] !== "");
    expect(contentChunks.map((c) => c.usage?.completion_tokens)).toEqual([1, 3]);
  });

  it("cumulative frames: each position's logprob is validated once, not once per frame (entries validated, counted)", () => {
    const N = 600;
    const entry = (i: number) => [-0.25, 1000 + i, `t${i}`];
    let frames = "";
    for (let k = 1; k <= N; k++) {
      const text = Array.from({ length: k }, (_, i) => `t${i}`).join("");
      frames += frame({ text, meta_info: meta(k, k === N ? { type: "length", length: N } : null, { output_token_logprobs: Array.from({ length: k }, (_, i) => entry(i)), output_top_logprobs: Array.from({ length: k }, () => []) }) });
    }
    frames += "data: [DONE]\n\n";
    const safeParse = LogprobMetaSchema.safeParse.bind(LogprobMetaSchema);
    let validated = 0;
    const spy = vi.spyOn(LogprobMetaSchema, "safeParse").mockImplementation(((v: unknown) => {
      const tokens = (v as { output_token_logprobs?: unknown[] }).output_token_logprobs;
      validated += tokens?.length ?? 0;
      return safeParse(v);
    }) as typeof LogprobMetaSchema.safeParse);
    let chunks;
    try {
      chunks = run(frames, chatOutputPlan(req({ logprobs: true, stream: true }), { toolCallParser: null, reasoningParser: null }));
    } finally {
      spy.mockRestore();
    }
    const tokens = chunks.flatMap((c) => c.choices.flatMap((x) => x.logprobs?.content.map((t) => t.token) ?? []));
    expect(tokens).toEqual(Array.from({ length: N }, (_, i) => `t${i}`));
    // Re-validating every frame whole: N(N+1)/2 = 180 300 entries.
    expect(validated).toBe(N);
  });
});

describe("strict tools under tool_choice auto (function_call_parser.py get_structure_constraint)", () => {
  it("a structural tag from qwen25 structure_info, json.dumps text; only with a tool-call parser", () => {
    const body = (parser: "qwen25" | null) =>
      buildGenerateBody(
        parseChatRequest(
          JSON.stringify({
            model: "q",
            messages: [{ role: "user", content: "hi" }],
            tools: [
              { type: "function", function: { name: "a", strict: true, parameters: { type: "object", properties: { x: { type: "integer" } } } } },
              { type: "function", function: { name: "b", parameters: { type: "object" } } },
            ],
          }),
        ),
        { text: "p", toolCallParser: parser },
      ).sampling_params.structural_tag;
    expect(body("qwen25")).toBe(
      '{"type": "structural_tag", "structures": [{"begin": "<tool_call>\\n{\\"name\\":\\"a\\", \\"arguments\\":", "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}, "end": "}\\n</tool_call>"}, ' +
        '{"begin": "<tool_call>\\n{\\"name\\":\\"b\\", \\"arguments\\":", "schema": {}, "end": "}\\n</tool_call>"}], "triggers": ["<tool_call>"], "at_least_one": false}',
    );
    expect(body(null)).toBeUndefined();
  });
});

describe("qwen25 streaming equals non-stream (property)", () => {
  it("for random text, valid and broken blocks, text between them, and random chunking: the same content and calls", () => {
    const argsArb = fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 });
    const textArb = fc.stringMatching(/^[a-z <>/_\n\t.]{0,14}$/);
    const blockArb = fc.oneof(
      fc.tuple(fc.constantFrom("get_weather", "search"), argsArb).map(([n, a]) => `<tool_call>\n${pyJsonDumps({ name: n, arguments: a }, false)}\n</tool_call>`),
      fc.constant('<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'), // broken JSON
      fc.constant('<tool_call>\n{"name": "unknown", "arguments": {}}\n</tool_call>'), // no offered tool
      fc.constant("</tool_call>"), // stray end tag
    );
    fc.assert(
      fc.property(
        // The answer does not start with whitespace: that alone the stream cannot strip (see the class comment).
        textArb.filter((t) => t === "" || !/^\s/.test(t)),
        fc.array(fc.tuple(blockArb, textArb), { minLength: 0, maxLength: 4 }),
        fc.option(fc.constantFrom('<tool_call>\n{"name": "search", "arguments": {"query": "x', "<tool_call>\n", "<tool_"), { nil: "" }),
        fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 40 }),
        (prefix, parts, cutOff, cuts) => {
          const text = prefix + parts.map(([b, t]) => b + t).join("") + cutOff;
          const whole = parseQwenToolCalls(text, TOOLS);
          // The one-shot parse finds the blocks SGLang's regex finds (qwen25_detector.py), by plain searches.
          const known = new Set(TOOLS.map((t) => t.function.name));
          const byRegex = [...text.matchAll(/<tool_call>\n([\s\S]*?)\n<\/tool_call>/g)].flatMap((m) => {
            try {
              return callsOfBlock(parsePyJson(pyStrip(m[1]!)), known);
            } catch {
              return [];
            }
          });
          expect(whole.calls).toEqual(byRegex);
          const chunks: string[] = [];
          for (let at = 0, k = 0; at < text.length; k++) {
            const n = cuts[k % cuts.length]!;
            chunks.push(text.slice(at, at + n));
            at += n;
          }
          const r = streamAll(chunks);
          expect(r.names).toEqual(whole.calls.map((c) => c.name));
          expect(r.args).toEqual(whole.calls.map((c) => c.arguments));
          expect(r.content).toBe(whole.content);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("a broken block before a call is not sent: the stream's content is the non-stream answer's", () => {
    const text = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>\nretry:\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const s = new QwenToolCallStream(TOOLS);
    const steps = Array.from(text, (ch) => s.push(ch));
    expect(steps.map((x) => x.content).join("")).toBe("Checking.");
    expect(s.finish()).toEqual({ content: "", calls: [] });
    expect(steps.flatMap((x) => x.calls)).toEqual([{ index: 0, name: "get_weather", arguments: '{"city": "Oslo"}' }]);
    expect(parseQwenToolCalls(text, TOOLS).content).toBe("Checking.");
    // Without the later call, the broken block and all after it go out at the end, as the whole text.
    const lone = text.slice(0, text.indexOf("retry"));
    const s2 = new QwenToolCallStream(TOOLS);
    expect(Array.from(lone, (ch) => s2.push(ch).content).join("")).toBe("Checking.");
    expect(s2.finish().content).toBe(lone.slice("Checking.".length));
  });

  it("a call writing a long file streams in work linear in its length (characters searched, counted)", () => {
    const indexOf = String.prototype.indexOf;
    let searched = 0;
    const spy = vi.spyOn(String.prototype, "indexOf").mockImplementation(function (this: string, search: string, from?: number) {
      searched += this.length - Math.max(0, from ?? 0);
      return indexOf.call(this, search, from);
    });
    const s = new QwenToolCallStream(TOOLS);
    let total = 0;
    const feed = (d: string) => {
      total += d.length;
      return s.push(d);
    };
    try {
      feed('<tool_call>\n{"name": "search", "arguments": {"query": "');
      for (let i = 0; i < 20_000; i++) feed("line of code\\n");
      const end = feed('"}}\n</tool_call>');
      expect(end.calls).toHaveLength(1);
      expect(JSON.parse(end.calls[0]!.arguments).query).toHaveLength(20_000 * 13);
    } finally {
      spy.mockRestore();
    }
    // Each delta is searched once with a few characters of context; the old parser searched (and
    // parsed) the whole block on every delta: ~20 000 × 130 000 characters.
    expect(searched).toBeLessThan(3 * total);
  });
});

describe("reasoning streams equal their non-stream parse (property)", () => {
  it("reasoning then content, random chunking (forced reasoning, as the thinking template)", () => {
    const word = fc.stringMatching(/^[a-z .]{1,12}$/);
    fc.assert(
      fc.property(word, word, fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 10 }), fc.boolean(), fc.boolean(), (thought, answer, cuts, streamed, cutOff) => {
        // stream_reasoning false holds the reasoning back until </think> (or the end of output).
        const text = cutOff ? `<think>${thought}` : `${thought}\n</think>\n\n${answer}`;
        const whole = splitReasoning(text, true);
        const s = new ReasoningStream(true, streamed);
        let r = "";
        let c = "";
        for (let at = 0, k = 0; at < text.length; k++) {
          const n = cuts[k % cuts.length]!;
          const out = s.push(text.slice(at, at + n));
          r += out.reasoning;
          c += out.content;
          at += n;
        }
        const end = s.finish();
        r += end.reasoning;
        c += end.content;
        expect(r).toBe(whole.reasoning);
        expect(c).toBe(whole.content);
      }),
      { numRuns: 200 },
    );
  });
});
