// Tail skeletons against the library: for every template, random tails (roles, string and part
// contents with the strings the templates test for, media items, extra keys) after a stand-in, under random tools and kwargs; a
// tail the skeleton takes must render exactly as @huggingface/jinja renders it.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { TemplateMessage } from "../../../src/prompt/messages.ts";
import type { TemplateId } from "../../../src/prompt/model-profile.ts";
import { buildTailSkeleton, fillTailSkeleton, tailShape, TAIL_SKELETON_MESSAGES } from "../../../src/prompt/tail-skeleton.ts";
import { PyNumber } from "../../../src/prompt/py-json.ts";
import { renderTemplate, type RenderInput } from "../../../src/prompt/template.ts";

const TEMPLATES: TemplateId[] = ["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"];

/** What the incremental path cuts off: the stand-in alone, before the generation prompt. */
function headOf(id: TemplateId, standIn: TemplateMessage, tools: RenderInput["tools"], kwargs: Record<string, unknown>): string {
  const alone = renderTemplate(id, { messages: [standIn], tools, kwargs });
  return alone.slice(0, alone.lastIndexOf("<|im_start|>assistant"));
}

const fragment = fc.constantFrom("", "a", " ", "\n", "\n\n", "x y", "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "{{ x }}", "é", "😀", "\u0001");
const content = fc.array(fragment, { maxLength: 6 }).map((p) => p.join(""));
const part = fc.oneof(
  { weight: 6, arbitrary: content.map((text) => ({ type: "text", text })) },
  { weight: 3, arbitrary: fc.constantFrom({ type: "image" }, { type: "video" }) },
  { weight: 1, arbitrary: fc.constantFrom<Record<string, unknown>>({ type: "audio" }, { type: "text", text: "t", extra: 1 }, { type: "image", image: "u" }, { type: "text", text: 1 }, { type: "text", text: "t", image: 1 }, { type: "video", image: "x" }, { type: "text", text: "t", video: 1 }) },
);
type Msg = Record<string, unknown>;
const extra = fc.constantFrom<Record<string, unknown>>({}, {}, {}, {}, {}, {}, { reasoning_content: "r" }, { reasoning_content: "\nr\n" }, { tool_calls: [{ type: "function", function: { name: "f", arguments: "{}" } }] }, { name: "n" });
const message = fc
  .record({
    role: fc.constantFrom("user", "assistant", "user", "assistant", "user", "assistant", "tool", "system"),
    content: fc.oneof({ weight: 6, arbitrary: content }, { weight: 4, arbitrary: fc.array(part, { minLength: 1, maxLength: 4 }) }, { weight: 1, arbitrary: fc.constant([]) }),
    extra,
  })
  .map(({ role, content, extra }) => ({ role, content, ...extra }));
// Half the tails are a chat turn's, [assistant, user] without other keys: the skeleton takes most of
// them (the thinking template declines some texts), so the counts asserted below are far from chance.
const chatTail = fc.tuple(content, fc.oneof(content, fc.array(part, { minLength: 1, maxLength: 4 }))).map(([a, u]): Msg[] => [
  { role: "assistant", content: a },
  { role: "user", content: u },
]);
// An agent step: an assistant's tool calls (arguments as a string, or an object as preprocessing
// leaves them, Python number text included), then one or two tool results, sometimes after one.
const args = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom<unknown>("{}", '{"path": "a.txt"}', "", "{{ x }}", {}, { path: "a.txt", limit: new PyNumber(1, "1.0") }, { n: 1.5, nested: { a: [1, "x", null, true] }, s: "é\n\"" }) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(null, [1], 3) },
);
const call = fc
  .record({ id: fc.constantFrom("c1", null), index: fc.constantFrom(0, null), type: fc.constant("function"), function: fc.record({ name: fc.oneof({ weight: 12, arbitrary: content }, { weight: 1, arbitrary: fc.constantFrom(null, 1) }), arguments: args }, { requiredKeys: ["name"] }), more: fc.constantFrom({}, {}, {}, {}, {}, { extra: 1 }) }, { requiredKeys: ["function", "more"] })
  .map(({ more, ...c }) => ({ ...c, ...more }));
