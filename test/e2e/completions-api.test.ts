/**
 * `/v1/completions` end to end with the real `openai` SDK against the local fleet: the raw prompt
 * (no chat template) routed by the same index as chat, stream and not, `echo`, integer `logprobs`,
 * `n` over a batch of prompts, `stop`, token-array prompts, and usage with cached_tokens.
 */
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/local-fleet.ts";
import { sdkFleet } from "../helpers/sdk-client.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";

/** A long raw prompt, so cache ratios are measured over many blocks. */
const LONG = `Story: ${Array.from({ length: 100 }, (_, i) => `Line ${i} of a long tale about a lighthouse.`).join(" ")}`;

describe("openai SDK: the Completions API", () => {
  let fleet: Fleet;
  let client: OpenAI;
  sdkFleet({ workers: 2 }, (f, c) => {
    fleet = f;
    client = c;
  });

  it("non-stream: the raw prompt's answer; a repeat goes to the same worker with its prompt cached", async () => {
    const prompt = `${LONG} ${simOutputMarker("The keeper slept.")}`;
    const first = await client.completions.create({ model: fleet.model, prompt, max_tokens: 50 }).withResponse();
    expect(first.data.object).toBe("text_completion");
    expect(first.data.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(first.data.choices).toEqual([{ index: 0, text: "The keeper slept.", logprobs: null, finish_reason: "stop" }]);
    // The raw prompt, not a chat rendering of it: exactly its own tokens.
    expect(first.data.usage!.prompt_tokens).toBe(getQwenTokenizer("qwen3_vl").encode(prompt, "").length);
    const again = await client.completions.create({ model: fleet.model, prompt, max_tokens: 50 }).withResponse();
    expect(again.response.headers.get("x-kvedge-worker")).toBe(first.response.headers.get("x-kvedge-worker"));
    const u = again.data.usage as OpenAI.CompletionUsage & { prompt_tokens_details: { cached_tokens: number } };
    expect(u.prompt_tokens_details.cached_tokens / u.prompt_tokens).toBeGreaterThanOrEqual(0.95);
  });

  it("echo, stop and default max_tokens (16)", async () => {
    const echoed = await client.completions.create({ model: fleet.model, prompt: `Say: ${simOutputMarker("hello there")}`, echo: true });
    expect(echoed.choices[0]!.text).toBe(`Say: ${simOutputMarker("hello there")}hello there`);
    const stopped = await client.completions.create({ model: fleet.model, prompt: `Count: ${simOutputMarker("one two three four")}`, stop: [" three"] });
    expect(stopped.choices[0]!.text).toBe("one two");
    const long = await client.completions.create({ model: fleet.model, prompt: `Ramble: ${simOutputMarker("word ".repeat(40))}` });
    expect(long.usage!.completion_tokens).toBe(16);
    expect(long.choices[0]!.finish_reason).toBe("length");
  });

  it("logprobs: tokens, token_logprobs, top_logprobs with that many alternatives, text offsets", async () => {
    const answer = "Waves hit rocks.";
    const r = await client.completions.create({ model: fleet.model, prompt: `Sea: ${simOutputMarker(answer)}`, logprobs: 2, max_tokens: 30 });
    const lp = r.choices[0]!.logprobs!;
    expect(lp.tokens!.slice(0, -1).join("")).toBe(answer);
    expect(lp.token_logprobs).toHaveLength(lp.tokens!.length);
    for (const top of lp.top_logprobs!) expect(Object.keys(top)).toHaveLength(2);
    let at = 0;
    lp.tokens!.forEach((t, i) => {
      expect(lp.text_offset![i]).toBe(at);
      at += t.length;
    });
  });

  it("a batch of prompts with n = 2: choices numbered prompt × n, each prompt's own answer; token-array prompts", async () => {
    const r = await client.completions.create({ model: fleet.model, prompt: [`A ${simOutputMarker("alpha")}`, `B ${simOutputMarker("beta")}`], n: 2, max_tokens: 10 });
    expect(r.choices.map((c) => [c.index, c.text])).toEqual([
      [0, "alpha"],
      [1, "alpha"],
      [2, "beta"],
      [3, "beta"],
    ]);
    const ids = getQwenTokenizer("qwen3_vl").encode(LONG, "");
    const t = await client.completions.create({ model: fleet.model, prompt: ids, max_tokens: 4 });
    expect(t.usage!.prompt_tokens).toBe(ids.length);
    const batch = await client.completions.create({ model: fleet.model, prompt: [ids, ids.slice(0, 20)], max_tokens: 4 });
    expect(batch.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(batch.usage!.prompt_tokens).toBe(ids.length + 20);
  });

  it("stream: text deltas, finish_reason, a usage chunk, [DONE]; echo comes first", async () => {
    const answer = "Gulls cry at dawn.";
    const stream = await client.completions.create({ model: fleet.model, prompt: `Birds: ${simOutputMarker(answer)}`, stream: true, stream_options: { include_usage: true }, echo: true });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe("text_completion");
      for (const c of chunk.choices) {
        text += c.text;
        finish = c.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(`Birds: ${simOutputMarker(answer)}${answer}`);
    expect(finish).toBe("stop");
    expect(usage!.completion_tokens).toBeGreaterThan(0);
  });

  it("refused: suffix, echo with logprobs, a streamed batch — 400s naming the field", async () => {
    const cases: [OpenAI.CompletionCreateParamsNonStreaming, string][] = [
      [{ model: fleet.model, prompt: "x", suffix: "y" }, "suffix"],
      [{ model: fleet.model, prompt: "x", echo: true, logprobs: 1 }, "echo"],
      [{ model: fleet.model, prompt: ["x", "y"], stream: true } as unknown as OpenAI.CompletionCreateParamsNonStreaming, "prompt"],
      [{ model: fleet.model, prompt: "x", logprobs: 9 }, "logprobs"],
    ];
    for (const [params, param] of cases) {
      const err = await client.completions.create(params).then(() => null, (e: unknown) => e);
      expect(err, param).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
    }
  });
});
