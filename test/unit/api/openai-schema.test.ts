import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidRequestError, KvedgeError, PayloadTooLargeError, httpStatusOf } from "../../../src/api/errors.ts";
import { DEFAULT_LIMITS, parseLimits } from "../../../src/api/limits.ts";
import { formatParam, parseChatRequest, readBodyText, utf8ByteLength } from "../../../src/api/validate.ts";

const user = (content: unknown) => ({ role: "user", content });
const req = (extra: Record<string, unknown> = {}) => ({ model: "qwen", messages: [user("hi")], ...extra });
const parse = (body: unknown, limits = DEFAULT_LIMITS) =>
  parseChatRequest(typeof body === "string" ? body : JSON.stringify(body), limits);

function failure(body: unknown, limits = DEFAULT_LIMITS): KvedgeError {
  try {
    parse(body, limits);
  } catch (e) {
    if (e instanceof KvedgeError) return e;
    throw new Error(`non-Kvedge error: ${String(e)}`);
  }
  throw new Error("expected a failure");
}

describe("parseChatRequest: accepted requests", () => {
  it("fills defaults for a minimal request", () => {
    const r = parse(req());
    expect(r).toMatchObject({
      model: "qwen",
      n: 1,
      stream: false,
      min_tokens: 0,
      presence_penalty: 0,
      frequency_penalty: 0,
      ignore_eos: false,
      no_stop_trim: false,
      skip_special_tokens: true,
      continue_final_message: false,
      tool_choice: "none",
      logprobs: false,
    });
    expect(r.max_tokens).toBeUndefined();
    expect(r.temperature).toBeUndefined();
    expect(r.messages).toEqual([{ role: "user", content: "hi" }]);
  });

  it("accepts multimodal content with defaults filled", () => {
    const r = parse(
      req({
        messages: [
          { role: "system", content: "be brief" },
          user([
            { type: "text", text: "what is this" },
            { type: "image_url", image_url: { url: "https://example.com/a.png" } },
            { type: "video_url", video_url: { url: "data:video/mp4;base64,AAAA" } },
            { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } },
            { type: "audio_url", audio_url: { url: "https://example.com/a.wav" } },
          ]),
        ],
      }),
    );
    const parts = r.messages[1]!.content as Array<Record<string, unknown>>;
    expect(parts[1]).toEqual({
      type: "image_url",
      image_url: { url: "https://example.com/a.png", detail: "auto" },
      modalities: "image",
    });
    expect(parts[3]).toEqual({ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } });
  });

  it("ignores unknown fields at every level and treats null as absent", () => {
    const r = parse({
      model: "qwen",
      messages: [{ role: "user", content: "x", name: "bob", extra: 1 }],
      metadata: { a: 1 },
      store: true,
      service_tier: "auto",
      functions: [],
      temperature: null,
      max_tokens: null,
      stream_options: null,
    });
    expect(r).not.toHaveProperty("metadata");
    expect(r).not.toHaveProperty("store");
    expect(r.messages[0]).toEqual({ role: "user", content: "x" });
    expect(r.temperature).toBeUndefined();
  });

  it("lower-cases roles and maps null assistant content to null", () => {
    const r = parse(req({ messages: [{ role: "SYSTEM", content: "s" }, user("u"), { role: "Assistant", content: null }] }));
    expect(r.messages.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
    expect(r.messages[2]!.content).toBeNull();
  });

  it("accepts tool definitions, tool results and assistant tool calls", () => {
    const r = parse(
      req({
        tools: [{ type: "function", function: { name: "get", parameters: { type: "object" } } }],
        messages: [
          user("weather?"),
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c1", type: "function", function: { name: "get", arguments: '{"city":"x"}' } }],
          },
          { role: "tool", tool_call_id: "c1", content: "sunny" },
        ],
      }),
    );
    expect(r.tool_choice).toBe("auto");
    expect(r.tools![0]!.function.strict).toBe(false);
  });

  it("folds reasoning_effort into chat_template_kwargs without overriding explicit keys", () => {
    expect(parse(req({ reasoning_effort: "none" })).chat_template_kwargs).toEqual({ thinking: false, enable_thinking: false });
    expect(
      parse(req({ reasoning_effort: "high", chat_template_kwargs: { enable_thinking: false } })).chat_template_kwargs,
    ).toEqual({ thinking: true, enable_thinking: false });
  });

  it("normalises stop to a list and accepts response formats", () => {
    expect(parse(req({ stop: "END" })).stop).toEqual(["END"]);
    expect(parse(req({ response_format: { type: "json_object" } })).response_format).toEqual({ type: "json_object" });
    expect(parse(req({ response_format: { type: "json_schema", schema: { type: "object" } } })).response_format).toMatchObject({
      type: "json_schema",
      schema: { type: "object" },
    });
    expect(parse(req({ response_format: { type: "structural_tag", structures: [], triggers: ["<"] } })).response_format).toEqual({
      type: "structural_tag",
      structures: [],
      triggers: ["<"],
    });
  });

  it("does not count brackets inside strings (with escaped quotes) towards the depth limit", () => {
    const tricky = `[[[[\\"{{{{ \\\\`.repeat(50);
    const r = parse(req({ messages: [user(tricky)], chat_template_kwargs: { a: [[["x\\"]]] } }));
    expect(r.messages[0]!.content).toBe(tricky);
  });

  it("accepts the off values of refused features", () => {
    const r = parse(req({ logprobs: false, top_logprobs: 0, rid: null, cache_salt: null, return_hidden_states: false }));
    expect(r.logprobs).toBe(false);
  });

  it("accepts what SGLang serves: logprobs, forced tools, continuous usage, reasoning switches", () => {
    const tools = [{ function: { name: "a" } }];
    const r = parse(
      req({
        logprobs: true,
        top_logprobs: 5,
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
        tools,
        tool_choice: { type: "function", function: { name: "a" } },
        separate_reasoning: false,
        stream_reasoning: false,
      }),
    );
    expect(r).toMatchObject({ logprobs: true, top_logprobs: 5, separate_reasoning: false, stream_reasoning: false });
    expect(r.stream_options).toEqual({ include_usage: true, continuous_usage_stats: true });
    expect(parse(req({ tools, tool_choice: "required" })).tool_choice).toBe("required");
    expect(parse(req()).separate_reasoning).toBe(true);
  });
});

