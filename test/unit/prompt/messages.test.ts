// SGLang message preprocessing (sgl-project/sglang @9d147fd python/sglang/srt/entrypoints/openai/
// serving_chat.py L640-946, python/sglang/srt/parser/jinja_template_utils.py L81-245).
import { describe, expect, it } from "vitest";
import { InvalidRequestError } from "../../../src/api/errors.ts";
import { preprocessChat, PyNumber, type ChatRequestLike } from "../../../src/prompt/index.ts";

const pre = (request: ChatRequestLike) => preprocessChat(request, "openai");

function invalid(fn: () => unknown): InvalidRequestError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidRequestError);
    return e as InvalidRequestError;
  }
  throw new Error("expected InvalidRequestError");
}

describe("content parts (openai format)", () => {
  it("rewrites parts, drops unknown ones and lists media in order of appearance across messages", () => {
    const out = pre({
      messages: [
        { role: "system", content: [{ type: "input_text", text: "sys" }] },
        {
          role: "user",
          content: [
            { type: "image_url", image_url: { url: "i0" } },
            { type: "refusal", refusal: "x" },
            { type: "text", text: "t", extra: 1 },
            { type: "video_url", video_url: { url: "v0", fps: 2 } },
            "not a dict",
            { type: "input_image", image_url: "i1" },
          ],
        },
        { role: "user", content: [{ type: "audio_url", audio_url: { url: "a0" } }, { type: "image_url", image_url: { url: "i2" } }] },
      ],
    });
    expect(out.messages).toEqual([
      { role: "system", content: [{ type: "text", text: "sys" }] },
      { role: "user", content: [{ type: "image" }, { type: "text", text: "t" }, { type: "video" }, { type: "image" }] },
      { role: "user", content: [{ type: "audio" }, { type: "image" }] },
    ]);
    expect(out.mediaParts.map((p) => `${p.kind}:${p.url}:${p.index}:${p.kindIndex}:${p.messageIndex}.${p.partIndex}`)).toEqual([
      "image:i0:0:0:1.0",
      "video:v0:1:0:1.3",
      "image:i1:2:1:1.5",
      "audio:a0:3:0:2.0",
      "image:i2:4:2:2.1",
    ]);
    expect(out.mediaParts[1]!.options).toEqual({ url: "v0", fps: 2 });
    expect(out.hasAudio).toBe(true);
    expect(out.droppedParts).toEqual([{ messageIndex: 1, partIndex: 1, type: "refusal" }]);
  });

  it("string format joins text parts with a space and collects no media", () => {
    const out = preprocessChat(
      { messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image_url", image_url: { url: "u" } }, { type: "text", text: "b" }] }] },
      "string",
    );
    expect(out.messages).toEqual([{ role: "user", content: "a b" }]);
    expect(out.mediaParts).toEqual([]);
  });

  it("media parts without a url and text parts without text are 400s", () => {
    expect(invalid(() => pre({ messages: [{ role: "user", content: [{ type: "video_url", video_url: {} }] }] })).param).toBe("messages[0].content[0].video_url.url");
    expect(invalid(() => pre({ messages: [{ role: "user", content: [{ type: "text" }] }] })).param).toBe("messages[0].content[0].text");
  });
});

describe("message fields", () => {
  it("null/missing content → \"\", None-valued keys dropped, user messages keep role and content only", () => {
    const out = pre({
      messages: [
        { role: "SYSTEM", content: null, name: null },
        { role: "user", content: "q", name: "bob" },
        { role: "assistant", name: "helper", reasoning_content: null },
      ],
      continue_final_message: true,
    });
    expect(out.messages).toEqual([
      { role: "system", content: "" },
      { role: "user", content: "q" },
    ]);
    expect(out.assistantPrefix).toBe("");
  });

  it("a final assistant message with string content becomes a user message unless continued", () => {
    const out = pre({ messages: [{ role: "user", content: "q" }, { role: "assistant", content: "partial", name: "x" }] });
    expect(out.messages).toEqual([
      { role: "user", content: "q" },
      { role: "user", content: "partial" },
    ]);
    expect(out.assistantPrefix).toBeNull();
    // List content is left alone.
    const list = pre({ messages: [{ role: "user", content: "q" }, { role: "assistant", content: [{ type: "text", text: "p" }] }], continue_final_message: true });
    expect(list.messages[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "p" }] });
    expect(list.assistantPrefix).toBeNull();
  });

  it("tool messages: all-text parts joined with a space; mixed parts kept; [] → \"\"", () => {
    const out = pre({
      messages: [
        { role: "user", content: "q" },
        { role: "tool", content: [{ type: "text", text: "a" }, { type: "input_text", text: "b" }] },
        { role: "tool", content: [{ type: "text", text: "a" }, { type: "image_url", image_url: { url: "u" } }] },
        { role: "tool", content: [] },
      ],
    });
    expect(out.messages.slice(1).map((m) => m.content)).toEqual(["a b", [{ type: "text", text: "a" }, { type: "image" }], ""]);
  });

  it("roles: generic roles are lower-cased; user must be exact; unknown roles are 400s", () => {
    // developer is system instructions and function a tool result, as OpenAI means them (the Qwen3-VL templates print neither).
    expect(pre({ messages: [{ role: "Developer", content: "d" }] }).messages[0]!.role).toBe("system");
    expect(pre({ messages: [{ role: "user", content: "q" }, { role: "function", name: "f", content: [{ type: "text", text: "r" }] }] }).messages[1]).toMatchObject({ role: "tool", content: "r" });
    expect(pre({ messages: [{ role: "latest_reminder", content: "x" }] }).messages[0]!.role).toBe("latest_reminder");
    invalid(() => pre({ messages: [{ role: "User", content: "x" }] }));
    invalid(() => pre({ messages: [{ role: "robot", content: "x" }] }));
    invalid(() => pre({ messages: [{ role: "user" }] }));
    invalid(() => pre({ messages: [] }));
  });
});

