/**
 * Edge → worker authentication over real HTTP (docs/security.md): the simulated worker started with
 * SGLang's --api-key refuses what SGLang refuses (401 on every path but OPTIONS, /health*, /metrics*);
 * the edge's chat handler (src/edge/chat.ts, the code workerd runs) sends each worker's own key, bound
 * to the URL the worker is registered at, and never to another URL; a worker the edge holds no key
 * for is not called at all; the relay reads /server_info with the key.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import type { RelayKeyFrontDoor } from "../../../src/routing-index/front-door.ts";
import { deriveWorkerApiKey } from "../../../src/edge/worker-auth.ts";
import { RELAY_KEY_ROUTES } from "../../../src/edge/relay-key-routes.ts";
import { dispatch } from "../../../src/edge/route-table.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { fetchServerInfo } from "../../../services/relay/worker-info.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const KEY_SECRET = "worker-key-secret-for-this-test-0123456789";

let sim: SimulatedWorker;
let simKey = "";
/** A worker that records the Authorization header of each call and answers 503 (so nothing else follows). */
let recorder: Server;
let recorderUrl = "";
const seenAuth: (string | null)[] = [];

beforeAll(async () => {
  await initHashing();
  // The worker's key is the one the edge derives for the URL it is registered at: start on a port, then key it.
  const probe = await startSimulatedWorker({ timingPreset: "instant" });
  const port = Number(new URL(probe.url).port);
  await probe.close();
  simKey = await deriveWorkerApiKey(KEY_SECRET, `http://127.0.0.1:${port}`);
  sim = await startSimulatedWorker({ timingPreset: "instant", port, apiKey: simKey });
  recorder = createServer((req, res) => {
    seenAuth.push(req.headers.authorization ?? null);
    req.resume();
    res.writeHead(503).end();
  });
  await new Promise<void>((r) => recorder.listen(0, "127.0.0.1", r));
  recorderUrl = `http://127.0.0.1:${(recorder.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await sim.close();
  recorder.closeAllConnections();
  await new Promise((r) => recorder.close(r));
});

describe("the simulated worker with --api-key answers as SGLang", () => {
  const call = (path: string, init: RequestInit = {}) => fetch(`${sim.url}${path}`, init);
  const generate = (auth: string | null) =>
    call("/generate", { method: "POST", headers: { "content-type": "application/json", ...(auth ? { authorization: auth } : {}) }, body: JSON.stringify({ text: "hello", sampling_params: { max_new_tokens: 2 } }) });

  it("401 {error: Unauthorized} without the key, with a wrong key or a wrong scheme; the scheme's case does not matter", async () => {
    for (const auth of [null, "Bearer wrong-key", `Basic ${simKey}`, `Bearer  ${simKey}`, `Bearer ${simKey}x`, simKey]) {
      const r = await generate(auth);
      expect(r.status, String(auth)).toBe(401);
      expect(await r.json()).toEqual({ error: "Unauthorized" });
    }
    expect((await generate(`Bearer ${simKey}`)).status).toBe(200);
    expect((await generate(`bearer ${simKey}`)).status).toBe(200);
  });

  it("every other path is guarded too (server info, cache flush, unknown paths); /health*, /metrics* and OPTIONS are not", async () => {
    for (const [path, method] of [["/server_info", "GET"], ["/get_server_info", "GET"], ["/flush_cache", "POST"], ["/v1/chat/completions", "POST"], ["/no-such-path", "GET"]] as const)
      expect((await call(path, { method })).status, path).toBe(401);
    expect((await call("/server_info", { headers: { authorization: `Bearer ${simKey}` } })).status).toBe(200);
    expect((await call("/health")).status).toBe(200);
    expect((await call("/health_generate")).status).toBe(200);
    // Past the check: the simulator has no /metrics route, so 404, not 401.
    expect((await call("/metrics")).status).toBe(404);
    expect((await call("/generate", { method: "OPTIONS" })).status).not.toBe(401);
  });

  it("the relay reads /server_info with the worker's key, and says what is missing without it", async () => {
    expect(await fetchServerInfo(sim.url, 5_000, simKey)).toMatchObject({ page_size: 16 });
    await expect(fetchServerInfo(sim.url, 5_000)).rejects.toThrow(/HTTP 401.*--worker-key-env/);
  });
});

describe("the edge authenticates to each worker with that worker's key", () => {
  function setup(workerUrl: string, vars: Record<string, string>) {
    const { index } = oneWorkerIndex(workerUrl, MODEL);
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_ROUTING: JSON.stringify({ maxAttempts: 1 }), ...vars });
    const calls: string[] = [];
    const deps: ChatDeps = {
      config,
      index: () => index,
      fetch: (u, i) => {
        calls.push(u);
        return fetch(u, i);
      },
      receiptOutbox: new ReceiptOutbox(),
      waitUntil: () => undefined,
    };
    return { deps, calls };
  }
  const chat = (deps: ChatDeps) =>
    handleChatCompletions(
      new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "Hello there." }] }) }),
      deps,
    ).catch((e: unknown) => e);

  it("with the derived key the keyed worker answers", async () => {
    const { deps } = setup(sim.url, { KVEDGE_WORKER_KEY_SECRET: KEY_SECRET });
    const res = (await chat(deps)) as Response;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { object: string }).object).toBe("chat.completion");
  });

  it("an explicit KVEDGE_WORKER_KEYS entry for the worker's URL works the same", async () => {
    const { deps } = setup(sim.url, { KVEDGE_WORKER_KEYS: JSON.stringify({ [sim.url]: simKey }) });
    expect(((await chat(deps)) as Response).status).toBe(200);
  });

  it("a worker reached without the edge's credential refuses, and the client gets a worker error, not the answer", async () => {
    // KVEDGE_WORKER_AUTH=none: the edge calls the worker without a key, as an unkeyed edge would.
    const { deps, calls } = setup(sim.url, { KVEDGE_WORKER_AUTH: "none" });
    const err = await chat(deps);
    expect(calls).toEqual([`${sim.url}/generate`]);
    expect(err).toMatchObject({ code: "worker_unavailable" });
  });

  it("closed by default: a worker the edge holds no key for is never called", async () => {
    const { deps, calls } = setup(sim.url, {});
    expect(await chat(deps)).toMatchObject({ code: "worker_unavailable" });
    expect(calls).toEqual([]);
  });

  it("a key goes only to the URL it belongs to: a worker registered elsewhere never receives it", async () => {
    seenAuth.length = 0;
    // The edge holds a key for the simulator's URL; the pool's worker is registered at the recorder's.
    const { deps, calls } = setup(recorderUrl, { KVEDGE_WORKER_KEYS: JSON.stringify({ [sim.url]: simKey }), KVEDGE_WORKER_AUTH: "none" });
    await chat(deps);
    expect(calls).toEqual([`${recorderUrl}/generate`]);
    expect(seenAuth).toEqual([null]);
    // The derived key of one URL is not the derived key of another.
    expect(await deriveWorkerApiKey(KEY_SECRET, recorderUrl)).not.toBe(simKey);
  });

  it("a Cloudflare Access service token travels with the worker's key", async () => {
    let seen: Record<string, string | undefined> = {};
    const rec = createServer((req, res) => {
      seen = { auth: req.headers.authorization, id: req.headers["cf-access-client-id"] as string, secret: req.headers["cf-access-client-secret"] as string };
      req.resume();
      res.writeHead(503).end();
    });
    await new Promise<void>((r) => rec.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(rec.address() as AddressInfo).port}`;
    try {
      const { deps } = setup(url, { KVEDGE_WORKER_KEY_SECRET: KEY_SECRET, CF_ACCESS_CLIENT_ID: "client-id.access", CF_ACCESS_CLIENT_SECRET: "access-secret-0123456789abcdef" });
      await chat(deps);
      expect(seen).toEqual({ auth: `Bearer ${await deriveWorkerApiKey(KEY_SECRET, url)}`, id: "client-id.access", secret: "access-secret-0123456789abcdef" });
    } finally {
      rec.closeAllConnections();
      await new Promise((r) => rec.close(r));
    }
  });
});