type Case = [name: string, body: unknown, cls: new (...a: never[]) => KvedgeError, status: number, param: string | null];

const big = "x".repeat(200);
const REJECTS: Case[] = [
  ["empty body", "", InvalidRequestError, 400, null],
  ["whitespace body", "  \n", InvalidRequestError, 400, null],
  ["invalid JSON", '{"model": "q", ', InvalidRequestError, 400, null],
  ["JSON array", "[]", InvalidRequestError, 400, null],
  ["JSON string", '"hi"', InvalidRequestError, 400, null],
  ["JSON null", "null", InvalidRequestError, 400, null],
  ["missing messages", { model: "q" }, InvalidRequestError, 400, "messages"],
  ["empty messages", { model: "q", messages: [] }, InvalidRequestError, 400, "messages"],
  ["messages not array", { model: "q", messages: "hi" }, InvalidRequestError, 400, "messages"],
  ["missing model", { messages: [user("x")] }, InvalidRequestError, 400, "model"],
  ["model wrong type", { model: 5, messages: [user("x")] }, InvalidRequestError, 400, "model"],
  ["empty model", { model: "", messages: [user("x")] }, InvalidRequestError, 400, "model"],
  ["unknown role", req({ messages: [{ role: "robot", content: "x" }] }), InvalidRequestError, 400, "messages[0].role"],
  ["message not object", req({ messages: ["hi"] }), InvalidRequestError, 400, "messages[0]"],
  ["user content null", req({ messages: [user(null)] }), InvalidRequestError, 400, "messages[0].content"],
  ["content number", req({ messages: [user(5)] }), InvalidRequestError, 400, "messages[0].content"],
  ["unknown part type", req({ messages: [user([{ type: "file", file: {} }])] }), InvalidRequestError, 400, "messages[0].content[0].type"],
  ["text part without text", req({ messages: [user([{ type: "text" }])] }), InvalidRequestError, 400, "messages[0].content[0].text"],
  [
    "image url wrong type",
    req({ messages: [user([{ type: "text", text: "a" }, { type: "image_url", image_url: { url: 3 } }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[1].image_url.url",
  ],
  [
    "image url as bare string",
    req({ messages: [user([{ type: "image_url", image_url: "https://x/y.png" }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[0].image_url",
  ],
  [
    "file path image",
    req({ messages: [user([{ type: "image_url", image_url: { url: "/etc/passwd" } }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[0].image_url.url",
  ],
  [
    "file:// video",
    req({ messages: [user([{ type: "video_url", video_url: { url: "file:///x.mp4" } }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[0].video_url.url",
  ],
  [
    "bad detail",
    req({ messages: [user([{ type: "image_url", image_url: { url: "https://x/y", detail: "ultra" } }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[0].image_url.detail",
  ],
  [
    "thinking part in user message",
    req({ messages: [user([{ type: "thinking", thinking: "hm" }])] }),
    InvalidRequestError,
    400,
    "messages[0].content[0].type",
  ],
  [
    "thinking part with both fields",
    req({ messages: [user("q"), { role: "assistant", content: [{ type: "thinking", thinking: "a", text: "b" }] }] }),
    InvalidRequestError,
    400,
    "messages[1].content[0]",
  ],
  [
    "tool-call arguments not an object",
    req({ messages: [{ role: "assistant", content: "", tool_calls: [{ function: { name: "f", arguments: "[1,2]" } }] }] }),
    InvalidRequestError,
    400,
    "messages[0].tool_calls[0].function.arguments",
  ],
  ["stream not bool", req({ stream: "yes" }), InvalidRequestError, 400, "stream"],
  ["n zero", req({ n: 0 }), InvalidRequestError, 400, "n"],
  ["n float", req({ n: 1.5 }), InvalidRequestError, 400, "n"],
  ["n above limit", req({ n: 9 }), InvalidRequestError, 400, "n"],
  ["max_tokens zero", req({ max_tokens: 0 }), InvalidRequestError, 400, "max_tokens"],
  ["max_tokens negative", req({ max_tokens: -1 }), InvalidRequestError, 400, "max_tokens"],
  ["max_tokens string", req({ max_tokens: "10" }), InvalidRequestError, 400, "max_tokens"],
  ["max_completion_tokens huge", req({ max_completion_tokens: 10_000_000 }), InvalidRequestError, 400, "max_completion_tokens"],
  ["max_tokens unsafe integer", req({ max_tokens: 2 ** 60 }), InvalidRequestError, 400, "max_tokens"],
  ["temperature negative", req({ temperature: -0.1 }), InvalidRequestError, 400, "temperature"],
  ["top_p zero", req({ top_p: 0 }), InvalidRequestError, 400, "top_p"],
  ["top_p above one", req({ top_p: 1.1 }), InvalidRequestError, 400, "top_p"],
  ["top_k zero", req({ top_k: 0 }), InvalidRequestError, 400, "top_k"],
  ["min_p above one", req({ min_p: 2 }), InvalidRequestError, 400, "min_p"],
  ["presence_penalty out of range", req({ presence_penalty: 3 }), InvalidRequestError, 400, "presence_penalty"],
  ["repetition_penalty zero", req({ repetition_penalty: 0 }), InvalidRequestError, 400, "repetition_penalty"],
  ["seed float", req({ seed: 1.5 }), InvalidRequestError, 400, "seed"],
  ["logit_bias non-numeric key", req({ logit_bias: { abc: 1 } }), InvalidRequestError, 400, "logit_bias.abc"],
  ["stop number", req({ stop: 5 }), InvalidRequestError, 400, "stop"],
  ["stop empty string", req({ stop: ["a", ""] }), InvalidRequestError, 400, "stop[1]"],
  ["too many stops", req({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), InvalidRequestError, 400, "stop"],
  ["stop too long", req({ stop: ["x".repeat(1025)] }), InvalidRequestError, 400, "stop[0]"],
  ["min_tokens above max", req({ min_tokens: 10, max_tokens: 5 }), InvalidRequestError, 400, "min_tokens"],
  ["top_logprobs above 20", req({ logprobs: true, top_logprobs: 21 }), InvalidRequestError, 400, "top_logprobs"],
  ["rid", req({ rid: "abc" }), InvalidRequestError, 400, "rid"],
  ["cache_salt", req({ cache_salt: "s" }), InvalidRequestError, 400, "cache_salt"],
  ["custom_logit_processor", req({ custom_logit_processor: "x" }), InvalidRequestError, 400, "custom_logit_processor"],
  ["lora_path", req({ lora_path: "a" }), InvalidRequestError, 400, "lora_path"],
  ["input_ids", req({ input_ids: [1, 2] }), InvalidRequestError, 400, "input_ids"],
  // Several refused fields: the first in the refused list's order names the error, whatever the body's order.
  ["rid and cache_salt", req({ rid: "a", cache_salt: "s" }), InvalidRequestError, 400, "cache_salt"],
  ["session_id and lora_path", req({ session_id: "x", lora_path: "a" }), InvalidRequestError, 400, "lora_path"],
  ["inactive refused fields skipped", req({ input_ids: [1], cache_salt: null, rid: false, session_id: "x" }), InvalidRequestError, 400, "session_id"],
  ["tool_choice required without tools", req({ tool_choice: "required" }), InvalidRequestError, 400, "tool_choice"],
  [
    "named tool not in list",
    req({ tools: [{ function: { name: "a" } }], tool_choice: { type: "function", function: { name: "b" } } }),
    InvalidRequestError,
    400,
    "tool_choice.function.name",
  ],
  ["tool without name", req({ tools: [{ type: "function", function: {} }] }), InvalidRequestError, 400, "tools[0].function.name"],
  ["tool name with spaces (OpenAI: ^[a-zA-Z0-9_-]{1,64}$)", req({ tools: [{ function: { name: "ok" } }, { function: { name: "a b/c!" } }] }), InvalidRequestError, 400, "tools[1].function.name"],
  ["tool name of 65 characters", req({ tools: [{ function: { name: "f".repeat(65) } }] }), InvalidRequestError, 400, "tools[0].function.name"],
  ["two tools of one name", req({ tools: [{ function: { name: "f" } }, { function: { name: "g" } }, { function: { name: "f" } }] }), InvalidRequestError, 400, "tools[2].function.name"],
  ["json_schema without schema", req({ response_format: { type: "json_schema", json_schema: { name: "x" } } }), InvalidRequestError, 400, "response_format.json_schema.schema"],
  ["unknown response_format", req({ response_format: { type: "yaml" } }), InvalidRequestError, 400, "response_format.type"],
  ["two constraints", req({ response_format: { type: "json_object" }, regex: "a+" }), InvalidRequestError, 400, "regex"],
  ["reasoning_effort bool", req({ reasoning_effort: true }), InvalidRequestError, 400, "reasoning_effort"],
  ["mm_processor_kwargs not object", req({ mm_processor_kwargs: [1] }), InvalidRequestError, 400, "mm_processor_kwargs"],
  ["lone high surrogate", '{"model":"q","messages":[{"role":"user","content":"a\\ud800b"}]}', InvalidRequestError, 400, "messages[0].content"],
  ["lone low surrogate in key", '{"model":"q","messages":[{"role":"user","content":"x"}],"\\udc00":1}', InvalidRequestError, 400, null],
  ["__proto__ key", '{"model":"q","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"__proto__":{"a":1}}}', InvalidRequestError, 400, "chat_template_kwargs.__proto__"],
  ["deep nesting", `{"model":"q","messages":[{"role":"user","content":"x"}],"x":${"[".repeat(100)}${"]".repeat(100)}}`, InvalidRequestError, 400, null],
  ["very deep nesting", "[".repeat(1_000_000), InvalidRequestError, 400, null],
  ["too many messages", req({ messages: Array.from({ length: 1025 }, () => user("x")) }), InvalidRequestError, 400, "messages"],
];

describe("parseChatRequest: rejected requests", () => {
  it.each(REJECTS)("%s", (_name, body, cls, status, param) => {
    const e = failure(body);
    expect(e).toBeInstanceOf(cls);
    expect(httpStatusOf(e)).toBe(status);
    expect(e.param).toBe(param);
    expect(e.message.length).toBeGreaterThan(0);
    expect(e.type).toBe("invalid_request_error");
  });

  it("refuses an oversized body with 413", () => {
    const limits = parseLimits({ maxBodyBytes: 100 });
    const e = failure(req({ messages: [user(big)] }), limits);
    expect(e).toBeInstanceOf(PayloadTooLargeError);
    expect(httpStatusOf(e)).toBe(413);
  });

  it("counts UTF-8 bytes, not UTF-16 units, for the body cap", () => {
    const body = JSON.stringify(req({ messages: [user("é".repeat(40))] }));
    expect(utf8ByteLength(body)).toBe(body.length + 40);
    expect(() => parseChatRequest(body, parseLimits({ maxBodyBytes: body.length + 39 }))).toThrow(PayloadTooLargeError);
    expect(() => parseChatRequest(body, parseLimits({ maxBodyBytes: body.length + 40 }))).not.toThrow();
    expect(utf8ByteLength("😀")).toBe(4);
    expect(utf8ByteLength("\ud800")).toBe(3);
    // Text read by readBodyText was capped in bytes already: only the cheap length test remains.
    expect(() => parseChatRequest(body, parseLimits({ maxBodyBytes: body.length + 39 }), { sizeChecked: true })).not.toThrow();
    expect(() => parseChatRequest(body, parseLimits({ maxBodyBytes: body.length - 1 }), { sizeChecked: true })).toThrow(PayloadTooLargeError);
  });

  it("readBodyText caps UTF-8 bytes while reading, so the edge's sizeChecked is sound", async () => {
    const body = JSON.stringify(req({ messages: [user("é".repeat(40))] }));
    const bytes = new TextEncoder().encode(body);
    for (const headers of [{}, { "content-length": String(bytes.length) }] as Record<string, string>[]) {
      const request = () => ({ body: new Response(bytes).body, headers: new Headers(headers), arrayBuffer: async () => bytes.slice().buffer });
      await expect(readBodyText(request(), { maxBodyBytes: bytes.length - 1 })).rejects.toBeInstanceOf(PayloadTooLargeError);
      expect(await readBodyText(request(), { maxBodyBytes: bytes.length })).toBe(body);
    }
  });

  it("enforces per-message, total, part, media and URL limits with precise params", () => {
    const limits = parseLimits({ maxMessageChars: 10, maxTotalChars: 15, maxContentParts: 2, maxMediaItems: 1, maxUrlChars: 30 });
    expect(failure(req({ messages: [user("x".repeat(11))] }), limits).param).toBe("messages[0].content");
    expect(failure(req({ messages: [user("x".repeat(8)), user("y".repeat(8))] }), limits).param).toBe("messages");
    const img = (url: string) => ({ type: "image_url", image_url: { url } });
    expect(failure(req({ messages: [user([img("https://a/1"), img("https://a/2"), img("https://a/3")])] }), limits).param).toBe(
      "messages[0].content",
    );
    expect(failure(req({ messages: [user([img("https://a/1")]), user([img("https://a/2")])] }), limits).param).toBe(
      "messages[1].content[0]",
    );
    expect(failure(req({ messages: [user([img(`https://a/${"p".repeat(40)}`)])] }), limits).param).toBe(
      "messages[0].content[0].image_url.url",
    );
    // the first part over either limit is named; a part over both is named for the count
    const long = `https://a/${"p".repeat(40)}`;
    expect(failure(req({ messages: [user([img("https://a/1"), img(long)])] }), limits).message).toBe("Too many media items (limit 1).");
    expect(failure(req({ messages: [user([img("https://a/1"), img(long)])] }), limits).param).toBe("messages[0].content[1]");
    expect(failure(req({ messages: [user([img(long), img("https://a/2")])] }), limits).param).toBe("messages[0].content[0].image_url.url");
    // data: URLs are bounded by the body size only
    expect(() => parse(req({ messages: [user([img(`data:image/png;base64,${"A".repeat(100)}`)])] }), limits)).not.toThrow();
    expect(failure(req({ messages: [user("x".repeat(11))] }), limits).code).toBe("limit_exceeded");
  });
});

describe("parseChatRequest: completion length bounds", () => {
  it("refuses min_tokens above maxMaxTokens even when max_tokens is absent (it would be forwarded as min_new_tokens)", () => {
    const e = failure(req({ min_tokens: 100_000_000 }));
    expect(e.code).toBe("limit_exceeded");
    expect(e.param).toBe("min_tokens");
    expect(e.message).toBe(`min_tokens must be at most ${DEFAULT_LIMITS.maxMaxTokens}.`);
    const limits = parseLimits({ maxMaxTokens: 100 });
    expect(parse(req({ min_tokens: 100 }), limits).min_tokens).toBe(100);
    expect(failure(req({ min_tokens: 101 }), limits).param).toBe("min_tokens");
    // with a maximum, the existing rule still speaks first
    expect(failure(req({ min_tokens: 50, max_tokens: 10 }), limits).message).toMatch(/exceeds the maximum \(10\)/);
    expect(failure(req({ max_tokens: 101 }), limits).param).toBe("max_tokens");
  });
});

describe("parseChatRequest: the string and key walk", () => {
  it("names the same offender as before when several values are bad: a container's own values first, then its children last-first", () => {
    const bad = "a\ud800";
    const text = (members: string) => `{"model":"q","messages":[{"role":"user","content":"x"}],${members}}`;
    expect(failure(text(`"a":{"b":"${bad}"},"c":"${bad}"`)).param).toBe("c");
    expect(failure(text(`"a":{"b":"${bad}"},"d":[1,{"e":"${bad}"}]`)).param).toBe("d[1].e");
    expect(failure(text(`"a":[{"b":[[{"c":"${bad}"}]]}],"z":0`)).param).toBe("a[0].b[0][0].c");
    expect(failure(text(`"a":[{"b":[[{"__proto__":1}]]}]`)).param).toBe("a[0].b[0][0].__proto__");
    expect(failure(text(`"a":{"k":[{"\udc00":1}]}`)).param).toBe("a.k[0]");
  });
});

describe("parseChatRequest: never throws anything but KvedgeError", () => {
  const check = (text: string) => {
    try {
      parseChatRequest(text, DEFAULT_LIMITS);
    } catch (e) {
      if (!(e instanceof InvalidRequestError) && !(e instanceof PayloadTooLargeError)) throw e;
      expect([400, 413]).toContain(httpStatusOf(e));
    }
  };

  it("for arbitrary JSON values", () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => check(JSON.stringify(v) ?? "null")), { numRuns: 500 });
  });

  it("for arbitrary strings", () => {
    fc.assert(fc.property(fc.string({ unit: "binary" }), check), { numRuns: 500 });
  });

  it("for request-shaped objects with random field values", () => {
    const anyValue = fc.oneof(fc.jsonValue(), fc.constant(null), fc.string(), fc.integer(), fc.double({ noNaN: true }));
    const part = fc.record(
      {
        type: fc.constantFrom("text", "image_url", "video_url", "input_audio", "thinking", "nope"),
        text: anyValue,
        image_url: fc.oneof(anyValue, fc.record({ url: anyValue, detail: anyValue })),
        video_url: fc.oneof(anyValue, fc.record({ url: anyValue })),
      },
      { requiredKeys: ["type"] },
    );
    const message = fc.record(
      {
        role: fc.constantFrom("user", "system", "assistant", "tool", "developer", "USER", "x"),
        content: fc.oneof(anyValue, fc.array(part, { maxLength: 4 })),
        tool_calls: fc.oneof(anyValue, fc.array(fc.record({ function: fc.record({ name: anyValue, arguments: anyValue }) }))),
      },
      { requiredKeys: ["role"] },
    );
    const body = fc.record(
      {
        model: fc.oneof(fc.constant("qwen"), anyValue),
        messages: fc.oneof(fc.array(message, { maxLength: 4 }), anyValue),
        n: anyValue,
        stop: anyValue,
        max_tokens: anyValue,
        temperature: anyValue,
        response_format: fc.oneof(anyValue, fc.record({ type: fc.constantFrom("json_schema", "json_object", "text"), schema: anyValue })),
        tools: anyValue,
        tool_choice: anyValue,
        stream_options: anyValue,
        reasoning_effort: anyValue,
      },
      { requiredKeys: [] },
    );
    fc.assert(fc.property(body, (b) => check(JSON.stringify(b))), { numRuns: 1000 });
  });
});

describe("helpers", () => {
  it("formats params", () => {
    expect(formatParam(["messages", 2, "content", 0, "image_url", "url"])).toBe("messages[2].content[0].image_url.url");
    expect(formatParam([])).toBeNull();
    expect(formatParam([3])).toBe("[3]");
  });

  const streamOf = (...chunks: Uint8Array[]) =>
    new ReadableStream<Uint8Array>({
      start(c) {
        for (const ch of chunks) c.enqueue(ch);
        c.close();
      },
    });

  /** A request body as the runtime hands it over: `arrayBuffer` reads the whole stream, as runtimes do. */
  const source = (chunks: Uint8Array[], headers: Record<string, string> = {}, opts: { nativeRead?: boolean } = {}) => {
    const body = streamOf(...chunks);
    return {
      body,
      headers: new Headers(headers),
      arrayBuffer: async () => {
        if (opts.nativeRead === false) throw new Error("the body must be read chunk by chunk");
        return new Response(body).arrayBuffer();
      },
    };
  };

  it("readBodyText without a framing length reads chunk by chunk: caps bytes, checks UTF-8", async () => {
    const enc = new TextEncoder();
    const chunked = (...chunks: Uint8Array[]) => source(chunks, {}, { nativeRead: false });
    await expect(readBodyText(chunked(enc.encode("héllo")), { maxBodyBytes: 100 })).resolves.toBe("héllo");
    // a multi-byte character split across chunks
    const bytes = enc.encode("é");
    await expect(readBodyText(chunked(bytes.slice(0, 1), bytes.slice(1)), { maxBodyBytes: 100 })).resolves.toBe("é");
    await expect(readBodyText(chunked(enc.encode("x".repeat(60)), enc.encode("x".repeat(60))), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(
      PayloadTooLargeError,
    );
    await expect(readBodyText(chunked(new Uint8Array([0xff, 0xfe])), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(readBodyText({ body: null, headers: new Headers(), arrayBuffer: async () => new ArrayBuffer(0) })).resolves.toBe("");
    // With Transfer-Encoding the declared length says nothing about what arrives: chunk by chunk, capped.
    const both = source([enc.encode("x".repeat(60)), enc.encode("x".repeat(60))], { "content-length": "10", "transfer-encoding": "chunked" }, { nativeRead: false });
    await expect(readBodyText(both, { maxBodyBytes: 100 })).rejects.toBeInstanceOf(PayloadTooLargeError);
    // A real Request with a string body (no Content-Length header of its own).
    await expect(readBodyText(new Request("http://edge.test/", { method: "POST", body: "héllo" }), { maxBodyBytes: 100 })).resolves.toBe("héllo");
  });

  it("readBodyText with a framing Content-Length reads the body in one go, with the same cap and UTF-8 checks", async () => {
    const enc = new TextEncoder();
    const bytes = enc.encode("é");
    const framed = (length: string, ...chunks: Uint8Array[]) => source(chunks, { "content-length": length });
    await expect(readBodyText(framed("5", enc.encode("hé"), bytes.slice(0, 1), bytes.slice(1)), { maxBodyBytes: 100 })).resolves.toBe("héé");
    await expect(readBodyText(framed("2", new Uint8Array([0x7b, 0xff])), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(readBodyText(framed("1", new Uint8Array([0xe9])), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(InvalidRequestError);
    // Declared over the cap: refused before a byte is read.
    await expect(readBodyText(source([], { "content-length": "101" }, { nativeRead: false }), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(PayloadTooLargeError);
    // A body whose length differs from its header's is refused (over the cap: 413).
    await expect(readBodyText(framed("10", enc.encode("x".repeat(101))), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(PayloadTooLargeError);
    await expect(readBodyText(framed("10", enc.encode("x".repeat(8)), enc.encode("x".repeat(8))), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(readBodyText(framed("10", enc.encode("abc")), { maxBodyBytes: 100 })).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(readBodyText(framed("0"), { maxBodyBytes: 100 })).resolves.toBe("");
    // A read the runtime fails (a dropped connection) is the client's 400.
    await expect(readBodyText({ body: streamOf(), headers: new Headers({ "content-length": "3" }), arrayBuffer: () => Promise.reject(new Error("reset")) })).rejects.toBeInstanceOf(InvalidRequestError);
  });
});
