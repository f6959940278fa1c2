/**
 * A stored item's URL is signed for the worker the request goes to, and only that worker fetches
 * it: the real chat handler, a real media store and origin, a first worker that drops
 * the connection (the edge retries elsewhere) and a simulated SGLang worker locked down to the
 * store with its own media credential. The retry carries a URL signed for the second worker; the
 * first worker's URL does not open for the second worker's credential. A video the store cannot
 * probe is the client's 400 at the edge, and no worker is called.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpStatusOf, type KvedgeError } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import type { ChatFrontDoor } from "../../../src/routing-index/front-door.ts";
import { importMediaUrlKey, workerMediaCredential } from "../../../src/media/signed-url.ts";
import type { RouteDecision } from "../../../src/routing-index/router.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { makePng } from "../../helpers/png.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const TOKEN = "binding-test-token-0123456789abc";
const KEY = "binding-test-url-key-0123456789abcdef";
const png = makePng(40, 24, { seed: 21 });
const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

let origin: http.Server;
let originHost = "";
let svc: DecodeService;
let sim: SimulatedWorker;
/** The first worker: reads the /generate body, then drops the connection before answering. */
let dropper: http.Server;
let dropperUrl = "";
const dropped: string[] = [];

const basic = async (id: string): Promise<string> => `Basic ${btoa(`${id}:${await workerMediaCredential(await importMediaUrlKey(KEY), id)}`)}`;

beforeAll(async () => {
  await initHashing();
  origin = http.createServer((req, res) => {
    if (req.url === "/junk.mp4") {
      res.writeHead(200, { "content-type": "video/mp4" });
      return void res.end("no decoder reads this as a video ".repeat(32));
    }
    res.writeHead(200, { "content-type": "image/png" });
    res.end(png);
  });
  await new Promise<void>((r) => origin.listen(0, "127.0.0.1", r));
  originHost = `127.0.0.1:${(origin.address() as AddressInfo).port}`;
  svc = await startDecodeService({ token: TOKEN, concurrency: 1, fetch: { allowlist: [originHost] }, store: { urlKey: KEY } });
  const cred = await basic("w2");
  sim = await startSimulatedWorker({
    timingPreset: "instant",
    media: { lockedDown: true, storeUrl: svc.url, storeCredential: atob(cred.slice("Basic ".length)) },
  });
  dropper = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      dropped.push(body);
      res.socket?.destroy();
    });
  });
  await new Promise<void>((r) => dropper.listen(0, "127.0.0.1", r));
  dropperUrl = `http://127.0.0.1:${(dropper.address() as AddressInfo).port}`;
}, 60_000);

afterAll(async () => {
  await sim?.close();
  await svc?.close();
  for (const s of [origin, dropper]) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

function decision(workerId: string, url: string): RouteDecision {
  return { workerId, url, incrementalStreaming: false, overlapBlocks: 0, totalBlocks: 1, blockSize: 16, receiptId: `r-${workerId}`, candidates: [] };
}

function deps(): ChatDeps {
  const config = parseEdgeConfig({
    KVEDGE_ACCESS: "public",
    KVEDGE_RATE_LIMIT: "off",
    KVEDGE_WORKER_AUTH: "none",
    KVEDGE_MEDIA: JSON.stringify({ allowlist: [originHost] }),
    KVEDGE_DECODE_URL: svc.url,
    DECODE_TOKEN: TOKEN,
    KVEDGE_MEDIA_URL_KEY: KEY,
  });
  // w1 first; once it is excluded (it failed), w2.
  const index: ChatFrontDoor = {
    route: async (r) => (r.exclude?.includes("w1") ? decision("w2", sim.url) : decision("w1", dropperUrl)),
    profile: async () => ({ blockSize: null, workers: 1, workersUp: 1, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async () => undefined,
    quarantine: async () => undefined,
    markPrefillDone: async () => undefined,
    receipts: async () => undefined,
  };
  return { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
}

describe("signed media URLs are bound to the worker they were issued for", () => {
  it("a retry on another worker carries a URL signed for it; the first worker's URL does not open for it", async () => {
    const body = { model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [{ type: "text", text: "What is it?" }, { type: "image_url", image_url: { url: `http://${originHost}/a.png` } }] }] };
    const res = await handleChatCompletions(new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }), deps());
    expect(res.status, await res.clone().text()).toBe(200);
    // w1 got a URL for w1.
    expect(dropped).toHaveLength(1);
    const w1Url = new URL((JSON.parse(dropped[0]!) as { image_data: string[] }).image_data[0]!);
    expect(w1Url.searchParams.get("w")).toBe("w1");
    // w2 fetched the stored bytes from the store with its own credential: its URL named w2.
    const loaded = ((await (await fetch(`${sim.url}/debug/media`)).json()) as { media: { digest: string; via: string }[] }).media;
    expect(loaded.at(-1)).toMatchObject({ digest: sha(png), via: "store" });
    // w1's URL is w1's alone.
    expect((await fetch(w1Url, { headers: { authorization: await basic("w2") } })).status).toBe(400);
    expect((await fetch(w1Url)).status).toBe(400);
    expect((await fetch(w1Url, { headers: { authorization: await basic("w1") } })).status).toBe(200);
  });

  it("a video the store cannot probe is the client's 400 at the edge; no worker is called", async () => {
    const before = { dropped: dropped.length, generated: await generatedBySim() };
    const body = { model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [{ type: "text", text: "And this?" }, { type: "video_url", video_url: { url: `http://${originHost}/junk.mp4` } }] }] };
    const err = (await handleChatCompletions(new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }), deps()).catch((e: unknown) => e)) as KvedgeError;
    expect(err).toMatchObject({ code: "media_unprobeable_media", param: "messages[0].content[1]" });
    expect(httpStatusOf(err)).toBe(400);
    expect({ dropped: dropped.length, generated: await generatedBySim() }).toEqual(before);
  });
});

async function generatedBySim(): Promise<number> {
  return ((await (await fetch(`${sim.url}/debug/requests`)).json()) as { requests: unknown[] }).requests.length;
}
