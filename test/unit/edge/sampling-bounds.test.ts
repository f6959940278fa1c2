/**
 * The public API's input bounds on the real handlers: token ids a worker would index its embedding
 * or logits with (prompt ids, logit_bias keys, stop_token_ids) stay inside the model's vocabulary,
 * and completions holds its sampling parameters to the same KVEDGE_LIMITS as chat. Each refusal is
 * the client's 400 naming the field, before any worker is called.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatDeps } from "../../../src/edge/chat.ts";
import { handleChatCompletions } from "../../../src/edge/chat.ts";
import { handleCompletions } from "../../../src/edge/completions/handler.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { RefusingWorker } from "../../helpers/refusing-worker.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const VOCAB = getQwenTokenizer("qwen3_vl").vocabSize;
const worker = new RefusingWorker();

beforeAll(async () => {
  await initHashing();
  await worker.start();
});

afterAll(() => worker.close());

const deps = (): ChatDeps => worker.deps(MODEL);

const post = (path: string, body: Record<string, unknown>) => new Request(`http://edge${path}`, { method: "POST", body: JSON.stringify({ model: MODEL, ...body }) });
const complete = (body: Record<string, unknown>) => handleCompletions(post("/v1/completions", { prompt: "Once upon a time", ...body }), deps()).catch((e: unknown) => e);
const chat = (body: Record<string, unknown>) => handleChatCompletions(post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], ...body }), deps()).catch((e: unknown) => e);

async function refused(answer: Promise<unknown>, expected: Record<string, unknown>): Promise<void> {
  worker.calls = 0;
  expect(await answer).toMatchObject(expected);
  expect(worker.calls).toBe(0);
}

describe("token ids inside the model's vocabulary", () => {
  it("the vocabulary counts the added tokens (Qwen3-VL: 151 643 regular + 26 added)", () => {
    expect(VOCAB).toBe(151_669);
  });

  it("completions: a prompt id at or past the vocabulary is a 400 naming it, no worker called", async () => {
    await refused(complete({ prompt: [1, VOCAB] }), { code: "invalid_token_id", param: "prompt[1]" });
    await refused(complete({ prompt: [[1], [2, 3, 0xffffffff]] }), { code: "invalid_token_id", param: "prompt[1][2]" });
  });

  it("completions: the last id of the vocabulary is served", async () => {
    worker.calls = 0;
    await complete({ prompt: [1, VOCAB - 1] });
    expect(worker.calls).toBe(1);
  });

  it("logit_bias keys and stop_token_ids past the vocabulary: 400 naming the entry (chat and completions)", async () => {
    await refused(complete({ logit_bias: { "5": 1, [String(VOCAB)]: -100 } }), { code: "invalid_token_id", param: `logit_bias.${VOCAB}` });
    await refused(chat({ logit_bias: { "99999999999999999999": 1 } }), { code: "invalid_token_id", param: "logit_bias.99999999999999999999" });
    await refused(chat({ stop_token_ids: [151_645, VOCAB + 7] }), { code: "invalid_token_id", param: "stop_token_ids[1]" });
  });
});

describe("sampling limits, one check for chat and completions", () => {
  const manyBiases = Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1]));

  it("logit_bias entries and stop_token_ids are counted (KVEDGE_LIMITS.maxLogitBias, maxStopTokenIds)", async () => {
    await refused(complete({ logit_bias: manyBiases }), { code: "limit_exceeded", param: "logit_bias" });
    await refused(chat({ logit_bias: manyBiases }), { code: "limit_exceeded", param: "logit_bias" });
    await refused(chat({ stop_token_ids: Array.from({ length: 65 }, (_, i) => i) }), { code: "limit_exceeded", param: "stop_token_ids" });
  });

  it("completions: max_tokens, stop strings and model are bounded as chat's are", async () => {
    await refused(complete({ max_tokens: 262_145 }), { code: "limit_exceeded", param: "max_tokens" });
    await refused(complete({ stop: ["ok", "x".repeat(1025)] }), { code: "limit_exceeded", param: "stop[1]" });
    await refused(complete({ model: "m".repeat(257) }), { code: "limit_exceeded", param: "model" });
  });

  it("chat's user (hashed for session affinity) is bounded as completions' is: 256 characters", async () => {
    await refused(chat({ user: "u".repeat(257) }), { param: "user" });
    await refused(complete({ user: "u".repeat(257) }), { param: "user" });
  });
});
