/**
 * A vision conversation's earlier items forwarded on the media store's leases, through the real
 * chat handler, a real decode service / media store over HTTP and a locked-down simulated SGLang
 * worker: a store restarted empty loses the leased items, the worker's fetch of their URLs fails
 * (its 400), and the edge asks the store about them, stores them again by URL and sends the request
 * once more, so the client's request succeeds (buffered and streamed). A worker's genuine 400 while
 * the store still holds every item is the client's answer, sent once. Each attempt settles once, a
 * failed one before the lost items are stored again. A request whose every attempt fails drops its
 * leases: the next turn asks the store.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { settlementsOf } from "../../helpers/receipts.ts";
import type { ChatFrontDoor, ReceiptEntry, SettleRequest } from "../../../src/routing-index/front-door.ts";
import { importMediaUrlKey, workerMediaCredential } from "../../../src/media/signed-url.ts";
import type { RouteDecision } from "../../../src/routing-index/router.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { makePng } from "../../helpers/png.ts";
import { startMediaOrigin, type MediaOrigin } from "../../helpers/media-origin.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const TOKEN = "lease-recovery-token-0123456789a";
const KEY = "lease-recovery-url-key-0123456789abcdef";

const files = new Map<string, Uint8Array>([
  ["/a.png", makePng(64, 48, { seed: 31 })],
  ["/b.png", makePng(48, 80, { seed: 32 })],
  ["/c.png", makePng(96, 32, { seed: 33 })],
]);
let origin: MediaOrigin;
let originHost = "";
let svc: DecodeService;
let storePort = 0;
let sim: SimulatedWorker;
/** A worker that refuses every request with SGLang's 400 for a bad sampling parameter. */
let refuser: http.Server;
let refuserUrl = "";
/** A worker that answers every request 503 (overloaded): every attempt fails, retried away. */
let overloaded: http.Server;
let overloadedUrl = "";
let workerUrl = "";
/** /generate calls the edge made, by worker URL. */
const generateCalls = new Map<string, number>();
const settles: SettleRequest[] = [];
/** The store's `POST /v1/store` calls so far, at each settle (parallel to `settles`). */
const storeCallsAtSettle: number[] = [];
let receipts = 0;
let deps: ChatDeps;
/** What the requests left running (their receipts' delivery): each turn waits for its own. */
const waits: Promise<unknown>[] = [];

const edgeConfig = (vars: Record<string, string> = {}) =>
  parseEdgeConfig({
    KVEDGE_ACCESS: "public",
    KVEDGE_RATE_LIMIT: "off",
    KVEDGE_WORKER_AUTH: "none",
    KVEDGE_MEDIA: JSON.stringify({ allowlist: [originHost] }),
    KVEDGE_DECODE_URL: svc.url,
    DECODE_TOKEN: TOKEN,
    KVEDGE_MEDIA_URL_KEY: KEY,
    ...vars,
  });

const startStore = (): Promise<DecodeService> => startDecodeService({ token: TOKEN, port: storePort, fetch: { allowlist: [originHost] }, store: { urlKey: KEY } });

beforeAll(async () => {
  await initHashing();
  origin = await startMediaOrigin(files);
  originHost = origin.host;
  svc = await startStore();
  storePort = Number(new URL(svc.url).port);
  const credential = await workerMediaCredential(await importMediaUrlKey(KEY), "w1");
  sim = await startSimulatedWorker({ timingPreset: "instant", media: { lockedDown: true, storeUrl: svc.url, storeCredential: `w1:${credential}` } });
  refuser = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ object: "error", message: "Unknown sampling parameter: frobnicate", type: "BadRequestError", code: 400 })));
  });
  await new Promise<void>((r) => refuser.listen(0, "127.0.0.1", r));
  refuserUrl = `http://127.0.0.1:${(refuser.address() as AddressInfo).port}`;
  overloaded = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ object: "error", message: "overloaded", code: 503 })));
  });
  await new Promise<void>((r) => overloaded.listen(0, "127.0.0.1", r));
  overloadedUrl = `http://127.0.0.1:${(overloaded.address() as AddressInfo).port}`;
  const config = edgeConfig();
  const record = (entries: readonly ReceiptEntry[] | undefined): void => {
    for (const s of settlementsOf(entries)) {
      settles.push(s);
      storeCallsAtSettle.push(svc.stats.storeCalls);
    }
  };
  const decision = (): RouteDecision => ({ workerId: "w1", url: workerUrl, incrementalStreaming: false, overlapBlocks: 0, totalBlocks: 1, blockSize: 16, receiptId: `r-${++receipts}`, candidates: [] });
  const index: ChatFrontDoor = {
    // One worker: a pick that excludes it finds none.
    route: async (r) => {
      record(r.receipts);
      return r.exclude?.includes("w1") ? null : decision();
    },
    profile: async () => ({ blockSize: null, workers: 1, workersUp: 1, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async () => undefined,
    quarantine: async () => undefined,
    markPrefillDone: async () => undefined,
    receipts: async (entries) => record(entries),
  };
  deps = {
    config,
    index: () => index,
    fetch: (u, i) => {
      const url = String(u);
      if (url.endsWith("/generate")) generateCalls.set(url, (generateCalls.get(url) ?? 0) + 1);
      return fetch(u, i);
    },
    // Sent at the next turn of the event loop: what is checked is when the edge settles, not the queue's wait.
    receiptOutbox: new ReceiptOutbox({ flushMs: 0 }),
    waitUntil: (p) => void waits.push(p),
  };
}, 60_000);

