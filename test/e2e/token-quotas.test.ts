/**
 * Token quotas on every generate route, on the local fleet (real edge under workerd, its
 * RateLimiter objects, a simulated worker behind a real relay): `/v1/completions` and
 * `/v1/responses` charge the caller's prompt- and output-token buckets as `/v1/chat/completions`
 * does, answer the same `x-ratelimit-*` headers, and refuse past the quota with the same 429
 * (OpenAI's shape, Retry-After). The buckets are the caller's, not the route's: spending the quota
 * on chat leaves nothing to spend on the other routes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";

const INPUT_PER_MINUTE = 3_000;
const OUTPUT_PER_MINUTE = 1_000;
const KEYS = { completions: "key-completions-0001", responses: "key-responses-00001", input: "key-input-tokens-001", switching: "key-switching-route1" };

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({
    workers: 1,
    vars: {
      KVEDGE_API_KEYS: Object.values(KEYS).join(","),
      KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 600, burst: 120, inputTokensPerMinute: INPUT_PER_MINUTE, outputTokensPerMinute: OUTPUT_PER_MINUTE }),
    },
    log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined,
  });
});
afterAll(async () => {
  await fleet?.stop();
});

function post(path: string, key: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${fleet.edgeUrl}${path}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
}
const completion = (key: string, maxTokens: number, prompt: unknown = `Say: ${simOutputMarker("fine")}`) => post("/v1/completions", key, { model: fleet.model, prompt, max_tokens: maxTokens });
const response = (key: string, maxOutput: number) => post("/v1/responses", key, { model: fleet.model, input: `Say: ${simOutputMarker("fine")}`, max_output_tokens: maxOutput, store: false });
const chat = (key: string, maxTokens: number) => post("/v1/chat/completions", key, { model: fleet.model, messages: [{ role: "user", content: `Say: ${simOutputMarker("fine")}` }], max_tokens: maxTokens });

const RESET = /^(\d+ms|\d+s|\d+m\d+s)$/;
const num = (r: Response, name: string) => Number(r.headers.get(name));

/** The headers of a served answer: request bucket, prompt-token and output-token buckets, each after this request's take. */
function expectServedHeaders(r: Response, promptTokens: number, outputBudget: number) {
  expect(r.status).toBe(200);
  expect(r.headers.get("x-ratelimit-limit-requests")).toBe("600");
  expect(num(r, "x-ratelimit-remaining-requests")).toBeLessThanOrEqual(119);
  expect(r.headers.get("x-ratelimit-reset-requests")).toMatch(RESET);
  expect(r.headers.get("x-ratelimit-limit-tokens")).toBe(String(INPUT_PER_MINUTE));
  // A full bucket less this prompt; it refills at 50 tokens/s while the request runs.
  const leftIn = num(r, "x-ratelimit-remaining-tokens");
  expect(leftIn).toBeGreaterThanOrEqual(INPUT_PER_MINUTE - promptTokens);
  expect(leftIn).toBeLessThan(INPUT_PER_MINUTE - promptTokens + 50);
  expect(r.headers.get("x-ratelimit-reset-tokens")).toMatch(RESET);
  expect(r.headers.get("x-ratelimit-limit-output-tokens")).toBe(String(OUTPUT_PER_MINUTE));
  const leftOut = num(r, "x-ratelimit-remaining-output-tokens");
  expect(leftOut).toBeGreaterThanOrEqual(OUTPUT_PER_MINUTE - outputBudget);
  expect(leftOut).toBeLessThan(OUTPUT_PER_MINUTE - outputBudget + 50);
  expect(r.headers.get("x-ratelimit-reset-output-tokens")).toMatch(RESET);
}

/** A refusal by a token bucket: 429 in OpenAI's error shape with Retry-After and that bucket's headers. */
async function expectQuotaRefusal(r: Response, bucket: "tokens" | "output-tokens", what: RegExp) {
  expect(r.status).toBe(429);
  expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(r.headers.get(`x-ratelimit-limit-${bucket}`)).toBe(String(bucket === "tokens" ? INPUT_PER_MINUTE : OUTPUT_PER_MINUTE));
  expect(r.headers.get(`x-ratelimit-remaining-${bucket}`)).not.toBeNull();
  const { error } = (await r.json()) as { error: Record<string, unknown> };
  expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(error.type).toBe("rate_limit_error");
  expect(error.message).toMatch(what);
}

describe("token quotas on every generate route", () => {
  it("/v1/completions: the x-ratelimit-* headers of chat, then 429 past the output quota", async () => {
    const ok = await completion(KEYS.completions, 400);
    const usage = ((await ok.clone().json()) as { usage: { prompt_tokens: number } }).usage;
    expectServedHeaders(ok, usage.prompt_tokens, 400);
    await expectQuotaRefusal(await completion(KEYS.completions, 700), "output-tokens", /output tokens \(max_tokens\) per minute: limit 1000, requested 700/);
  });

  it("/v1/completions: a batch counts every prompt's tokens; the prompt-token quota refuses past it", async () => {
    const ids = Array.from({ length: 1_200 }, (_, i) => 1_000 + (i % 500));
    const ok = await completion(KEYS.input, 8, [ids, ids]);
    expectServedHeaders(ok, 2_400, 16);
    await expectQuotaRefusal(await completion(KEYS.input, 8, ids), "tokens", /prompt tokens per minute: limit 3000, requested 1200/);
  });

  it("/v1/responses: the same headers, then 429 past the output quota", async () => {
    const ok = await response(KEYS.responses, 400);
    const usage = ((await ok.clone().json()) as { usage: { input_tokens: number } }).usage;
    expectServedHeaders(ok, usage.input_tokens, 400);
    await expectQuotaRefusal(await response(KEYS.responses, 700), "output-tokens", /limit 1000, requested 700/);
  });

  it("the quota is the caller's, not the route's: spent on chat, completions and responses are refused", async () => {
    const spent = await chat(KEYS.switching, 900);
    expect(spent.status).toBe(200);
    expect(num(spent, "x-ratelimit-remaining-output-tokens")).toBeLessThan(150);
    await expectQuotaRefusal(await completion(KEYS.switching, 500), "output-tokens", /requested 500/);
    await expectQuotaRefusal(await response(KEYS.switching, 500), "output-tokens", /requested 500/);
  });
});
