/**
 * The Responses API's translation onto the chat path (src/api/responses-schema.ts) and back
 * (src/edge/responses/response-output.ts): input items become the chat messages the chat path
 * validates and renders to the same prompt as the equivalent chat request; the chat stream becomes
 * an event sequence the real `openai` SDK accumulates (its ResponseStream, fed through a fetch that
 * returns the translated bytes).
 */
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { thrown } from "../../helpers/thrown.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { inputToMessages, refuseUnsupported, ResponseCreateSchema, toChatRequest } from "../../../src/api/responses-schema.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { chatStreamToResponses, type StreamOutcome } from "../../../src/edge/responses/response-output.ts";

const PROFILE = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
const PNG = "data:image/png;base64,iVBORw0KGgo=";

function create(body: Record<string, unknown>) {
  const req = ResponseCreateSchema.parse({ model: "m", ...body });
  refuseUnsupported(req);
  return req;
}

describe("Responses input → chat messages", () => {
  it("a string is one user message", () => {
    expect(inputToMessages("hi")).toEqual([{ role: "user", content: "hi" }]);
  });

  it("an agent turn (reasoning, text, two calls) is one assistant message; outputs are tool messages; developer is system", () => {
    const messages = inputToMessages([
      { role: "developer", content: "Be brief." },
      { type: "message", role: "user", content: [{ type: "input_text", text: "Look:" }, { type: "input_image", image_url: PNG, detail: "low" }, { type: "input_video", video_url: "https://example.com/v.mp4" }] },
      { type: "reasoning", id: "rs_1", summary: [], content: [{ type: "reasoning_text", text: "They want weather." }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
      { type: "function_call", call_id: "call_a", name: "get_weather", arguments: '{"city":"Paris"}' },
      { type: "function_call", call_id: "call_b", name: "get_weather", arguments: '{"city":"Lyon"}' },
      { type: "function_call_output", call_id: "call_a", output: "21" },
      { type: "function_call_output", call_id: "call_b", output: [{ type: "input_text", text: "18" }] },
    ] as never);
    expect(messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: PNG, detail: "low" } }, { type: "video_url", video_url: { url: "https://example.com/v.mp4" } }] },
      {
        role: "assistant",
        content: "Checking.",
        reasoning_content: "They want weather.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city":"Lyon"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_a", content: "21" },
      { role: "tool", tool_call_id: "call_b", content: "18" },
    ]);
  });

  it("unserved items and parts, and malformed items, are 400s naming the item", () => {
    expect(thrown(() => inputToMessages([{ type: "item_reference", id: "x" }] as never)).param).toBe("input[0].type");
    expect(thrown(() => inputToMessages([{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] as never)).param).toBe("input[0].content[0].type");
    expect(thrown(() => inputToMessages([{ type: "message", role: "user", content: 5 }] as never)).param).toMatch(/^input\[0\]\.content/);
    expect(thrown(() => inputToMessages([{ type: "function_call", name: "f", arguments: "{}" }] as never)).param).toBe("input[0].call_id");
    expect(thrown(() => inputToMessages([{ role: "system", content: [{ type: "input_image", image_url: PNG }] }] as never)).param).toBe("input[0].content[0]");
  });

  it("refused fields name themselves", () => {
    expect(thrown(() => create({ input: "x", tools: [{ type: "web_search" }] })).param).toBe("tools[0].type");
    expect(thrown(() => create({ input: "x", background: true })).param).toBe("background");
    expect(thrown(() => create({ input: "x", truncation: "auto" })).param).toBe("truncation");
    expect(thrown(() => create({ input: "x", tool_choice: { type: "allowed_tools", mode: "auto", tools: [] } })).param).toBe("tool_choice");
    expect(create({ input: "x" }).store).toBe(true);
  });
});