afterAll(async () => {
  await sim?.close();
  await svc?.close();
  await origin?.close();
  for (const s of [refuser, overloaded]) {
    s?.closeAllConnections();
    await new Promise((r) => s?.close(r));
  }
});

const image = (path: string) => ({ type: "image_url", image_url: { url: `http://${originHost}${path}` } });

/** A conversation: each `ask` adds a user message (after a short assistant answer) and sends it all. */
function conversation(stream: boolean) {
  const messages: unknown[] = [];
  return async (parts: unknown[]) => {
    if (messages.length > 0) messages.push({ role: "assistant", content: "Shapes and colours." });
    messages.push({ role: "user", content: [{ type: "text", text: `Question ${messages.length}: what is here?` }, ...parts] });
    const before = { generate: generateCalls.get(`${workerUrl}/generate`) ?? 0, settles: settles.length, held: svc.stats.heldChecks, stored: svc.stats.storeCalls };
    const res = await handleChatCompletions(
      new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, max_tokens: 4, stream, messages }) }),
      deps,
    );
    const text = await res.text();
    await Promise.all(waits.splice(0));
    return {
      status: res.status,
      text,
      generate: (generateCalls.get(`${workerUrl}/generate`) ?? 0) - before.generate,
      settles: settles.slice(before.settles),
      /** The request's store calls made before each of its settles. */
      storedAtSettles: storeCallsAtSettle.slice(before.settles).map((n) => n - before.stored),
      held: svc.stats.heldChecks - before.held,
      stored: svc.stats.storeCalls - before.stored,
    };
  };
}

/** Every receipt settled once. */
function expectSettledOnce(): void {
  const ids = settles.map((s) => s.receiptId);
  expect(new Set(ids).size, `settles: ${ids.join(",")}`).toBe(ids.length);
  expect(ids.length).toBe(receipts);
}

