// The reasoning and qwen25 tool-call parsers on targeted outputs: the two bugs (key order, long
// ints), the SGLang behaviours adopted (reasoning ends at <tool_call>, whitespace kept, arguments
// unescaped in the stream), and the stream = one-shot property over random outputs and chunkings.
// The comparison with SGLang's own parser code on generated outputs is parsers-sglang-golden.test.ts.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ToolDefinition } from "../../../src/api/openai-schema.ts";
import { finishChoiceText, type ChatOutputPlan } from "../../../src/proxy/chat-output.ts";
import { ReasoningStream, splitReasoning } from "../../../src/proxy/reasoning.ts";
import { parseQwenToolCalls, QwenToolCallStream } from "../../../src/proxy/tool-calls/qwen25.ts";
import { pyStrip } from "../../../src/util/py-str.ts";
import { streamedAnswer } from "../../helpers/choice-stream.ts";

const tool = (name: string): ToolDefinition => ({ type: "function", function: { name, description: undefined, parameters: undefined, strict: false } });
const TOOLS = [tool("get_weather"), tool("search")];
const block = (json: string) => `<tool_call>\n${json}\n</tool_call>`;

function plan(force: boolean, streamReasoning = true): ChatOutputPlan {
  return { tools: { list: TOOLS }, reasoning: { force, stream: streamReasoning }, logprobs: false, continuousUsage: false };
}

interface Answer {
  reasoning: string;
  content: string;
  calls: { name: string; arguments: string }[];
}

/** The one-shot answer, with null read as "" (SGLang's `x or None`). */
function oneShot(p: ChatOutputPlan, text: string): Answer {
  const m = finishChoiceText(p, text, "stop", null);
  return { reasoning: m.reasoning_content ?? "", content: m.content ?? "", calls: (m.tool_calls ?? []).map((c) => c.function) };
}

/** Python `s.lstrip()`: the stream sends leading whitespace the one-shot parse strips before a call (documented). */
const pyLstrip = (s: string) => pyStrip(s + "x").slice(0, -1);

describe("tool-call arguments as Python's json.loads / json.dumps give them (the two bugs)", () => {
  it("integer-like keys keep their place: {\"b\":1,\"2\":2,\"1\":3} stays in that order (a JS object puts them first)", () => {
    const text = block('{"name": "search", "arguments": {"b": 1, "2": 2, "1": 3, "nested": {"10": [], "x": null, "0": {}}}}');
    const want = '{"b": 1, "2": 2, "1": 3, "nested": {"10": [], "x": null, "0": {}}}';
    expect(parseQwenToolCalls(text, TOOLS).calls).toEqual([{ name: "search", arguments: want }]);
    expect(streamedAnswer(plan(false), text, [1]).calls).toEqual([{ name: "search", arguments: want }]);
  });

  it("`parameters or arguments or {}` as Python reads it: a null is dumped as null, a missing one as {}", () => {
    expect(parseQwenToolCalls(block('{"name": "search", "arguments": null}'), TOOLS).calls[0]!.arguments).toBe("null");
    expect(parseQwenToolCalls(block('{"name": "search", "parameters": {}, "arguments": []}'), TOOLS).calls[0]!.arguments).toBe("[]");
    expect(parseQwenToolCalls(block('{"name": "search"}'), TOOLS).calls[0]!.arguments).toBe("{}");
  });

  it("a repeated key keeps its first place and its last value, as a dict", () => {
    const text = block('{"name": "search", "arguments": {"a": 1, "1": 2, "a": 3}}');
    expect(parseQwenToolCalls(text, TOOLS).calls[0]!.arguments).toBe('{"a": 3, "1": 2}');
  });

  it("an int of 400 digits is a call with all its digits (it read as Infinity and the call was dropped)", () => {
    const big = "9".repeat(400);
    const text = block(`{"name": "search", "arguments": {"n": ${big}, "m": -${big}}}`);
    expect(parseQwenToolCalls(text, TOOLS)).toEqual({ content: "", calls: [{ name: "search", arguments: `{"n": ${big}, "m": -${big}}` }] });
    // A float that overflows is Python's inf, which json.dumps prints as Infinity.
    expect(parseQwenToolCalls(block('{"name": "search", "arguments": {"f": 1e400, "g": 1.5e308}}'), TOOLS).calls[0]!.arguments).toBe('{"f": Infinity, "g": 1.5e+308}');
  });

  it("the stream sends the arguments unescaped, as the one-shot answer (ensure_ascii=False in both)", () => {
    const text = block('{"name": "search", "arguments": {"q": "café 你好 😀", "\\u00e9": "\\n"}}');
    const want = '{"q": "café 你好 😀", "é": "\\n"}';
    expect(parseQwenToolCalls(text, TOOLS).calls[0]!.arguments).toBe(want);
    const s = new QwenToolCallStream(TOOLS);
    const calls = [...s.push(text).calls, ...s.finish().calls];
    expect(calls.map((c) => c.arguments)).toEqual([want]);
  });
});