describe("Responses request → chat request", () => {
  const req = create({
    input: "Weather in Paris?",
    instructions: "You are terse.",
    tools: [{ type: "function", name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true }],
    tool_choice: { type: "function", name: "get_weather" },
    max_output_tokens: 64,
    reasoning: { effort: "low" },
    text: { format: { type: "json_schema", name: "w", schema: { type: "object" }, strict: true } },
    temperature: 0.5,
    prompt_cache_key: "conv-7",
    safety_identifier: "s-1",
    user: "u-1",
  });
  const history = inputToMessages([{ role: "user", content: "Earlier." }, { role: "assistant", content: "Noted." }] as never);
  const chat = toChatRequest(req, history, inputToMessages(req.input));

  it("maps every field to its chat counterpart, instructions first, history before the new input", () => {
    expect(chat).toEqual({
      model: "m",
      stream: false,
      messages: [
        { role: "system", content: "You are terse." },
        { role: "user", content: "Earlier." },
        { role: "assistant", content: "Noted." },
        { role: "user", content: "Weather in Paris?" },
      ],
      max_completion_tokens: 64,
      temperature: 0.5,
      reasoning_effort: "low",
      prompt_cache_key: "conv-7",
      safety_identifier: "s-1",
      user: "u-1",
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true } }],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      response_format: { type: "json_schema", json_schema: { name: "w", schema: { type: "object" }, strict: true } },
    });
  });

  it("the chat path accepts it and renders the same prompt as the equivalent chat request", () => {
    const parsed = parseChatRequest(JSON.stringify(chat), DEFAULT_LIMITS);
    const direct = parseChatRequest(
      JSON.stringify({
        model: "m",
        messages: [
          { role: "system", content: "You are terse." },
          { role: "user", content: "Earlier." },
          { role: "assistant", content: "Noted." },
          { role: "user", content: "Weather in Paris?" },
        ],
        tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true } }],
        reasoning_effort: "low",
      }),
      DEFAULT_LIMITS,
    );
    expect(preparePrompt(parsed, PROFILE).text).toBe(preparePrompt(direct, PROFILE).text);
  });

  it("a stored turn replayed as history renders as the chat path's own assistant turn with its tool calls", () => {
    const turn = inputToMessages([
      { role: "user", content: "Weather?" },
      { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city": "Paris"}' },
      { type: "function_call_output", call_id: "call_1", output: "21" },
    ] as never);
    const viaResponses = parseChatRequest(JSON.stringify({ model: "m", messages: turn }), DEFAULT_LIMITS);
    const viaChat = parseChatRequest(
      JSON.stringify({
        model: "m",
        messages: [
          { role: "user", content: "Weather?" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
          { role: "tool", tool_call_id: "call_1", content: "21" },
        ],
      }),
      DEFAULT_LIMITS,
    );
    expect(preparePrompt(viaResponses, PROFILE).text).toBe(preparePrompt(viaChat, PROFILE).text);
  });
});

const enc = new TextEncoder();
const frame = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const chunk = (delta: Record<string, unknown>, finish: string | null = null) => frame({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] });

/** Runs chat SSE text through the translator; returns the Responses bytes and the outcome. */
async function translate(chatSse: string[]): Promise<{ text: string; outcome: StreamOutcome | null }> {
  let outcome: StreamOutcome | null = null;
  const req = create({ input: "x", stream: true });
  const source = new ReadableStream<Uint8Array>({
    start(c) {
      for (const s of chatSse) c.enqueue(enc.encode(s));
      c.close();
    },
  });
  const text = await new Response(source.pipeThrough(chatStreamToResponses("resp_1", req, 1, (o) => {
    outcome = o;
  }))).text();
  return { text, outcome };
}

const FULL_STREAM = [
  chunk({ role: "assistant", content: "" }),
  chunk({ reasoning_content: "Think" }),
  chunk({ reasoning_content: "ing." }),
  chunk({ content: "Calling" }),
  chunk({ content: " now." }),
  chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] }),
  chunk({}, "tool_calls"),
  frame({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, prompt_tokens_details: { cached_tokens: 96 }, reasoning_tokens: 5 } }),
  "data: [DONE]\n\n",
];

describe("chat stream → Responses events", () => {
  it("the openai SDK's ResponseStream accumulates reasoning, message and function_call items, usage mapped", async () => {
    const { text } = await translate(FULL_STREAM);
    const client = new OpenAI({ apiKey: "k", baseURL: "http://edge.test/v1", fetch: async () => new Response(text, { headers: { "content-type": "text/event-stream" } }) });
    const stream = client.responses.stream({ model: "m", input: "x" });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    const final = await stream.finalResponse();
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.reasoning_text.delta",
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(final.output).toMatchObject([
      { type: "reasoning", content: [{ type: "reasoning_text", text: "Thinking." }] },
      { type: "message", content: [{ type: "output_text", text: "Calling now." }] },
      { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city": "Paris"}' },
    ]);
    expect(final.usage).toEqual({ input_tokens: 100, input_tokens_details: { cached_tokens: 96, cache_write_tokens: 0 }, output_tokens: 20, output_tokens_details: { reasoning_tokens: 5 }, total_tokens: 120 });
  });

  it("finish_reason length ends in response.incomplete", async () => {
    const { text, outcome } = await translate([chunk({ content: "Cut" }), chunk({}, "length"), "data: [DONE]\n\n"]);
    expect(text).toContain("event: response.incomplete");
    expect(outcome!.status).toBe("incomplete");
    expect(outcome!.response.incomplete_details).toEqual({ reason: "max_output_tokens" });
  });

  it("an error frame becomes an error event (all five fields) and response.failed; a stream cut before [DONE] fails too", async () => {
    const { text, outcome } = await translate([chunk({ content: "Par" }), frame({ error: { message: "worker died", type: "server_error", param: null, code: "upstream_error" } }), "data: [DONE]\n\n"]);
    const events = text
      .trim()
      .split("\n\n")
      .map((b) => JSON.parse(b.split("\n")[1]!.slice(6)) as Record<string, unknown>);
    const error = events.find((e) => e.type === "error")!;
    expect(error).toEqual({ type: "error", code: "upstream_error", message: "worker died", param: null, sequence_number: expect.any(Number) });
    expect(events.at(-1)!.type).toBe("response.failed");
    expect(outcome!.status).toBe("failed");
    const cut = await translate([chunk({ content: "Par" })]);
    expect(cut.outcome!.status).toBe("failed");
    expect(cut.text).toContain('"code":"upstream_incomplete"');
  });
});