describe("a media store restart under leases is not the client's failure", () => {
  it.each([false, true])("store restarted empty: the edge stores the lost items again and sends the request once more (stream %s)", async (stream) => {
    workerUrl = sim.url;
    const ask = conversation(stream);
    // Turn 1 stores a, turn 2 stores b: the store leases each as it stores it, so no turn asks about them.
    expect((await ask([image("/a.png")])).status).toBe(200);
    const t2 = await ask([image("/b.png")]);
    expect({ status: t2.status, held: t2.held, stored: t2.stored }).toEqual({ status: 200, held: 0, stored: 1 });
    const t3 = await ask([{ type: "text", text: "Anything else?" }]);
    expect({ status: t3.status, held: t3.held, stored: t3.stored, generate: t3.generate }).toEqual({ status: 200, held: 0, stored: 0, generate: 1 });
    // The store restarts empty on the same address.
    await svc.close();
    svc = await startStore();
    const warn = vi.spyOn(console, "warn");
    const t4 = await ask([image("/c.png")]);
    const logged = warn.mock.calls.map((c) => JSON.parse(String(c[0])) as { event: string });
    warn.mockRestore();
    // The worker failed to load a and b (its 400); the edge asked the store about exactly those two
    // (one held call), stored both again by URL, and the worker's second attempt succeeded.
    expect(t4.status, t4.text).toBe(200);
    if (stream) expect(t4.text).toContain("data: [DONE]");
    else expect((JSON.parse(t4.text) as { choices: unknown[] }).choices).toHaveLength(1);
    expect({ generate: t4.generate, held: t4.held, stored: t4.stored }).toEqual({ generate: 2, held: 1, stored: 3 });
    // The failed attempt settles as an error the edge retries (the pool's request count sees one request), the retry as ok.
    expect(t4.settles.map((s) => ({ outcome: s.outcome, retrying: s.retrying ?? false }))).toEqual([
      { outcome: "error", retrying: true },
      { outcome: "ok", retrying: false },
    ]);
    expectSettledOnce();
    // The failed attempt was settled before a and b were stored again (only c, verified before the
    // first attempt, was): the downloads do not hold the worker's load.
    expect(t4.storedAtSettles).toEqual([1, 3]);
    // The worker's own answer to the failed attempt is logged, though the request was sent again.
    expect(logged.map((l) => l.event)).toEqual(["upstream_error", "media_recovered"]);
    // The items stored again are leased by those store calls: the next turn asks the store nothing.
    const t5 = await ask([{ type: "text", text: "And now?" }]);
    expect({ status: t5.status, generate: t5.generate, held: t5.held, stored: t5.stored }).toEqual({ status: 200, generate: 1, held: 0, stored: 0 });
  }, 60_000);

  it("every attempt failing (the worker overloaded, no worker left): the request's leases are dropped, the next turn asks the store", async () => {
    workerUrl = sim.url;
    const ask = conversation(false);
    expect((await ask([image("/a.png")])).status).toBe(200);
    expect((await ask([image("/b.png")])).status).toBe(200);
    // a and b are leased: no held call while they are.
    expect((await ask([{ type: "text", text: "Still?" }])).held).toBe(0);
    workerUrl = overloadedUrl;
    await expect(ask([{ type: "text", text: "Now?" }])).rejects.toMatchObject({ code: "worker_unavailable" });
    workerUrl = sim.url;
    const t = await ask([{ type: "text", text: "And now?" }]);
    expect({ status: t.status, held: t.held, stored: t.stored }).toEqual({ status: 200, held: 1, stored: 0 });
    expectSettledOnce();
  }, 60_000);

  it("a lease is relied on only while it outlives the longest admission wait and then the signed URL: past the store's lease length, the store is asked every turn", async () => {
    workerUrl = sim.url;
    const kept = deps;
    // 300 s of URL lifetime after up to 400 s of admission wait: more than the store's 600 s lease.
    deps = { ...kept, config: edgeConfig({ KVEDGE_ROUTING: JSON.stringify({ admission: { maxWaitMs: 400_000 } }) }) };
    try {
      const ask = conversation(false);
      expect((await ask([image("/a.png")])).status).toBe(200);
      for (const text of ["More?", "Still?", "Again?"]) {
        const t = await ask([{ type: "text", text }]);
        expect({ status: t.status, held: t.held }).toEqual({ status: 200, held: 1 });
      }
    } finally {
      deps = kept;
    }
  }, 60_000);

  it("a worker's genuine 400 while the store holds every item is the client's answer, sent once", async () => {
    workerUrl = sim.url;
    const ask = conversation(false);
    expect((await ask([image("/a.png")])).status).toBe(200);
    expect((await ask([image("/b.png")])).status).toBe(200);
    expect((await ask([{ type: "text", text: "More?" }])).status).toBe(200);
    // a and b are leased and the store holds them; this worker refuses the request itself.
    workerUrl = refuserUrl;
    const t = await ask([{ type: "text", text: "Once more?" }]);
    expect(t.status, t.text).toBe(400);
    expect((JSON.parse(t.text) as { error: { code: string } }).error.code).toBe("upstream_rejected");
    // The edge asked the store about the leased items (one held call), found both held, stored
    // nothing and did not send the request again.
    expect({ generate: t.generate, held: t.held, stored: t.stored }).toEqual({ generate: 1, held: 1, stored: 0 });
    expect(t.settles.map((s) => ({ outcome: s.outcome, retrying: s.retrying ?? false }))).toEqual([{ outcome: "error", retrying: false }]);
    expectSettledOnce();
  }, 60_000);
});