const toolResult = fc.record({ content: fc.oneof({ weight: 6, arbitrary: content }, { weight: 1, arbitrary: fc.array(part, { minLength: 1, maxLength: 2 }) }), more: fc.constantFrom({}, { tool_call_id: "c1" }, { tool_call_id: "c1", name: "f" }, { reasoning_content: "r" }) }).map(({ content, more }): Msg => ({ role: "tool", content, ...more }));
const agentStep = fc
  .tuple(fc.boolean(), fc.oneof(content, fc.constant("")), fc.oneof({ weight: 8, arbitrary: fc.array(call, { minLength: 1, maxLength: 2 }) }, { weight: 1, arbitrary: fc.array(call, { minLength: 3, maxLength: 5 }) }), fc.array(toolResult, { minLength: 1, maxLength: 2 }), fc.constantFrom({}, {}, {}, { reasoning_content: "r" }))
  .map(([after, a, calls, results, more]): Msg[] => [...(after ? [{ role: "tool", content: "before" }] : []), { role: "assistant", content: a, tool_calls: calls, ...more }, ...results]);
const tail = fc.oneof(
  { weight: 2, arbitrary: fc.array(message, { minLength: 1, maxLength: TAIL_SKELETON_MESSAGES + 1 }) },
  { weight: 2, arbitrary: chatTail },
  { weight: 3, arbitrary: agentStep },
  { weight: 1, arbitrary: fc.array(toolResult, { minLength: 1, maxLength: 3 }) },
);
const tools = fc.constantFrom(null, [{ type: "function", function: { name: "f", description: "d", parameters: { type: "object" } } }]);
const kwargs = fc.record({ add_vision_id: fc.boolean(), enable_thinking: fc.boolean() }, { requiredKeys: [] });
const standIn = fc.constantFrom<TemplateMessage>({ role: "user", content: "" }, { role: "user", content: [{ type: "image" }, { type: "video" }] });

