/**
 * Streaming logprobs from workers that send cumulative frames costs the edge work in the square
 * of the answer (src/proxy/stream-cost.ts): past the bound such a stream goes only to workers that
 * stream increments, and is the client's 400 naming the fix when the pool has none.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { openRelay } from "./ws-helpers.ts";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";

function connect(id: string, url: string, incrementalStreaming: boolean): Promise<WebSocket> {
  return openRelay((u, i) => SELF.fetch(u, i), id, { model: MODEL, url, hello: { kvEvents: false, incrementalStreaming } });
}

function chat(extra: Record<string, unknown>): Promise<Response> {
  const body = { model: MODEL, messages: [{ role: "user", content: "hi" }], stream: true, logprobs: true, top_logprobs: 20, ...extra };
  return SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` }, body: JSON.stringify(body) });
}

describe("streaming logprobs from cumulative-frame workers", () => {
  it("past the bound: 400 naming the fix while only cumulative workers are up; routed once an incremental one is", async () => {
    await initHashing();
    const cumulative = await connect("w-cost-cumulative", "https://127.0.0.1:21", false);
    const refused = await chat({ max_tokens: 4000 });
    expect(refused.status).toBe(400);
    const e = ((await refused.json()) as { error: { code: string; param: string; message: string } }).error;
    expect(e).toMatchObject({ code: "logprobs_stream_too_costly", param: "max_tokens" });
    expect(e.message).toMatch(/at most \d+.*stream: false.*--incremental-streaming-output/);
    // Within the bound, or without streaming, the cumulative worker is used (nothing listens there: not a 400).
    for (const extra of [{ max_tokens: 50 }, { max_tokens: 4000, stream: false }]) {
      const r = await chat(extra);
      expect(r.status, JSON.stringify(extra)).not.toBe(400);
      await r.body?.cancel();
    }
    const incremental = await connect("w-cost-incremental", "https://127.0.0.1:22", true);
    const routed = await chat({ max_tokens: 4000 });
    // Routed to the incremental worker only (nothing listens there either: the attempt fails, and
    // no cumulative worker is tried instead).
    expect(routed.status).toBe(502);
    expect(((await routed.json()) as { error: { code: string } }).error.code).toBe("worker_unavailable");
    cumulative.close();
    incremental.close();
  });
});
