// Rendered prompts against the reference outputs of transformers' apply_chat_template after SGLang
// preprocessing (prompts and ids from transformers 5.17 `apply_chat_template` with the HF `tokenizers`
// reference), and the preprocessing and Jinja2 behaviours of docs/prompt.md.
import { describe, expect, it, vi } from "vitest";
import { InvalidRequestError } from "../../../src/api/errors.ts";
import { preparePrompt, renderChatPrompt } from "../../../src/prompt/index.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";

const VIDEO_THEN_TEXT = [
  { role: "user", content: [{ type: "video_url", video_url: { url: "https://example.com/v.mp4" } }, { type: "text", text: "Describe" }] },
];

const Q3_VIDEO = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe<|im_end|>\n<|im_start|>assistant\n";

describe("reference prompts (transformers apply_chat_template)", () => {
  it("Qwen3-VL-Instruct: video + text", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: VIDEO_THEN_TEXT });
    expect(text).toBe(Q3_VIDEO);
    expect(getQwenTokenizer("qwen3_vl").encode(text, "")).toEqual([151644, 872, 198, 151652, 151656, 151653, 74785, 151645, 198, 151644, 77091, 198]);
  });

  it("Qwen3-VL-Thinking: same request, generation prompt opens <think>", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: VIDEO_THEN_TEXT });
    expect(text).toBe(`${Q3_VIDEO}<think>\n`);
    expect(getQwenTokenizer("qwen3_vl").encode(text, "").slice(-5)).toEqual([151644, 77091, 198, 151667, 198]);
  });

  it("Qwen2-VL: injects the default system prompt", () => {
    const text = renderChatPrompt("qwen2_vl", "qwen2vl", { messages: VIDEO_THEN_TEXT });
    expect(text).toBe(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(getQwenTokenizer("qwen2_vl").encode(text, "")).toEqual([
      151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 151652, 151656, 151653, 74785, 151645, 198, 151644, 77091, 198,
    ]);
  });

  it("Qwen3-VL-Instruct with add_vision_id: two images and a video", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [
        {
          role: "user",
          content: [
            { type: "image_url", image_url: { url: "a.png" } },
            { type: "image_url", image_url: { url: "b.png" } },
            { type: "video_url", video_url: { url: "c.mp4" } },
            { type: "text", text: "Compare them." },
          ],
        },
      ],
      chat_template_kwargs: { add_vision_id: true },
    });
    expect(text).toBe(
      "<|im_start|>user\nPicture 1: <|vision_start|><|image_pad|><|vision_end|>Picture 2: <|vision_start|><|image_pad|><|vision_end|>Video 1: <|vision_start|><|video_pad|><|vision_end|>Compare them.<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  it("OpenAI request: system + image_url + video_url + text", () => {
    const prepared = preparePrompt(
      {
        messages: [
          { role: "system", content: "Be brief." },
          {
            role: "user",
            content: [
              { type: "image_url", image_url: { url: "https://example.com/a.png", detail: "high" } },
              { type: "video_url", video_url: { url: "https://example.com/b.mp4" } },
              { type: "text", text: "Describe" },
            ],
          },
        ],
      },
      { family: "qwen3_vl", templateId: "qwen3vl-instruct" },
    );
    expect(prepared.text).toBe(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>Describe<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(getQwenTokenizer("qwen3_vl").encode(prepared.text, "")).toEqual([
      151644, 8948, 198, 3430, 9814, 13, 151645, 198, 151644, 872, 198, 151652, 151655, 151653, 151652, 151656, 151653, 74785, 151645, 198, 151644, 77091, 198,
    ]);
    expect(prepared.mediaParts.map((p) => [p.kind, p.url, p.index, p.kindIndex, p.messageIndex, p.partIndex])).toEqual([
      ["image", "https://example.com/a.png", 0, 0, 1, 0],
      ["video", "https://example.com/b.mp4", 1, 0, 1, 1],
    ]);
    expect(prepared.mediaParts[0]!.options).toEqual({ url: "https://example.com/a.png", detail: "high" });
    expect(prepared.templateSha256).toBe("3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4");
  });
});

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather for a city",
      parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city"] },
    },
  },
];

const TOOL_TURNS = [
  { role: "user", content: "Weather in Paris and Rome?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "days": 2}' } },
      { id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome","temp":21.5}' } },
    ],
  },
  { role: "tool", tool_call_id: "call_1", content: "Sunny" },
  { role: "tool", tool_call_id: "call_2", content: [{ type: "text", text: "Cloudy," }, { type: "text", text: "21C" }] },
];

const TOOL_BLOCK =
  "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
  '{"type": "function", "function": {"description": "Weather for a city", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"]}, "strict": false}, "defer_loading": null}' +
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

const TOOL_HISTORY =
  "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n" +
  '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "temp": 21.5}}\n</tool_call><|im_end|>\n' +
  "<|im_start|>user\n<tool_response>\nSunny\n</tool_response>\n<tool_response>\nCloudy, 21C\n</tool_response><|im_end|>\n";

