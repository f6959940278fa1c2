/**
 * `/v1/completions` request reading (src/api/completions-schema.ts) and answer shaping
 * (src/edge/completions/completion-answer.ts), on `/generate` bodies in SGLang's shape.
 */
import { describe, expect, it } from "vitest";
import { CompletionRequestSchema, promptsOf, refuseUnsupportedCompletion, samplingRequestOf } from "../../../src/api/completions-schema.ts";
import { thrown } from "../../helpers/thrown.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { buildGenerateBody } from "../../../src/proxy/generate-request.ts";
import { completionAnswer } from "../../../src/edge/completions/completion-answer.ts";

const parse = (body: Record<string, unknown>) => CompletionRequestSchema.parse({ model: "m", ...body });

describe("completions request", () => {
  it("prompt forms: a string, strings, token ids, lists of token ids", () => {
    expect(promptsOf(parse({ prompt: "a" }), DEFAULT_LIMITS)).toEqual([{ text: "a" }]);
    expect(promptsOf(parse({ prompt: ["a", "b"] }), DEFAULT_LIMITS)).toEqual([{ text: "a" }, { text: "b" }]);
    expect(promptsOf(parse({ prompt: [1, 2] }), DEFAULT_LIMITS)).toEqual([{ ids: [1, 2] }]);
    expect(promptsOf(parse({ prompt: [[1], [2, 3]] }), DEFAULT_LIMITS)).toEqual([{ ids: [1] }, { ids: [2, 3] }]);
    expect(CompletionRequestSchema.safeParse({ model: "m", prompt: [-1] }).success).toBe(false);
    expect(thrown(() => promptsOf(parse({ prompt: ["a", ""] }), DEFAULT_LIMITS)).param).toBe("prompt[1]");
  });

  it("prompts × n within maxN; a streamed batch refused", () => {
    expect(thrown(() => promptsOf(parse({ prompt: ["a", "b", "c"], n: 3 }), DEFAULT_LIMITS)).message).toContain("at most 8");
    expect(thrown(() => promptsOf(parse({ prompt: ["a", "b"], stream: true }), DEFAULT_LIMITS)).param).toBe("prompt");
  });

  it("refused: suffix, best_of other than n, echo with logprobs", () => {
    expect(thrown(() => refuseUnsupportedCompletion(parse({ prompt: "a", suffix: "b" }))).param).toBe("suffix");
    expect(thrown(() => refuseUnsupportedCompletion(parse({ prompt: "a", best_of: 3 }))).param).toBe("best_of");
    expect(thrown(() => refuseUnsupportedCompletion(parse({ prompt: "a", echo: true, logprobs: 0 }))).param).toBe("echo");
    refuseUnsupportedCompletion(parse({ prompt: "a", best_of: 2, n: 2 }));
  });

  it("sampling maps as the chat path maps it: max_tokens 16 by default, stop, seed, logprobs with their text", () => {
    const body = buildGenerateBody(samplingRequestOf(parse({ prompt: "a", stop: "\n", seed: 7, logprobs: 3, temperature: 0 })), { text: "a" });
    expect(body.sampling_params).toMatchObject({ max_new_tokens: 16, stop: ["\n"], sampling_seed: 7, temperature: 0, n: 1 });
    expect(body).toMatchObject({ return_logprob: true, top_logprobs_num: 3, logprob_start_len: -1, return_text_in_logprobs: true });
  });
});

describe("completions answer", () => {
  const meta = (text: string) => ({
    prompt_tokens: 5,
    completion_tokens: 3,
    cached_tokens: 4,
    finish_reason: { type: "stop", matched: 151645 },
    output_token_logprobs: [
      [-0.1, 1, text.slice(0, 2)],
      [-0.2, 2, text.slice(2)],
      [-0.3, 151645, ""],
    ],
    output_top_logprobs: [
      [
        [-0.1, 1, text.slice(0, 2)],
        [-1.5, 9, "zz"],
      ],
      [
        [-0.2, 2, text.slice(2)],
        [-2.5, 8, "yy"],
      ],
      [[-0.3, 151645, ""]],
    ],
  });

  it("text_completion with echo, batch index offset, logprobs with text offsets after the echo, usage with cached_tokens", () => {
    const sampling = samplingRequestOf(parse({ prompt: "Hi: ", n: 2, logprobs: 2, echo: false }));
    const answer = completionAnswer({ sampling, id: "cmpl-x", echo: "Hi: ", firstIndex: 2 });
    const generate = [0, 1].map((index) => ({ text: "abcd", index, meta_info: meta("abcd") }));
    const { body, usage } = answer.complete(200, JSON.stringify(generate));
    expect(usage).toMatchObject({ prompt_tokens: 5, cached_tokens: 4 });
    const c = body as { object: string; choices: { index: number; text: string; finish_reason: string; logprobs: unknown }[]; usage: { prompt_tokens_details: { cached_tokens: number } } };
    expect(c.object).toBe("text_completion");
    expect(c.choices.map((x) => [x.index, x.text, x.finish_reason])).toEqual([
      [2, "Hi: abcd", "stop"],
      [3, "Hi: abcd", "stop"],
    ]);
    expect(c.choices[0]!.logprobs).toEqual({
      tokens: ["ab", "cd", ""],
      token_logprobs: [-0.1, -0.2, -0.3],
      top_logprobs: [{ ab: -0.1, zz: -1.5 }, { cd: -0.2, yy: -2.5 }, { "": -0.3 }],
      text_offset: [4, 6, 8],
    });
    expect(c.usage.prompt_tokens_details.cached_tokens).toBe(4);
  });
});
