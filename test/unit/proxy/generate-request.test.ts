import { describe, expect, it } from "vitest";
import { InternalError } from "../../../src/api/errors.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import {
  buildGenerateBody,
  buildSamplingParams,
  mmHashesAllowed,
  newRequestId,
  outputCap,
} from "../../../src/proxy/generate-request.ts";
import type { SglangSamplingParams } from "../../../src/proxy/sglang-wire.ts";

// stop_regex is refused by default (limits.ts maxStopRegexes); the mapping is what an operator who allows it gets.
const parse = (extra: Record<string, unknown> = {}) =>
  parseChatRequest(JSON.stringify({ model: "qwen", messages: [{ role: "user", content: "hi" }], ...extra }), { ...DEFAULT_LIMITS, maxStopRegexes: 4 });

/** SamplingParams keys that exist in SGLang (python/sglang/srt/sampling/sampling_params.py @9d147fd L75-273); anything else is a 500 there. */
const SGLANG_SAMPLING_KEYS = new Set([
  "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
  "frequency_penalty", "repetition_penalty", "stop", "stop_token_ids", "stop_regex", "n", "ignore_eos",
  "no_stop_trim", "skip_special_tokens", "spaces_between_special_tokens", "json_schema", "regex", "ebnf",
  "structural_tag", "logit_bias", "sampling_seed", "stream_interval", "custom_params",
]);

const BASE: SglangSamplingParams = {
  max_new_tokens: null,
  min_new_tokens: 0,
  temperature: 1,
  top_p: 1,
  top_k: -1,
  min_p: 0,
  presence_penalty: 0,
  frequency_penalty: 0,
  repetition_penalty: 1,
  stop: [],
  n: 1,
  ignore_eos: false,
  no_stop_trim: false,
  skip_special_tokens: true,
  spaces_between_special_tokens: true,
};

type Row = [name: string, request: Record<string, unknown>, expected: Partial<SglangSamplingParams> & Record<string, unknown>];

const TABLE: Row[] = [
  ["defaults: explicit null max_new_tokens (absent would mean 128)", {}, {}],
  ["max_tokens → max_new_tokens", { max_tokens: 64 }, { max_new_tokens: 64 }],
  ["max_completion_tokens wins over max_tokens", { max_tokens: 64, max_completion_tokens: 32 }, { max_new_tokens: 32 }],
  ["min_tokens → min_new_tokens", { min_tokens: 3, max_tokens: 10 }, { min_new_tokens: 3, max_new_tokens: 10 }],
  ["sampling values pass through", { temperature: 0, top_p: 0.9, top_k: 20, min_p: 0.05, repetition_penalty: 1.1 }, { temperature: 0, top_p: 0.9, top_k: 20, min_p: 0.05, repetition_penalty: 1.1 }],
  ["penalties pass through", { presence_penalty: 0.5, frequency_penalty: -0.5 }, { presence_penalty: 0.5, frequency_penalty: -0.5 }],
  ["stop string → list", { stop: "END" }, { stop: ["END"] }],
  ["stop list", { stop: ["a", "b"] }, { stop: ["a", "b"] }],
  ["seed → sampling_seed", { seed: 42 }, { sampling_seed: 42 }],
  ["n passes through", { n: 3 }, { n: 3 }],
  ["SGLang extensions pass through", { stop_token_ids: [7], stop_regex: "\\d+", ignore_eos: true, no_stop_trim: true, skip_special_tokens: false }, { stop_token_ids: [7], stop_regex: "\\d+", ignore_eos: true, no_stop_trim: true, skip_special_tokens: false }],
  ["logit_bias passes through", { logit_bias: { "42": -100 } }, { logit_bias: { "42": -100 } }],
  ["json_object → fixed json_schema string", { response_format: { type: "json_object" } }, { json_schema: '{"type": "object"}' }],
  ["json_schema → schema as JSON string", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "integer" } } } } } }, { json_schema: '{"type": "object", "properties": {"a": {"type": "integer"}}}' }],
  ["bare top-level schema accepted", { response_format: { type: "json_schema", schema: { type: "string" } } }, { json_schema: '{"type": "string"}' }],
  ["text format adds nothing", { response_format: { type: "text" } }, {}],
  ["structural_tag → JSON of the whole format", { response_format: { type: "structural_tag", structures: [{ begin: "<a>", end: "</a>" }], triggers: ["<a>"] } }, { structural_tag: '{"type": "structural_tag", "structures": [{"begin": "<a>", "end": "</a>"}], "triggers": ["<a>"]}' }],
  ["regex / ebnf", { regex: "a+" }, { regex: "a+" }],
  ["tools with auto keep special tokens", { tools: [{ type: "function", function: { name: "f" } }] }, { skip_special_tokens: false }],
  ["tools with tool_choice none skip them", { tools: [{ type: "function", function: { name: "f" } }], tool_choice: "none" }, {}],
  ["spaces_between_special_tokens from chat_template_kwargs", { chat_template_kwargs: { spaces_between_special_tokens: false } }, { spaces_between_special_tokens: false }],
  ["user and unknown fields are not forwarded", { user: "u1", foo: "bar" }, {}],
];