describe("the operator gets the worker's key with its relay key", () => {
  async function issue(vars: Record<string, string>, url: string): Promise<{ url: string; credential: string; workerApiKey: string | null }> {
    const config = parseEdgeConfig({ RELAY_SECRET: "relay-secret-for-this-test-0123456789", KVEDGE_RELAY_ALLOW_HTTP: "1", ...vars });
    const index: RelayKeyFrontDoor = { issueRelayKey: async () => true, relayKey: async () => null, relayKeys: async () => [], revokeRelayKey: async () => null, closeRelayKey: async () => 0 };
    const req = new Request("http://edge/admin/relay-keys", { method: "POST", body: JSON.stringify({ workerId: "gpu-1", url }) });
    const res = await dispatch(RELAY_KEY_ROUTES, "POST", "/admin/relay-keys", { request: req, url: new URL(req.url), deps: { config, index: () => index } });
    expect(res.status).toBe(201);
    return (await res.json()) as { url: string; credential: string; workerApiKey: string | null };
  }

  it("derived from KVEDGE_WORKER_KEY_SECRET and the URL the relay key binds; none when the edge does not derive it", async () => {
    const o = await issue({ KVEDGE_WORKER_KEY_SECRET: KEY_SECRET }, "https://gpu-1.example.com/");
    expect(o.url).toBe("https://gpu-1.example.com");
    expect(o.workerApiKey).toBe(await deriveWorkerApiKey(KEY_SECRET, "https://gpu-1.example.com"));
    expect(o.workerApiKey).toMatch(/^kvw1-[0-9a-f]{64}$/);
    expect((await issue({}, "https://gpu-1.example.com")).workerApiKey).toBeNull();
    const explicit = { KVEDGE_WORKER_KEY_SECRET: KEY_SECRET, KVEDGE_WORKER_KEYS: JSON.stringify({ "https://gpu-1.example.com": "operator-chosen-key-0123" }) };
    expect((await issue(explicit, "https://gpu-1.example.com")).workerApiKey).toBeNull();
  });
});

