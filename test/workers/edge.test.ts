/**
 * Inside workerd (vitest-pool-workers): the edge Worker and the RoutingIndex Durable Object from
 * wrangler.toml. No simulated workers here — relays are played by WebSockets opened through the
 * edge, exactly as a real relay connects.
 */
import { SELF, env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { deriveRelayKey, formatRelayCredential, mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { issueRelayKey, messageWhere, TEST_WORKER_URL } from "./ws-helpers.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { initHashing } from "../../src/util/hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const SECRET = "test-relay-secret-0123456789";
const ADMIN = "test-admin-token-0123456789";

async function post(body: unknown, raw?: string): Promise<Response> {
  return SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: raw ?? JSON.stringify(body) });
}

async function expectOpenAIError(r: Response, status: number): Promise<{ message: string; type: string; param: string | null; code: string | null }> {
  expect(r.status).toBe(status);
  const j = (await r.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  expect(Object.keys(j.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(j.error.message.length).toBeGreaterThan(0);
  return j.error;
}

async function connectRelay(workerId: string, token: string | null, model = MODEL): Promise<Response> {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  return SELF.fetch(`https://edge/v1/relay?worker=${workerId}&model=${encodeURIComponent(model)}`, { headers });
}

async function admin(path: string): Promise<Response> {
  return SELF.fetch(`https://edge${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
}

describe("edge API surface", () => {
  it("health and models", async () => {
    expect(await (await SELF.fetch("https://edge/healthz")).json()).toEqual({ status: "ok" });
    const m = (await (await SELF.fetch("https://edge/v1/models")).json()) as { data: { id: string }[] };
    expect(m.data.map((x) => x.id)).toContain(MODEL);
  });

  it("bad input gets a 4xx in the OpenAI error shape", async () => {
    expect((await expectOpenAIError(await post(null, "{not json"), 400)).code).toBe("invalid_json");
    expect((await expectOpenAIError(await post({ model: MODEL, messages: "hi" }), 400)).param).toBe("messages");
    await expectOpenAIError(await post({ model: MODEL, messages: [] }), 400);
    await expectOpenAIError(await post({ model: MODEL, messages: [{ role: "user", content: 5 }] }), 400);
    await expectOpenAIError(await post({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: "ten" }), 400);
    expect((await expectOpenAIError(await post({ model: "nope", messages: [{ role: "user", content: "x" }] }), 404)).code).toBe("model_not_found");
    await expectOpenAIError(await post(null, JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x".repeat(21 * 1024 * 1024) }] })), 413);
    const wrongMethod = await SELF.fetch("https://edge/v1/chat/completions");
    expect(wrongMethod.headers.get("allow")).toBe("POST, OPTIONS");
    await expectOpenAIError(wrongMethod, 405);
    expect((await SELF.fetch("https://edge/v1/models", { method: "DELETE" })).headers.get("allow")).toBe("GET, HEAD, OPTIONS");
    expect((await SELF.fetch("https://edge/v1/models", { method: "HEAD" })).status).toBe(200);
    await expectOpenAIError(await SELF.fetch("https://edge/nowhere"), 404);
  });

  it("a completion that cannot fit the context is refused here, naming both counts (SGLang would refuse it too)", async () => {
    // Qwen3-VL: 262 144 tokens of context; "hi" renders to 9 prompt tokens with the generation prompt.
    const e = await expectOpenAIError(await post({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 262_136 }), 400);
    expect(e).toMatchObject({ code: "context_length_exceeded", param: "max_tokens" });
    expect(e.message).toContain("(9 tokens) plus the completion (262136 tokens) is 262145 tokens");
    const c = await expectOpenAIError(await post({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 5, max_completion_tokens: 262_135 }), 400);
    expect(c).toMatchObject({ code: "context_length_exceeded", param: "max_completion_tokens" });
    // One token below the bound is the worker's to answer (no worker here: 503, not a 400).
    expect((await post({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 262_134 })).status).toBe(503);
  });

  it("CORS: the public API answers browser preflights and errors readably; admin routes stay closed to pages", async () => {
    const pre = await SELF.fetch("https://edge/v1/chat/completions", {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "Authorization, Content-Type, X-Stainless-OS, x-evil" },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("*");
    expect(pre.headers.get("access-control-allow-methods")).toBe("POST, OPTIONS");
    expect(pre.headers.get("access-control-allow-headers")).toBe("authorization, content-type, x-stainless-os");
    const models = await SELF.fetch("https://edge/v1/models", { headers: { origin: "https://app.example" } });
    expect(models.headers.get("access-control-allow-origin")).toBe("*");
    const bad = await SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { origin: "https://app.example", "content-type": "application/json" }, body: "{" });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("access-control-allow-origin")).toBe("*");
    expect(bad.headers.get("access-control-expose-headers")).toContain("x-request-id");
    // No Origin (server-side clients): nothing added.
    expect((await SELF.fetch("https://edge/v1/models")).headers.get("access-control-allow-origin")).toBeNull();
    for (const path of ["/admin/workers", "/metrics", "/dashboard"]) {
      const r = await SELF.fetch(`https://edge${path}`, { headers: { origin: "https://app.example", authorization: `Bearer ${ADMIN}` } });
      expect(r.headers.get("access-control-allow-origin"), path).toBeNull();
      expect((await SELF.fetch(`https://edge${path}`, { method: "OPTIONS", headers: { origin: "https://app.example" } })).status, path).not.toBe(204);
    }
  });

  it("a stored-response id with a malformed escape names no response: 404, not a URIError's 500", async () => {
    expect((await expectOpenAIError(await SELF.fetch("https://edge/v1/responses/%ZZ"), 404)).code).toBe("response_not_found");
  });

  it("health routes answer GET and HEAD only", async () => {
    for (const path of ["/healthz", "/readyz"]) {
      expect((await SELF.fetch(`https://edge${path}`, { method: "HEAD" })).status, path).not.toBe(405);
      const wrong = await SELF.fetch(`https://edge${path}`, { method: "POST" });
      expect(wrong.headers.get("allow"), path).toBe("GET, HEAD");
      await expectOpenAIError(wrong, 405);
    }
  });

  it("without a credential the relay tells nothing of which pools exist: 401 before the pool's 404", async () => {
    await expectOpenAIError(await connectRelay("w-unknown", null, "no/such-model"), 401);
  });

  it("CORS: completions, responses and a stored response answer preflights as chat does", async () => {
    for (const [path, methods] of [
      ["/v1/completions", "POST, OPTIONS"],
      ["/v1/responses", "POST, OPTIONS"],
      ["/v1/responses/resp_0123", "GET, DELETE, OPTIONS"],
    ] as const) {
      const pre = await SELF.fetch(`https://edge${path}`, { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "POST" } });
      expect([pre.status, pre.headers.get("access-control-allow-methods"), pre.headers.get("access-control-allow-origin")], path).toEqual([204, methods, "*"]);
    }
    const bad = await SELF.fetch("https://edge/v1/completions", { method: "POST", headers: { origin: "https://app.example", "content-type": "application/json" }, body: "{" });
    expect([bad.status, bad.headers.get("access-control-allow-origin")]).toEqual([400, "*"]);
  });

  it("POST /admin/explain is not stored by caches", async () => {
    const explained = await SELF.fetch("https://edge/admin/explain", {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
    });
    expect([explained.status, explained.headers.get("cache-control")]).toEqual([200, "no-store"]);
  });

  it("no worker → 503 in the OpenAI error shape, not a hang", async () => {
    const e = await expectOpenAIError(await post({ model: "Qwen/Qwen2.5-VL-7B-Instruct", messages: [{ role: "user", content: "hi" }] }), 503);
    expect(e.code).toBe("no_worker_available");
  });

  it("trace context: a chat answer names the client's trace (or a new one) in traceresponse, errors included; pages may send and read it", async () => {
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const chat = (headers: Record<string, string>) =>
      SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", origin: "https://app.example", ...headers }, body: JSON.stringify({ model: "Qwen/Qwen2.5-VL-7B-Instruct", messages: [{ role: "user", content: "hi" }] }) });
    const continued = await chat({ traceparent: `00-${trace}-00f067aa0ba902b7-01` });
    expect(continued.status).toBe(503);
    expect(continued.headers.get("traceresponse")).toMatch(new RegExp(`^00-${trace}-(?!00f067aa0ba902b7)[0-9a-f]{16}-01$`));
    expect(continued.headers.get("access-control-expose-headers")).toContain("traceresponse");
    const started = (await chat({ traceparent: `00-${trace.toUpperCase()}-00f067aa0ba902b7-01` })).headers.get("traceresponse");
    expect(started).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(started).not.toContain(trace);
    // Only chat requests are traced.
    expect((await SELF.fetch("https://edge/v1/models", { headers: { traceparent: `00-${trace}-00f067aa0ba902b7-01` } })).headers.get("traceresponse")).toBeNull();
    const pre = await SELF.fetch("https://edge/v1/chat/completions", {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "content-type, traceparent, tracestate" },
    });
    expect(pre.headers.get("access-control-allow-headers")).toBe("content-type, traceparent, tracestate");
  });

  it("admin endpoints need the admin token", async () => {
    await expectOpenAIError(await SELF.fetch("https://edge/admin/workers"), 401);
    await expectOpenAIError(await SELF.fetch("https://edge/admin/workers", { headers: { authorization: "Bearer wrong-token-wrong-token" } }), 401);
    const ok = await admin("/admin/workers");
    expect([ok.status, ok.headers.get("cache-control")]).toEqual([200, "no-store"]);
    // Read-only routes: GET only; a bad path is the caller's 4xx, never a 500.
    const post = await SELF.fetch("https://edge/admin/workers", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` } });
    expect([post.status, post.headers.get("allow")]).toEqual([405, "GET"]);
    expect((await expectOpenAIError(await admin("/admin/workers/%ZZ/local-hashes"), 400)).param).toBe("worker");
    expect((await expectOpenAIError(await admin("/admin/workers/no-such-worker/local-hashes"), 404)).code).toBe("worker_not_found");
  });
});

describe("relay ingestion and routing inside workerd", () => {
  it("refuses missing, wrong and cross-worker tokens and changes nothing", async () => {
    const before = (await (await admin("/admin/workers")).json()) as { workers: unknown[] };
    await expectOpenAIError(await connectRelay("wa", null), 401);
    await expectOpenAIError(await connectRelay("wa", "00".repeat(32)), 401);
    const wb = await issueRelayKey((u, i) => SELF.fetch(u, i), "wb");
    await expectOpenAIError(await connectRelay("wa", await mintRelayToken(wb, "wa", MODEL, { url: TEST_WORKER_URL })), 401);
    await expectOpenAIError(await connectRelay("wa", await mintRelayToken(wb, "wb", MODEL, { url: TEST_WORKER_URL })), 401);
    // A key of the right shape that was never issued (derived from the pool secret even).
    const stray = { keyId: "AAAAAAAAAAAAAAAAAAAAAA", model: MODEL, workerId: "wa", url: TEST_WORKER_URL };
    await expectOpenAIError(await connectRelay("wa", await mintRelayToken(formatRelayCredential(stray.keyId, await deriveRelayKey(SECRET, stray)), "wa", MODEL, { url: TEST_WORKER_URL })), 401);
    const after = (await (await admin("/admin/workers")).json()) as { workers: unknown[] };
    expect(after.workers).toEqual(before.workers);
  });

  it("hello → welcome → dump; the index routes a matching prefix to that worker; eviction asks relays to resync", async () => {
    await initHashing();
    const res = await connectRelay("w-route", await mintRelayToken(await issueRelayKey((u, i) => SELF.fetch(u, i), "w-route"), "w-route", MODEL, { url: TEST_WORKER_URL }));
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    ws.accept();
    const welcome = messageWhere(ws, (m) => m.type === "welcome");
    ws.send(JSON.stringify({ type: "hello", workerId: "w-route", url: TEST_WORKER_URL, blockSize: 16, epoch: 1, modelName: MODEL }));
    expect(await welcome).toMatchObject({ type: "welcome", poolBlockSize: 16 });

    const tokens = Array.from({ length: 64 }, (_, i) => 1000 + i);
    const locals = localBlockHashes(tokens, 16);
    const blocks = locals.map((l, i) => ({ h: String(-100 - i), p: i === 0 ? null : String(-99 - i), l: localHashToHex(l) }));
    const ack = messageWhere(ws, (m) => m.type === "ack");
    ws.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks }));
    await ack;

    const stub = env.ROUTING_INDEX.getByName(MODEL);
    const d = await stub.route({ localHashes: locals, isl: 64 });
    expect(d).toMatchObject({ workerId: "w-route", overlapBlocks: 4, totalBlocks: 4 });
    await stub.settle({ receiptId: d!.receiptId, promptTokens: 64, cachedTokens: 64, outcome: "ok" });

    // Malformed relay messages are counted and dropped without touching the index.
    ws.send("{nope");
    ws.send(JSON.stringify({ type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: "12345", blocks: [{ h: "1", l: "zz" }] }] }));
    await messageWhere(ws, (m) => m.type === "error");
    const d2 = await stub.route({ localHashes: locals, isl: 64 });
    expect(d2?.overlapBlocks).toBe(4);

    // Eviction loses the in-memory index; the registry survives in SQLite and relays are asked to resync.
    const resync = messageWhere(ws, (m) => m.type === "resync");
    await evictDurableObject(stub);
    const workers = (await (await admin("/admin/workers")).json()) as { workers: { workerId: string }[] };
    expect(workers.workers.map((w) => w.workerId)).toContain("w-route");
    await resync;
    ws.close();
  });
});
