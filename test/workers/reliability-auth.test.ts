/**
 * Who gets in, inside workerd (the real edge Worker and Durable Objects from wrangler.toml):
 * - relays: only a fresh, correctly signed connect token for that worker and pool, once. Missing,
 *   garbage, legacy static, wrong-secret, tampered, expired, not-yet-valid, cross-worker,
 *   cross-pool and replayed tokens get 401 in the OpenAI error shape and leave the index exactly
 *   as it was (registry, blocks, counters) — also across an index restart (nonces are in SQLite);
 * - admin routes: only the admin token;
 * - clients: with API keys configured, only a listed key; each key has its own token bucket and an
 *   empty bucket answers 429 with `retry-after`.
 */
import { SELF, createExecutionContext, env, evictDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../functions/index.ts";
import { deriveRelayKey, formatRelayCredential, mintRelayToken, parseRelayCredential, RELAY_TOKEN_MAX_SKEW_S } from "../../src/relay-wire/relay-auth.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { fullBucket, takeToken } from "../../src/util/token-bucket.ts";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";
import { issueRelayKey, nextMessage, TEST_WORKER_URL } from "./ws-helpers.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const OTHER_MODEL = "Qwen/Qwen2.5-VL-7B-Instruct";
const ADMIN = "test-admin-token-0123456789";

interface OpenAIError {
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

async function expectOpenAIError(r: Response, status: number): Promise<OpenAIError> {
  expect(r.status).toBe(status);
  expect(r.headers.get("content-type")).toContain("application/json");
  const j = (await r.json()) as { error: OpenAIError };
  expect(Object.keys(j.error).sort()).toEqual(["code", "message", "param", "type"]);
  return j.error;
}

function connectRelay(workerId: string, token: string | null, model = MODEL): Promise<Response> {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  return SELF.fetch(`https://edge/v1/relay?worker=${encodeURIComponent(workerId)}&model=${encodeURIComponent(model)}`, { headers });
}

async function adminJson<T>(path: string): Promise<T> {
  const r = await SELF.fetch(`https://edge${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return (await r.json()) as T;
}

interface WorkerView {
  workerId: string;
  epoch: number;
  status: string;
  blocks: number;
  synced: boolean;
}

/** Everything a refused connect could have touched: registry, each worker's blocks, counters. */
async function indexState(model = MODEL): Promise<unknown> {
  const q = `model=${encodeURIComponent(model)}`;
  const { workers } = await adminJson<{ workers: (WorkerView & { lastSeen: number })[] }>(`/admin/workers?${q}`);
  const { stats } = await adminJson<{ stats: { indexedBlocks: number; counters: unknown } }>(`/admin/stats?${q}`);
  const hashes: Record<string, string[]> = {};
  for (const w of workers) hashes[w.workerId] = (await adminJson<{ localHashes: string[] }>(`/admin/workers/${w.workerId}/local-hashes?${q}`)).localHashes.sort();
  return { workers, hashes, indexedBlocks: stats.indexedBlocks, counters: stats.counters };
}


/** A relay session through the edge: hello, welcome, a dump of `blocks` chained blocks, ack. */
async function relaySession(workerId: string, token: string, blocks: number): Promise<WebSocket> {
  await initHashing();
  const res = await connectRelay(workerId, token);
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify({ type: "hello", workerId, url: TEST_WORKER_URL, blockSize: 16, epoch: 7, modelName: MODEL }));
  await welcome;
  const locals = localBlockHashes(Array.from({ length: blocks * 16 }, (_, i) => 5000 + i), 16);
  const rows = locals.map((l, i) => ({ h: String(900 + i), p: i === 0 ? null : String(899 + i), l: localHashToHex(l) }));
  const ack = nextMessage(ws, "ack");
  ws.send(JSON.stringify({ type: "dump", epoch: 7, seq: 0, blocks: rows }));
  await ack;
  return ws;
}

const now = () => Math.floor(Date.now() / 1000);

describe("relay authentication", () => {
  it("refuses every bad token with 401 and leaves the index untouched; a replay is refused even after an index restart", async () => {
    const issue = (w: string) => issueRelayKey((u, i) => SELF.fetch(u, i), w);
    const key = await issue("auth-w1");
    const good = await mintRelayToken(key, "auth-w1", MODEL, { url: TEST_WORKER_URL });
    const cred = parseRelayCredential(key)!;
    const otherSecretKey = formatRelayCredential(cred.keyId, await deriveRelayKey("another-secret-0123456789", { keyId: cred.keyId, model: MODEL, workerId: "auth-w1", url: TEST_WORKER_URL }));
    const ws = await relaySession("auth-w1", good, 3);
    const before = await indexState();
    expect((before as { indexedBlocks: number }).indexedBlocks).toBeGreaterThanOrEqual(3);

    const tampered = good.slice(0, -1) + (good.endsWith("0") ? "1" : "0");
    const parts = good.split(".");
    const shiftedTime = [...parts.slice(0, 4), String(Number(parts[4]) + 1), ...parts.slice(5)].join(".");
    const refused: [string, string, string | null, string][] = [
      ["missing", "auth-w1", null, MODEL],
      ["garbage", "auth-w1", "not-a-token", MODEL],
      ["the credential itself", "auth-w1", key, MODEL],
      ["the bare key", "auth-w1", cred.key, MODEL],
      ["other secret", "auth-w1", await mintRelayToken(otherSecretKey, "auth-w1", MODEL, { url: TEST_WORKER_URL }), MODEL],
      ["tampered signature", "auth-w1", tampered, MODEL],
      ["tampered timestamp", "auth-w1", shiftedTime, MODEL],
      ["expired", "auth-w1", await mintRelayToken(key, "auth-w1", MODEL, { url: TEST_WORKER_URL, nowSeconds: now() - RELAY_TOKEN_MAX_SKEW_S - 5 }), MODEL],
      ["not yet valid", "auth-w1", await mintRelayToken(key, "auth-w1", MODEL, { url: TEST_WORKER_URL, nowSeconds: now() + RELAY_TOKEN_MAX_SKEW_S + 5 }), MODEL],
      ["cross-worker (w2's token as w1)", "auth-w1", await mintRelayToken(await issue("auth-w2"), "auth-w2", MODEL, { url: TEST_WORKER_URL }), MODEL],
      ["cross-worker (w1's key signing for w2)", "auth-w2", await mintRelayToken(key, "auth-w2", MODEL, { url: TEST_WORKER_URL }), MODEL],
      ["cross-pool", "auth-w1", await mintRelayToken(key, "auth-w1", OTHER_MODEL, { url: TEST_WORKER_URL }), MODEL],
      ["replayed", "auth-w1", good, MODEL],
    ];
    for (const [what, workerId, token, model] of refused) {
      const e = await expectOpenAIError(await connectRelay(workerId, token, model), 401);
      expect(e.type, what).toBe("authentication_error");
    }
    expect(await indexState()).toEqual(before);

    // The index restarts (memory gone, SQLite kept): the used nonce is still refused.
    await evictDurableObject(env.ROUTING_INDEX.getByName(MODEL));
    const e = await expectOpenAIError(await connectRelay("auth-w1", good), 401);
    expect(e.message).toMatch(/already used/);
    const after = (await indexState()) as { workers: WorkerView[] };
    expect(after.workers.map((w) => [w.workerId, w.epoch])).toEqual((before as { workers: WorkerView[] }).workers.map((w) => [w.workerId, w.epoch]));
    // A fresh token for the same worker is accepted.
    const again = await connectRelay("auth-w1", await mintRelayToken(key, "auth-w1", MODEL, { url: TEST_WORKER_URL }));
    expect(again.status).toBe(101);
    again.webSocket!.accept();
    again.webSocket!.close();
    ws.close();
  });

  it("a relay cannot say hello as another worker over its own authenticated socket", async () => {
    const res = await connectRelay("auth-w3", await mintRelayToken(await issueRelayKey((u, i) => SELF.fetch(u, i), "auth-w3"), "auth-w3", MODEL, { url: TEST_WORKER_URL }));
    const ws = res.webSocket!;
    ws.accept();
    const before = await indexState();
    const err = nextMessage(ws, "error");
    ws.send(JSON.stringify({ type: "hello", workerId: "auth-w1", url: TEST_WORKER_URL, blockSize: 16, epoch: 99, modelName: MODEL }));
    expect((await err).message).toMatch(/does not match/);
    expect(await indexState()).toEqual(before);
  });
});

describe("admin authentication", () => {
  it("every operator route needs the admin token", async () => {
    const relayKey = await issueRelayKey((u, i) => SELF.fetch(u, i), "auth-w1");
    for (const [path, method] of [
      ["/admin/workers", "GET"],
      ["/admin/stats", "GET"],
      ["/admin/edge-caches", "GET"],
      ["/admin/overview", "GET"],
      ["/admin/workers/auth-w1/local-hashes", "GET"],
      ["/admin/explain", "POST"],
      ["/admin/relay-keys", "GET"],
      ["/admin/relay-keys", "POST"],
      ["/admin/relay-keys/AAAAAAAAAAAAAAAAAAAAAA/revoke", "POST"],
      ["/metrics", "GET"],
    ] as const) {
      for (const auth of [null, "Bearer wrong-admin-token-000000", `Bearer ${relayKey}`, `Basic ${btoa(`admin:${ADMIN}`)}`]) {
        const headers: Record<string, string> = auth ? { authorization: auth } : {};
        const body = method === "POST" ? JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }] }) : undefined;
        const r = await SELF.fetch(`https://edge${path}`, { method, headers, body });
        await expectOpenAIError(r, 401);
      }
    }
  });
});