describe("buildSamplingParams mapping table", () => {
  it.each(TABLE)("%s", (_name, request, expected) => {
    const params = buildSamplingParams(parse(request));
    expect(params).toEqual({ ...BASE, ...expected });
    for (const key of Object.keys(params)) expect(SGLANG_SAMPLING_KEYS.has(key)).toBe(true);
    expect(params).not.toHaveProperty("max_tokens");
    expect(params).not.toHaveProperty("seed");
  });

  it("applies generation_config defaults under request values", () => {
    const defaults = { temperature: 0.7, top_p: 0.8, top_k: 20, min_p: 0.01, repetition_penalty: 1.05 };
    expect(buildSamplingParams(parse(), defaults)).toMatchObject(defaults);
    expect(buildSamplingParams(parse({ temperature: 0, top_k: 5 }), defaults)).toMatchObject({ ...defaults, temperature: 0, top_k: 5 });
  });

  it("serialises to JSON with an explicit null max_new_tokens", () => {
    expect(JSON.stringify(buildSamplingParams(parse()))).toContain('"max_new_tokens":null');
  });
});

describe("outputCap: maxMaxTokens bounds a request without max_tokens", () => {
  it("caps where the operator's bound is tighter than the context, with an exact prompt count", () => {
    expect(outputCap(4096, { tokens: 1000, exact: true }, 32768, false)).toBe(4096);
    // The context is the tighter bound: nothing sent, SGLang stops at the context by itself.
    expect(outputCap(262144, { tokens: 1000, exact: true }, 262144, false)).toBeNull();
    expect(outputCap(4096, { tokens: 28672, exact: true }, 32768, false)).toBeNull();
    // A lower-bound prompt count could make the worker refuse prompt + cap; auto-truncating workers clamp.
    expect(outputCap(4096, { tokens: 1000, exact: false }, 32768, false)).toBeNull();
    expect(outputCap(4096, { tokens: 1000, exact: true }, 32768, true)).toBeNull();
  });

  it("the cap is max_new_tokens only when the request names no maximum", () => {
    const body = (extra: Record<string, unknown>) =>
      buildGenerateBody(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], ...extra })), { text: "p", defaultMaxNewTokens: 4096 }).sampling_params.max_new_tokens;
    expect(body({})).toBe(4096);
    expect(body({ max_tokens: 10 })).toBe(10);
    expect(body({ max_completion_tokens: 20 })).toBe(20);
    expect(buildGenerateBody(parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }] })), { text: "p" }).sampling_params.max_new_tokens).toBeNull();
  });
});

describe("buildGenerateBody", () => {
  it("builds a text-only body", () => {
    const body = buildGenerateBody(parse({ stream: true }), { text: "<|im_start|>user\nhi", rid: "abc" });
    expect(body).toEqual({ text: "<|im_start|>user\nhi", sampling_params: BASE, stream: true, rid: "abc" });
  });

  it("forwards media and mm_hashes for n = 1", () => {
    const body = buildGenerateBody(parse(), {
      text: "t",
      media: { imageData: ["data:image/png;base64,AA"], videoData: ["https://v/x.mp4"], mmHashes: ["00000000000000aa", "00000000000000bb"] },
    });
    expect(body.image_data).toEqual(["data:image/png;base64,AA"]);
    expect(body.video_data).toEqual(["https://v/x.mp4"]);
    expect(body.mm_hashes).toEqual(["00000000000000aa", "00000000000000bb"]);
    expect(body).not.toHaveProperty("rid");
  });

  it("drops mm_hashes for n > 1 (SGLang would drop them anyway)", () => {
    const req = parse({ n: 2 });
    expect(mmHashesAllowed(req)).toBe(false);
    const body = buildGenerateBody(req, { text: "t", media: { imageData: ["https://i/a.png"], mmHashes: ["00000000000000aa"] } });
    expect(body.image_data).toEqual(["https://i/a.png"]);
    expect(body).not.toHaveProperty("mm_hashes");
    expect(body.sampling_params.n).toBe(2);
  });

  it("refuses a hash list that does not match the media count (a caller bug)", () => {
    expect(() => buildGenerateBody(parse(), { text: "t", media: { imageData: ["https://i/a.png"], mmHashes: ["a", "b"] } })).toThrow(
      InternalError,
    );
  });

  it("omits empty media lists", () => {
    const body = buildGenerateBody(parse(), { text: "t", media: { imageData: [], videoData: [] } });
    expect(Object.keys(body).sort()).toEqual(["sampling_params", "stream", "text"]);
  });

  it("makes 32-hex request ids", () => {
    const a = newRequestId();
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    expect(newRequestId()).not.toBe(a);
  });
});
