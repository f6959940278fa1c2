/**
 * Cheap refusals first, inside workerd (the real edge Worker and Durable Objects): a request that
 * fails authentication or finds its rate-limit bucket empty is refused before its body is read,
 * so a huge or never-ending body costs the edge nothing; a relay connect whose signature does not
 * verify is refused before the pool's routing index object is touched.
 */
import { createExecutionContext, env, listDurableObjectIds, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../functions/index.ts";
import { deriveRelayKey, formatRelayCredential, mintRelayToken, newRelayKeyId } from "../../src/relay-wire/relay-auth.ts";
import { shardObjectName } from "../../src/routing-index/pool-address.ts";
import { TEST_WORKER_URL } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"; // a pool without workers: admitted requests end in 503

type Vars = Record<string, string | undefined>;

async function call(vars: Vars, path: string, init: RequestInit & { ip: string }): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("cf-connecting-ip", init.ip);
  const req = new Request(`https://edge${path}`, { ...init, headers });
  const ctx = createExecutionContext();
  const res = await worker.fetch(req as Request<unknown, IncomingRequestCfProperties>, { ...env, ...vars } as never, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/** A body that never ends, counting the bytes anyone pulled from it. */
function endlessBody(): { body: ReadableStream<Uint8Array>; pulled: () => number } {
  let pulled = 0;
  const chunk = new TextEncoder().encode(`{"model":"${MODEL}","messages":[{"role":"user","content":"${"x".repeat(4000)}`);
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      pulled += chunk.length;
      c.enqueue(chunk);
    },
  });
  return { body, pulled: () => pulled };
}

function chatWithBody(vars: Vars, ip: string, body: ReadableStream<Uint8Array>, auth?: string): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth) headers.authorization = auth;
  return call(vars, "/v1/chat/completions", { method: "POST", headers, body, ip, duplex: "half" } as RequestInit & { ip: string });
}

describe("refused before the body is read", () => {
  it("a rate-limited client's never-ending body is not read: 429 at once", async () => {
    const vars = { KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 1, burst: 1 }) };
    const ip = "2001:db8:ee:1::1";
    const first = await call(vars, "/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }), ip });
    expect(first.status).toBe(503);
    const { body, pulled } = endlessBody();
    const r = await chatWithBody(vars, ip, body);
    expect(r.status).toBe(429);
    // Reading it would have pulled up to maxBodyBytes (20 MiB) before a 413.
    expect(pulled()).toBeLessThan(64 * 1024);
  });

  it("an unauthenticated client's never-ending body is not read: 401 at once", async () => {
    const vars = { KVEDGE_ACCESS: undefined, KVEDGE_API_KEYS: "k-cheap-0123456789" };
    const { body, pulled } = endlessBody();
    const r = await chatWithBody(vars, "203.0.113.77", body, "Bearer wrong-key-0123456789");
    expect(r.status).toBe(401);
    expect(pulled()).toBeLessThan(64 * 1024);
  });
});

describe("a relay connect is verified before the pool's index is touched", () => {
  it("a token with a bad signature is refused and no routing index object of the pool exists afterwards", async () => {
    const pool = "cheap-refusal-pool";
    const vars = { KVEDGE_MODELS: JSON.stringify([{ id: pool, family: "qwen3_vl", templateId: "qwen3vl-instruct" }]) };
    // A well-formed credential whose key the edge never issued (derived from another secret).
    const binding = { keyId: newRelayKeyId(), model: pool, workerId: "w-forged", url: TEST_WORKER_URL };
    const forged = formatRelayCredential(binding.keyId, await deriveRelayKey("not-the-relay-secret-0123456789", binding));
    const token = await mintRelayToken(forged, "w-forged", pool, { url: TEST_WORKER_URL });
    const r = await call(vars, `/v1/relay?worker=w-forged&model=${pool}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` }, ip: "198.51.100.99" });
    expect(r.status).toBe(401);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/bad_signature/);
    const touched = (await listDurableObjectIds(env.ROUTING_INDEX)).map((id) => id.toString());
    expect(touched).not.toContain(env.ROUTING_INDEX.idFromName(shardObjectName(pool, 0)).toString());
  });
});
