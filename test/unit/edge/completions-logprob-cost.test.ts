/**
 * `/v1/completions` streams logprobs through the same cumulative frames as chat, so the same cost
 * bound applies (src/proxy/stream-cost.ts): a stream with `logprobs` past it goes only to workers
 * that stream increments, and is the client's 400 when the pool has none, before any worker is
 * called. A short one is served.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatDeps } from "../../../src/edge/chat.ts";
import { handleCompletions } from "../../../src/edge/completions/handler.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { RefusingWorker } from "../../helpers/refusing-worker.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const worker = new RefusingWorker();

beforeAll(async () => {
  await initHashing();
  await worker.start();
});

afterAll(() => worker.close());

// A cumulative-frame worker (SGLang's default): incrementalStreaming false.
const deps = (): ChatDeps => worker.deps(MODEL);

const complete = (body: Record<string, unknown>) =>
  handleCompletions(new Request("http://edge/v1/completions", { method: "POST", body: JSON.stringify({ model: MODEL, prompt: "Once upon a time", ...body }) }), deps()).catch((e: unknown) => e);

describe("completions: streamed logprobs on cumulative-frame workers", () => {
  it("past the bound: 400 logprobs_stream_too_costly naming max_tokens, and no worker is called", async () => {
    worker.calls = 0;
    const err = await complete({ stream: true, logprobs: 5, max_tokens: 4_000 });
    expect(err).toMatchObject({ code: "logprobs_stream_too_costly", param: "max_tokens" });
    expect(worker.calls).toBe(0);
  });

  it("within the bound, or without logprobs or streaming: the worker is called", async () => {
    for (const body of [{ stream: true, logprobs: 5, max_tokens: 100 }, { stream: true, max_tokens: 4_000 }, { logprobs: 5, max_tokens: 4_000 }]) {
      worker.calls = 0;
      await complete(body);
      expect(worker.calls, JSON.stringify(body)).toBe(1);
    }
  });
});