describe("tools, tool calls and tool messages", () => {
  it("Qwen3-VL-Instruct: tools block as SGLang's Tool.model_dump, parsed arguments, grouped tool responses", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: TOOL_TURNS, tools: TOOLS });
    expect(text).toBe(TOOL_BLOCK + TOOL_HISTORY + "<|im_start|>assistant\n");
  });

  it("Qwen3-VL-Thinking: the same history; last turn after the query gets no think block without reasoning", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: TOOL_TURNS, tools: TOOLS });
    expect(text).toBe(TOOL_BLOCK + TOOL_HISTORY + "<|im_start|>assistant\n<think>\n");
  });

  it("tool_choice none hides the tools; a named tool_choice keeps only that tool", () => {
    const none = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: TOOL_TURNS, tools: TOOLS, tool_choice: "none" } as never);
    expect(none).toBe(TOOL_HISTORY + "<|im_start|>assistant\n");
    const other = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: TOOL_TURNS,
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "nope" } },
    } as never);
    expect(other).toBe(TOOL_HISTORY + "<|im_start|>assistant\n");
  });

  it("a system message is merged into the tools block", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: [{ role: "system", content: "Be brief." }, ...TOOL_TURNS], tools: TOOLS });
    expect(text.startsWith("<|im_start|>system\nBe brief.\n\n# Tools\n")).toBe(true);
  });

  it("thinking template: reasoning_content of the turn after the last query is rendered in <think>", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", {
      messages: [
        { role: "user", content: "2+2?" },
        { role: "assistant", content: "4", reasoning_content: "simple sum" },
        { role: "user", content: "and 3+3?" },
      ],
    });
    // The assistant turn precedes the last user query, so its reasoning is dropped.
    expect(text).toBe("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n");
  });

  it("Qwen2-VL: tool turns render with role names only (its template has no tool support)", () => {
    const text = renderChatPrompt("qwen2_5_vl", "qwen2vl", { messages: TOOL_TURNS, tools: TOOLS });
    expect(text).toBe(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\nSunny<|im_end|>\n<|im_start|>tool\nCloudy, 21C<|im_end|>\n<|im_start|>assistant\n",
    );
  });
});

describe("Python tojson number text (Jinja2 in transformers)", () => {
  it("tool-call arguments keep their lexemes: 1.0, 1e+20, big ints, -0.0, 1.5e-07", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [
        { role: "user", content: "go" },
        {
          role: "assistant",
          content: "",
          tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: '{"a": 1.0, "b": 1e20, "d": 12345678901234567890, "e": -0.0, "f": 1.5e-7}' } }],
        },
        { role: "tool", content: "ok" },
      ],
    });
    expect(text).toContain('{"name": "f", "arguments": {"a": 1.0, "b": 1e+20, "d": 12345678901234567890, "e": -0.0, "f": 1.5e-07}}');
  });

  it("numbers in tools follow the value policy: non-integral exact, integral as int", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [{ role: "user", content: "x" }],
      tools: [{ type: "function", function: { name: "f", parameters: { a: 0.5, b: 1.5e-7, c: 3, d: 1e20, e: 0.00001 } } }],
    });
    expect(text).toContain('"parameters": {"a": 0.5, "b": 1.5e-07, "c": 3, "d": 1e+20, "e": 1e-05}');
  });

  it("a user's text that looks like a sentinel is left alone", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [{ role: "user", content: '"@kvedge-pynum-abc-0@"' }],
      tools: [{ type: "function", function: { name: "f", parameters: { b: 1e20 } } }],
    });
    expect(text).toContain('<|im_start|>user\n"@kvedge-pynum-abc-0@"<|im_end|>');
    expect(text).toContain('{"b": 1e+20}');
  });

  it("draws a sentinel nonce only for a render that has a number to swap (a plain chat turn draws none)", () => {
    const draws = vi.spyOn(crypto, "getRandomValues");
    try {
      renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: [{ role: "user", content: "x" }], tools: [{ type: "function", function: { name: "f", parameters: { a: 0.5, c: 3 } } }] });
      expect(draws).not.toHaveBeenCalled();
      const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: [{ role: "user", content: "x" }], tools: [{ type: "function", function: { name: "f", parameters: { d: 1e20 } } }] });
      expect(draws).toHaveBeenCalledTimes(1);
      expect(text).toContain('{"d": 1e+20}');
    } finally {
      draws.mockRestore();
    }
  });
});

describe("missing content, continue_final_message, thinking switches", () => {
  it("assistant turn with tool_calls and no content key renders (content → \"\")", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
        { role: "tool", content: "done" },
      ],
    });
    expect(text).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it("continue_final_message: the final assistant text follows the generation prompt", () => {
    const req = {
      messages: [
        { role: "user", content: "Count to 3" },
        { role: "assistant", content: "1, 2," },
      ],
      continue_final_message: true,
    };
    const p = preparePrompt(req, { family: "qwen3_vl", templateId: "qwen3vl-instruct" });
    expect(p.text).toBe("<|im_start|>user\nCount to 3<|im_end|>\n<|im_start|>assistant\n1, 2,");
    expect(p.assistantPrefix).toBe("1, 2,");
    const thinking = preparePrompt(req, { family: "qwen3_vl", templateId: "qwen3vl-thinking" });
    expect(thinking.text).toBe("<|im_start|>user\nCount to 3<|im_end|>\n<|im_start|>assistant\n<think>\n1, 2,");
  });

  it("without continue_final_message a final assistant message is re-labelled user (SGLang)", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", {
      messages: [
        { role: "user", content: "Count to 3" },
        { role: "assistant", content: "1, 2," },
      ],
    });
    expect(text).toBe("<|im_start|>user\nCount to 3<|im_end|>\n<|im_start|>user\n1, 2,<|im_end|>\n<|im_start|>assistant\n");
  });

  it("thinking template ignores enable_thinking=false (the template has no switch)", () => {
    const on = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: VIDEO_THEN_TEXT });
    const off = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: VIDEO_THEN_TEXT, chat_template_kwargs: { enable_thinking: false } });
    const effortNone = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: VIDEO_THEN_TEXT, reasoning_effort: "none" } as never);
    expect(off).toBe(on);
    expect(effortNone).toBe(on);
  });

  it("template failures are client errors", () => {
    // A lone assistant message continued leaves no messages: refused before rendering.
    expect(() =>
      renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: [{ role: "assistant", content: "x" }], continue_final_message: true } as never),
    ).toThrow(InvalidRequestError);
  });
});