describe("reasoning as current SGLang splits it (reasoning_parser.py @002e9bfc)", () => {
  it("a thinking model that opens <tool_call> without </think>: reasoning ends there and the call goes through", () => {
    const text = `I need the weather.\n${block('{"name": "get_weather", "arguments": {"city": "Oslo"}}')}`;
    expect(splitReasoning(text, true)).toEqual({ reasoning: "I need the weather.\n", content: text.slice("I need the weather.\n".length) });
    for (const sizes of [[text.length], [1], [3, 7]]) {
      const r = streamedAnswer(plan(true), text, sizes);
      expect(r.reasoning).toBe("I need the weather.\n");
      expect(r.calls).toEqual([{ name: "get_weather", arguments: '{"city": "Oslo"}' }]);
    }
    expect(oneShot(plan(true), text).calls).toEqual([{ name: "get_weather", arguments: '{"city": "Oslo"}' }]);
  });

  it("a <tool_call> inside reasoning that </think> closes later stays reasoning, in the stream too", () => {
    const text = `a <tool_call>\n{}\n</tool_call> b</think>\n\nanswer`;
    expect(splitReasoning(text, true)).toEqual({ reasoning: "a <tool_call>\n{}\n</tool_call> b", content: "\n\nanswer" });
    const s = new ReasoningStream(true);
    expect(s.push("a <tool_call>\n{}")).toEqual({ reasoning: "a ", content: "" });
    expect(s.push("\n</tool_call> b</thi")).toEqual({ reasoning: "", content: "" });
    expect(s.push("nk>\n\nanswer")).toEqual({ reasoning: "<tool_call>\n{}\n</tool_call> b", content: "\n\nanswer" });
  });

  it("whitespace around the reasoning is kept; leading <think> tags are dropped", () => {
    expect(splitReasoning("<think><think>\n  thought \n</think>\n\nThe answer.\n", false)).toEqual({ reasoning: "\n  thought \n", content: "\n\nThe answer.\n" });
    expect(splitReasoning("\n  thought \n</think>\n\nThe answer.", true)).toEqual({ reasoning: "\n  thought \n", content: "\n\nThe answer." });
    expect(splitReasoning("No thinking here.", false)).toEqual({ reasoning: "", content: "No thinking here." });
  });
});

describe("the stream answers what the one-shot parse answers (property, random outputs and chunkings)", () => {
  it("reasoning, content and calls; forced or not; reasoning streamed or held", () => {
    const piece = fc.constantFrom("a", " ", "\n", "é", "<", "</", "<think>", "</think>", "<tool_call>", "<tool_call>\n", "\n</tool_call>", "</tool_call>", "{", "}", '"');
    const callArb = fc.constantFrom(
      block('{"name": "search", "arguments": {"2": 1, "b": "ü"}}'),
      block('{"name": "get_weather", "arguments": {"n": 123456789012345678901234567890}}'),
      block('{"name": "nope", "arguments": {}}'),
      block("{broken"),
      '<tool_call>\n{"name": "search", "arg',
    );
    const partArb = fc.oneof(fc.array(piece, { maxLength: 6 }).map((a) => a.join("")), callArb);
    fc.assert(
      fc.property(fc.array(partArb, { maxLength: 6 }), fc.boolean(), fc.boolean(), fc.array(fc.integer({ min: 1, max: 8 }), { minLength: 1, maxLength: 8 }), (parts, force, streamReasoning, sizes) => {
        const text = parts.join("");
        const p = plan(force, streamReasoning);
        const whole = oneShot(p, text);
        const s = streamedAnswer(p, text, sizes);
        expect(s.reasoning).toBe(whole.reasoning);
        expect(s.calls).toEqual(whole.calls);
        expect(whole.calls.length > 0 ? pyLstrip(s.content) : s.content).toBe(whole.content);
      }),
      { numRuns: 1500 },
    );
  });
});