describe("worker credential configuration", () => {
  it("refuses what it cannot use, naming the field", () => {
    expect(() => parseEdgeConfig({ KVEDGE_WORKER_KEYS: JSON.stringify({ "https://w1.example.com/": "k".repeat(32) }) })).toThrow(/KVEDGE_WORKER_KEYS\.https:\/\/w1\.example\.com\/: each KVEDGE_WORKER_KEYS name must be a worker URL/);
    expect(() => parseEdgeConfig({ KVEDGE_WORKER_KEYS: JSON.stringify({ "https://w1.example.com": "short" }) })).toThrow(/KVEDGE_WORKER_KEYS\.https:\/\/w1\.example\.com: each worker key must be/);
    expect(() => parseEdgeConfig({ KVEDGE_WORKER_KEYS: "{" })).toThrow(/KVEDGE_WORKER_KEYS is not valid JSON/);
    expect(() => parseEdgeConfig({ KVEDGE_WORKER_KEY_SECRET: "too-short" })).toThrow(/KVEDGE_WORKER_KEY_SECRET must be at least 32/);
    expect(() => parseEdgeConfig({ CF_ACCESS_CLIENT_ID: "id.access" })).toThrow(/CF_ACCESS_CLIENT_SECRET: CF_ACCESS_CLIENT_ID and CF_ACCESS_CLIENT_SECRET go together/);
    expect(() => parseEdgeConfig({ KVEDGE_API_KEYS: "tenant-key-0123456789", KVEDGE_WORKER_KEYS: JSON.stringify({ "https://w1.example.com": "tenant-key-0123456789" }) })).toThrow(/must not also be an API key/);
    expect(() => parseEdgeConfig({ KVEDGE_WORKER_AUTH: "off" })).toThrow(/KVEDGE_WORKER_AUTH/);
    expect(parseEdgeConfig({}).workerAuth).toMatchObject({ required: true, keySecret: null, access: null });
  });
});
