import { describe, expect, it } from "vitest";
import {
  UpstreamError,
  UpstreamRejectedError,
  UpstreamTimeoutError,
  httpStatusOf,
} from "../../../src/api/errors.ts";
import { translateGenerateHttp, translateGenerateResponse } from "../../../src/proxy/translate.ts";
import { upstreamHttpError, upstreamStreamError } from "../../../src/proxy/upstream-error.ts";

// A non-streaming `/generate` answer as SGLang builds it (python/sglang/srt/managers/tokenizer_manager.py @9d147fd L2013-2064).
const RESULT = {
  text: "A grey cat is sitting on a windowsill.",
  output_ids: [32, 19780, 8251, 374, 11699, 389, 264, 3241, 29627, 13, 151645],
  meta_info: {
    id: "9b1c7e4f0a2d4c7e8f3b5a6d1e2f3a4b",
    finish_reason: { type: "stop", matched: 151645 },
    prompt_tokens: 1250,
    weight_version: "default",
    num_retractions: 0,
    reasoning_tokens: 0,
    completion_tokens: 11,
    cached_tokens: 1248,
    cached_tokens_details: { device: 1248, host: 0 },
    image_tokens: 1225,
    dp_rank: 0,
    e2e_latency: 0.412,
  },
};

const ctx = { id: "9b1c7e4f0a2d4c7e8f3b5a6d1e2f3a4b", model: "Qwen/Qwen2.5-VL-7B-Instruct", n: 1, created: 1784131200 };

describe("non-stream translation", () => {
  it("matches SGLang's chat.completion with cached tokens reported", () => {
    const { completion, usage } = translateGenerateResponse(RESULT, ctx);
    expect(completion).toEqual({
      id: ctx.id,
      object: "chat.completion",
      created: 1784131200,
      model: "Qwen/Qwen2.5-VL-7B-Instruct",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: "A grey cat is sitting on a windowsill.", reasoning_content: null, tool_calls: null },
          logprobs: null,
          finish_reason: "stop",
          matched_stop: 151645,
        },
      ],
      usage: {
        prompt_tokens: 1250,
        total_tokens: 1261,
        completion_tokens: 11,
        prompt_tokens_details: { cached_tokens: 1248, image_tokens: 1225 },
        reasoning_tokens: 0,
      },
      metadata: { weight_version: "default" },
    });
    expect(usage).toMatchObject({ prompt_tokens: 1250, cached_tokens: 1248, completion_tokens: 11, image_tokens: 1225 });
    // key order as SGLang serialises usage
    expect(Object.keys(completion.usage)).toEqual(["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details", "reasoning_tokens"]);
  });

  it("maps length, stop strings, graceful abort and empty text", () => {
    const mk = (finish: unknown, text = "x") => ({ text, meta_info: { ...RESULT.meta_info, finish_reason: finish } });
    const one = (r: unknown) => translateGenerateResponse(r, ctx).completion.choices[0]!;
    expect(one(mk({ type: "length", length: 16 }))).toMatchObject({ finish_reason: "length", matched_stop: null });
    expect(one(mk({ type: "stop", matched: "END" }))).toMatchObject({ finish_reason: "stop", matched_stop: "END" });
    expect(one(mk({ type: "abort", message: "client gone", status_code: null }))).toMatchObject({ finish_reason: "abort" });
    // serving_chat.py _build_chat_response: `content=text if text else None`
    expect(one(mk({ type: "stop", matched: 2 }, "")).message.content).toBeNull();
  });

  it("reports cached_tokens 0 explicitly and omits absent media counts", () => {
    const r = { text: "hi", meta_info: { finish_reason: { type: "stop", matched: 1 }, prompt_tokens: 5, completion_tokens: 1, cached_tokens: 0 } };
    const { completion } = translateGenerateResponse(r, ctx);
    expect(completion.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    expect(completion).not.toHaveProperty("metadata");
  });

  it("turns an n > 1 array into n choices with SGLang's usage aggregation", () => {
    const mk = (text: string, completion: number, cached: number) => ({
      text,
      meta_info: { id: `id${text}`, finish_reason: { type: "stop", matched: 7 }, prompt_tokens: 100, completion_tokens: completion, cached_tokens: cached },
    });
    const { completion, usage } = translateGenerateResponse([mk("a", 3, 90), mk("b", 4, 100), mk("c", 5, 100)], { ...ctx, n: 3 });
    expect(completion.choices.map((c) => [c.index, c.message.content])).toEqual([[0, "a"], [1, "b"], [2, "c"]]);
    expect(completion.id).toBe(ctx.id);
    // prompt and cached from the first choice only; completion summed
    expect(usage).toMatchObject({ prompt_tokens: 100, cached_tokens: 90, completion_tokens: 12, total_tokens: 112 });
  });

  it("rejects malformed bodies and wrong result counts as UpstreamError (502)", () => {
    for (const bad of [null, 5, "x", [], { text: "x" }, { meta_info: 5 }, [RESULT, RESULT]]) {
      let err: unknown;
      try {
        translateGenerateResponse(bad, ctx);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(UpstreamError);
      expect(httpStatusOf(err as UpstreamError)).toBe(502);
    }
  });

  it("turns an abort with a status into the matching error", () => {
    const r = { text: "", meta_info: { ...RESULT.meta_info, finish_reason: { type: "abort", message: "too long", status_code: 400 } } };
    expect(() => translateGenerateResponse(r, ctx)).toThrow(UpstreamRejectedError);
    const r5 = { text: "", meta_info: { ...RESULT.meta_info, finish_reason: { type: "abort", message: "oom", status_code: 503 } } };
    expect(() => translateGenerateResponse(r5, ctx)).toThrow(UpstreamError);
  });

  it("translateGenerateHttp parses text and maps status", () => {
    expect(translateGenerateHttp(200, JSON.stringify(RESULT), ctx).completion.choices[0]!.finish_reason).toBe("stop");
    expect(() => translateGenerateHttp(200, "<html>", ctx)).toThrow(UpstreamError);
    expect(() => translateGenerateHttp(400, '{"error":{"message":"bad"}}', ctx)).toThrow(UpstreamRejectedError);
  });
});