describe("tail skeletons", () => {
  for (const id of TEMPLATES) {
    it(`${id}: a tail the skeleton takes renders as the library renders it`, () => {
      let taken = 0;
      let takenParts = 0;
      let takenResults = 0;
      let takenCalls = 0;
      fc.assert(
        fc.property(tail, tools, kwargs, standIn, (messages, t, kw, x) => {
          const shape = tailShape(id, messages as TemplateMessage[]);
          if (shape === null) return;
          taken++;
          if (/[tiv]/.test(shape)) takenParts++;
          if (shape.includes("o")) takenResults++;
          if (shape.includes("c")) takenCalls++;
          const head = headOf(id, x, t, kw);
          const skeleton = buildTailSkeleton(shape, head, (m) => renderTemplate(id, { messages: [x, ...m], tools: t, kwargs: kw }));
          expect(skeleton).not.toBeNull();
          const whole = renderTemplate(id, { messages: [x, ...(messages as TemplateMessage[])], tools: t, kwargs: kw });
          expect(fillTailSkeleton(skeleton!, messages as TemplateMessage[])).toBe(whole.slice(head.length));
        }),
        { numRuns: 1500 },
      );
      // These fail only where the skeleton is (nearly) never taken; qwen2vl prints no tool calls.
      expect(taken).toBeGreaterThan(100);
      expect(takenParts).toBeGreaterThan(30);
      expect(takenResults).toBeGreaterThan(30);
      if (id === "qwen2vl") expect(takenCalls).toBe(0);
      else expect(takenCalls).toBeGreaterThan(30);
    });
  }

  it("the thinking template's reads of a content decline it where a placeholder would read otherwise", () => {
    const id: TemplateId = "qwen3vl-thinking";
    const x: TemplateMessage = { role: "user", content: "" };
    const cases: TemplateMessage[][] = [
      [{ role: "assistant", content: "<think>r</think>a" }, { role: "user", content: "q" }],
      [{ role: "user", content: "q" }, { role: "assistant", content: "\na" }],
    ];
    // Not a query to the last-query scan (declined; the other guards leave that scan's answer unread).
    expect(tailShape(id, [{ role: "assistant", content: "a" }, { role: "user", content: "<tool_response>r</tool_response>" }])).toBeNull();
    const head = headOf(id, x, null, {});
    for (const tail of cases) {
      expect(tailShape(id, tail)).toBeNull();
      // Without the guard the skeleton would be wrong: the check is needed, not vacuous.
      const shape = tail.map((m) => `${m.role === "user" ? "u" : "a"}s,`).join("");
      const skeleton = buildTailSkeleton(shape, head, (m) => renderTemplate(id, { messages: [x, ...m], tools: null, kwargs: {} }))!;
      const whole = renderTemplate(id, { messages: [x, ...tail], tools: null, kwargs: {} });
      expect(fillTailSkeleton(skeleton, tail)).not.toBe(whole.slice(head.length));
    }
    // The same reads of a user's text parts (the text runs at either end) and of an assistant's parts.
    const parts: TemplateMessage[] = [{ role: "assistant", content: "a" }, { role: "user", content: [{ type: "text", text: "<tool_" }, { type: "text", text: "response>r" }, { type: "text", text: "</tool_response>" }] }];
    expect(tailShape(id, parts)).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: [{ type: "text", text: "a" }] }])).toBeNull();
    expect(tailShape(id, [{ role: "user", content: [{ type: "image" }, { type: "text", text: "<tool_response>r</tool_response>" }] }])).toBe("uit,");
    // The instruct template prints the same contents verbatim: taken.
    for (const tail of cases) expect(tailShape("qwen3vl-instruct", tail)).not.toBeNull();
  });

  it("declines a template whose reads are not reviewed (an id added later)", () => {
    const turn: TemplateMessage[] = [{ role: "assistant", content: "a" }, { role: "user", content: "q" }];
    for (const id of TEMPLATES) expect(tailShape(id, turn)).toBe("as,us,");
    expect(tailShape("qwen4vl" as TemplateId, turn)).toBeNull();
  });

  it("declines other roles, other keys, non-string contents and long tails", () => {
    const id: TemplateId = "qwen3vl-instruct";
    expect(tailShape(id, [])).toBeNull();
    expect(tailShape(id, [{ role: "tool", content: "r" }])).toBe("os,");
    expect(tailShape(id, [{ role: "tool", content: [{ type: "text", text: "r" }] }])).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: "", tool_calls: [] }])).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: "", tool_calls: [{ function: { name: "f", arguments: "{}" } }] }, { role: "tool", content: "r", tool_call_id: "c" }])).toBe("aec1,os,");
    expect(tailShape("qwen2vl", [{ role: "assistant", content: "", tool_calls: [{ function: { name: "f", arguments: "{}" } }] }])).toBeNull();
    expect(tailShape(id, [{ role: "system", content: "s" }])).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: "a", reasoning_content: "r" }])).toBeNull();
    expect(tailShape(id, Array.from({ length: TAIL_SKELETON_MESSAGES + 1 }, () => ({ role: "user", content: "q" })))).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: [{ type: "audio" }] }])).toBeNull();
    expect(tailShape(id, [{ role: "user", content: Array.from({ length: 9 }, () => ({ type: "image" })) }])).toBeNull();
    expect(tailShape(id, [{ role: "assistant", content: "a" }, { role: "user", content: [{ type: "text", text: "q" }, { type: "image" }] }])).toBe("as,uti,");
  });

  it("a render that does not hold each placeholder once, after the head, gives no skeleton", () => {
    expect(buildTailSkeleton("us,", "HEAD", () => "OTHER")).toBeNull();
    expect(buildTailSkeleton("us,", "", () => "no placeholder")).toBeNull();
    expect(buildTailSkeleton("us,", "", (m) => `${m[0]!.content as string}${m[0]!.content as string}`)).toBeNull();
    expect(buildTailSkeleton("as,us,", "H", (m) => `H<${m[0]!.content as string}|${m[1]!.content as string}>`)).toEqual(["<", "|", ">"]);
  });
});