describe("assistant tool calls", () => {
  const call = (args: unknown) => ({
    messages: [
      { role: "user", content: "q" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: args } }] },
      { role: "tool", content: "r" },
    ],
  });

  it("string arguments are parsed into objects keeping number lexemes", () => {
    const out = pre(call('{"x": 1.0, "y": [2, "s"]}'));
    const fn = (out.messages[1]!["tool_calls"] as Array<{ function: { name: string; arguments: Record<string, unknown> } }>)[0]!.function;
    expect(fn.name).toBe("f");
    const x = fn.arguments["x"] as PyNumber;
    expect(x).toBeInstanceOf(PyNumber);
    expect([x.value, x.pythonText]).toEqual([1, "1.0"]);
    expect((fn.arguments["y"] as unknown[])[1]).toBe("s");
  });

  it("arguments that are not JSON, or not an object, are 400s", () => {
    expect(invalid(() => pre(call("{bad"))).message).toBe("Assistant tool call function.arguments must be valid JSON.");
    expect(invalid(() => pre(call("[1, 2]"))).message).toBe("Assistant tool call function.arguments must be a JSON object.");
    expect(invalid(() => pre(call("null"))).param).toBe("messages[1].tool_calls[0].function.arguments");
  });

  it("object arguments pass through; non-assistant roles keep string arguments", () => {
    const out = pre(call({ k: 2 }));
    const args = (out.messages[1]!["tool_calls"] as Array<{ function: { arguments: Record<string, PyNumber> } }>)[0]!.function.arguments;
    expect(args["k"]!.pythonText).toBe("2");
    const tool = pre({
      messages: [{ role: "user", content: "q" }, { role: "function", content: "x", tool_calls: [{ function: { name: "f", arguments: "not json" } }] }, { role: "user", content: "q" }],
    });
    expect((tool.messages[1]!["tool_calls"] as Array<{ function: { arguments: unknown } }>)[0]!.function.arguments).toBe("not json");
  });
});

describe("tools, tool_choice and template kwargs", () => {
  const tool = { type: "function", function: { name: "f", parameters: { type: "object" }, extra: "dropped" } };

  it("tools are dumped like SGLang's Tool.model_dump()", () => {
    const out = pre({ messages: [{ role: "user", content: "q" }], tools: [tool] });
    expect(out.tools).toEqual([{ type: "function", function: { description: null, name: "f", parameters: { type: "object" }, strict: false }, defer_loading: null }]);
    expect(Object.keys(out.tools![0]!["function"] as object)).toEqual(["description", "name", "parameters", "strict"]);
    const deferred = pre({ messages: [{ role: "user", content: "q" }], tools: [{ ...tool, defer_loading: true }] });
    expect(deferred.tools![0]).toMatchObject({ function: { defer_loading: true }, defer_loading: true });
  });

  it("tool_choice: none hides tools, a named choice filters, empty tools are none", () => {
    const base = { messages: [{ role: "user", content: "q" }], tools: [tool, { type: "function", function: { name: "g" } }] };
    expect(pre({ ...base, tool_choice: "none" }).tools).toBeNull();
    expect(pre({ ...base, tool_choice: "required" }).tools).toHaveLength(2);
    expect(pre({ ...base, tool_choice: { type: "function", function: { name: "g" } } }).tools!.map((t) => (t["function"] as { name: string }).name)).toEqual(["g"]);
    expect(pre({ messages: base.messages, tools: [] }).tools).toBeNull();
  });

  it("reasoning_effort is passed and defaults thinking/enable_thinking; explicit kwargs win", () => {
    expect(pre({ messages: [{ role: "user", content: "q" }], reasoning_effort: "none" }).templateKwargs).toEqual({
      reasoning_effort: "none",
      thinking: false,
      enable_thinking: false,
    });
    expect(
      pre({ messages: [{ role: "user", content: "q" }], reasoning_effort: "high", chat_template_kwargs: { enable_thinking: false, add_vision_id: true } }).templateKwargs,
    ).toEqual({ reasoning_effort: "high", enable_thinking: false, add_vision_id: true, thinking: true });
    expect(pre({ messages: [{ role: "user", content: "q" }] }).templateKwargs).toEqual({});
  });

  it("kwargs that are arguments of the template call itself are 400s", () => {
    for (const key of ["add_generation_prompt", "messages", "tools", "continue_final_message"]) {
      expect(invalid(() => pre({ messages: [{ role: "user", content: "q" }], chat_template_kwargs: { [key]: true } })).param).toBe(`chat_template_kwargs.${key}`);
    }
  });
});