describe("upstream error mapping", () => {
  type Row = [status: number, body: string, cls: new (...a: never[]) => Error, clientStatus: number, message: string | RegExp];
  const ROWS: Row[] = [
    [400, '{"error":{"message":"The input (40000 tokens) is longer than the model\'s context length (32768 tokens)."}}', UpstreamRejectedError, 400, /context length/],
    [400, '{"object":"error","message":"Invalid request","type":"Bad Request","param":null,"code":400}', UpstreamRejectedError, 400, "The worker rejected the request (HTTP 400)."],
    [422, '{"detail":[{"loc":["body","text"],"msg":"field required","type":"missing"}]}', UpstreamRejectedError, 422, "The worker rejected the request (HTTP 422)."],
    [400, "Duplicate request ID detected", UpstreamRejectedError, 400, "The worker rejected the request (HTTP 400)."],
    [400, '{"error":{"message":"Failed to load image: connect ECONNREFUSED 10.0.3.7:6379"}}', UpstreamRejectedError, 400, "The worker could not decode a media item of the request."],
    [400, "{\"error\":{\"message\":\"Invalid grammar request: req.grammar_key=('json', '{\\\"type\\\": \\\"object\\\", \\\"patternProperties\\\": {}}')\"}}", UpstreamRejectedError, 400, /could not compile the request's output constraint/],
    [500, "Internal Server Error", UpstreamError, 502, /HTTP 500/],
    [503, '{"object":"error","message":"overloaded","type":"503","param":null,"code":503}', UpstreamError, 502, /HTTP 503/],
    [429, "slow down", UpstreamError, 502, /HTTP 429/],
    [504, "", UpstreamTimeoutError, 504, /did not answer/],
  ];
  it.each(ROWS)("HTTP %i", (status, body, cls, clientStatus, message) => {
    const e = upstreamHttpError(status, body);
    expect(e).toBeInstanceOf(cls);
    expect(httpStatusOf(e)).toBe(clientStatus);
    if (typeof message === "string") expect(e.message).toBe(message);
    else expect(e.message).toMatch(message);
  });

  it("keeps worker details out of the client message, 4xx and 5xx alike (they go to cause, for logs)", () => {
    for (const status of [400, 404, 422, 500]) {
      const e = upstreamHttpError(status, '{"error":{"message":"Failed to fetch http://10.0.0.5:8080/admin: 401 secret-internal-page"}}');
      expect(e.message).not.toMatch(/10\.0\.0\.5|secret|admin/);
      expect(String(e.cause)).toContain("secret-internal-page");
    }
  });

  it("maps inline stream error frames by their code", () => {
    const e = upstreamStreamError({ error: { message: "ctx too long", type: "invalid_request_error", code: 400, retryable: false } });
    expect(e).toBeInstanceOf(UpstreamRejectedError);
    expect(e.message).toBe("The worker rejected the request (HTTP 400).");
    expect(e.cause).toBe("ctx too long");
    expect(upstreamStreamError({ error: { message: "boom", code: 500 } })).toBeInstanceOf(UpstreamError);
    expect(upstreamStreamError({ error: "x" })).toBeInstanceOf(UpstreamError);
  });
});
