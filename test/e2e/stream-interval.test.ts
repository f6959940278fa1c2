/**
 * `KVEDGE_ROUTING.streamInterval` asks the workers for one stream frame per that many output
 * tokens (`sampling_params.stream_interval`), so fewer frames reach the edge: each costs it a read,
 * a translation and a write. The edge turns each worker frame into one client chunk, so the
 * client's chunk count shows the frames the edge received. Real local fleets (simulated worker at
 * its default of one frame per token, relay, the edge under Miniflare), one configured and one not.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

const TOKENS = 64;
let plain: Fleet;
let every4: Fleet;

beforeAll(async () => {
  const log = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
  // Each fleet is kept as soon as it is up, so afterAll stops it even if the other failed to start.
  await Promise.all([
    startFleet({ workers: 1, log }).then((f) => (plain = f)),
    startFleet({ workers: 1, log, vars: { KVEDGE_ROUTING: JSON.stringify({ streamInterval: 4 }) } }).then((f) => (every4 = f)),
  ]);
});
afterAll(async () => {
  await Promise.all([plain?.stop(), every4?.stop()]);
});

interface Streamed { chunks: number; text: string; completionTokens: number }

/** A streamed answer of exactly TOKENS tokens: its data chunks that carry text, the text, and the usage count. */
async function streamed(fleet: Fleet, path: "/v1/chat/completions" | "/v1/completions"): Promise<Streamed> {
  const prompt = "Tell a long story about a router that counts its stream frames.";
  const input = path === "/v1/chat/completions" ? { messages: [{ role: "user", content: prompt }] } : { prompt };
  const body = JSON.stringify({ model: fleet.model, ...input, max_tokens: TOKENS, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  const r = await fetch(`${fleet.edgeUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
  expect(r.status).toBe(200);
  const out: Streamed = { chunks: 0, text: "", completionTokens: 0 };
  for (const frame of (await r.text()).split("\n\n")) {
    if (!frame.startsWith("data: ") || frame === "data: [DONE]") continue;
    const chunk = JSON.parse(frame.slice(6)) as { choices: { delta?: { content?: string | null }; text?: string }[]; usage?: { completion_tokens: number } | null };
    if (chunk.usage) out.completionTokens = chunk.usage.completion_tokens;
    const piece = chunk.choices[0]?.delta?.content ?? chunk.choices[0]?.text ?? "";
    if (piece.length > 0) out.chunks++;
    out.text += piece;
  }
  return out;
}

/** A streamed Responses answer (no ignore_eos there: the simulator seeds its output by the prompt, so both fleets give the same answer, up to the cap). */
async function streamedResponse(fleet: Fleet): Promise<Streamed> {
  const body = JSON.stringify({ model: fleet.model, input: "Describe, at length, a router that counts its stream frames.", max_output_tokens: TOKENS, stream: true, store: false });
  const r = await fetch(`${fleet.edgeUrl}/v1/responses`, { method: "POST", headers: { "content-type": "application/json" }, body });
  expect(r.status).toBe(200);
  const out: Streamed = { chunks: 0, text: "", completionTokens: 0 };
  for (const frame of (await r.text()).split("\n\n")) {
    const data = frame.split("\n").find((l) => l.startsWith("data: "));
    if (data === undefined) continue;
    const event = JSON.parse(data.slice(6)) as { type: string; delta?: string; response?: { usage?: { output_tokens: number } } };
    if (event.type === "response.output_text.delta" && event.delta) {
      out.chunks++;
      out.text += event.delta;
    }
    // A 64-token cap reached ends in response.incomplete (max_output_tokens).
    if (event.type === "response.completed" || event.type === "response.incomplete") out.completionTokens = event.response?.usage?.output_tokens ?? 0;
  }
  return out;
}

/** Frames SGLang sends for an answer of n tokens at interval k > 1: output lengths 1, k + 1, 2k + 1, … below n, and the finishing one. */
const framesAt = (n: number, k: number): number => Math.floor((n - 2) / k) + 2;

describe("routing.streamInterval", () => {
  it.each(["/v1/chat/completions", "/v1/completions"] as const)("%s: a 64-token answer reaches the edge in about a quarter of the frames, same text", async (path) => {
    const [one, four] = await Promise.all([streamed(plain, path), streamed(every4, path)]);
    expect(one.completionTokens).toBe(TOKENS);
    expect(four.completionTokens).toBe(TOKENS);
    expect(four.text).toBe(one.text);
    // One chunk a token without; with 4, frames at output lengths 1, 5, 9, …, 61 and the finishing 64th.
    expect(one.chunks).toBeGreaterThanOrEqual(TOKENS - 2);
    expect(four.chunks).toBeGreaterThanOrEqual(framesAt(TOKENS, 4) - 2);
    expect(four.chunks).toBeLessThanOrEqual(framesAt(TOKENS, 4));
  });

  it("/v1/responses: the same, through the Responses translation", async () => {
    const [one, four] = await Promise.all([streamedResponse(plain), streamedResponse(every4)]);
    const n = one.completionTokens;
    expect(n).toBeGreaterThanOrEqual(16);
    expect(four.completionTokens).toBe(n);
    expect(four.text).toBe(one.text);
    expect(one.chunks).toBeGreaterThanOrEqual(n - 2);
    expect(four.chunks).toBeLessThanOrEqual(framesAt(n, 4));
  });
});