describe("client API keys and rate limits", () => {
  const keyed = {
    ...env,
    KVEDGE_ACCESS: undefined,
    KVEDGE_API_KEYS: "key-alpha-0123456789,key-beta-0123456789",
    KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 6, burst: 3 }),
  };
  async function call(auth: string | null): Promise<Response> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (auth) headers.authorization = auth;
    const req = new Request("https://edge/v1/chat/completions", {
      method: "POST",
      headers,
      // A pool without workers: admitted requests end in 503, refused ones in 401/429.
      body: JSON.stringify({ model: OTHER_MODEL, messages: [{ role: "user", content: "hi" }] }),
    });
    const ctx = createExecutionContext();
    const res = await worker.fetch(req as Request<unknown, IncomingRequestCfProperties>, keyed as never, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  }

  it("refuses missing and unknown keys; limits each key on its own bucket with 429 + retry-after", async () => {
    expect((await expectOpenAIError(await call(null), 401)).code).toBe("invalid_api_key");
    await expectOpenAIError(await call("Bearer key-gamma-0123456789"), 401);
    await expectOpenAIError(await call("Bearer key-alpha-012345678"), 401); // a prefix of a key
    for (let i = 0; i < 3; i++) expect((await call("Bearer key-alpha-0123456789")).status).toBe(503);
    const limited = await call("Bearer key-alpha-0123456789");
    const e = await expectOpenAIError(limited, 429);
    expect(e).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
    const retryAfter = Number(limited.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(10); // 6/min: one request per 10 s
    // Another key has its own bucket.
    expect((await call("Bearer key-beta-0123456789")).status).toBe(503);
  });

  it("token bucket: burst, refill rate, cap, retry-after", () => {
    const cfg = { requestsPerMinute: 60, burst: 2 };
    const b = fullBucket(cfg, 0);
    expect(takeToken(b, cfg, 0)).toMatchObject({ allowed: true, remaining: 1 });
    expect(takeToken(b, cfg, 0)).toMatchObject({ allowed: true, remaining: 0 });
    expect(takeToken(b, cfg, 0)).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    expect(takeToken(b, cfg, 500)).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    expect(takeToken(b, cfg, 1000)).toMatchObject({ allowed: true });
    // Idle for an hour: the bucket holds at most `burst`.
    let allowed = 0;
    for (let i = 0; i < 10; i++) if (takeToken(b, cfg, 3_600_000).allowed) allowed++;
    expect(allowed).toBe(2);
    // A clock going backwards never adds tokens.
    expect(takeToken(b, cfg, 0).allowed).toBe(false);
  });
});
