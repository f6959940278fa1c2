/**
 * The edge names its client to the media store (x-kvedge-client, src/edge/client-label.ts), so the
 * store can give each client a share of its slots (services/decode/fair-slots.ts): the real chat
 * handler, a real decode service and origin over HTTP on 127.0.0.1. The calls the handler makes
 * are observed on their way out (the fetch passes them on unchanged).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import type { ChatFrontDoor } from "../../../src/routing-index/front-door.ts";
import { clientLabel } from "../../../src/edge/client-label.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { makePng } from "../../helpers/png.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const TOKEN = "edge-client-label-token-0123456789";
const KEY = "edge-client-label-url-key-0123456789abcdef";
const KEY_A = "client-a-key-0123456789abcdef";
const KEY_B = "client-b-key-0123456789abcdef";
const png = makePng(32, 32, { seed: 9 });
let origin: http.Server;
let originHost = "";
let svc: DecodeService;
/** The x-kvedge-client header of each store call the handler made (null: none). */
const labels: (string | null)[] = [];

beforeAll(async () => {
  await initHashing();
  origin = http.createServer((_req, res) => {
    res.writeHead(200, { "content-type": "image/png" });
    res.end(png);
  });
  await new Promise<void>((r) => origin.listen(0, "127.0.0.1", r));
  originHost = `127.0.0.1:${(origin.address() as AddressInfo).port}`;
  svc = await startDecodeService({ token: TOKEN, concurrency: 1, fetch: { allowlist: [originHost] }, store: { urlKey: KEY } });
});
afterAll(async () => {
  await svc?.close();
  origin.closeAllConnections();
  await new Promise((r) => origin.close(r));
});

function deps(): ChatDeps {
  const config = parseEdgeConfig({
    KVEDGE_API_KEYS: `${KEY_A},${KEY_B}`,
    KVEDGE_ACCESS: "public",
    KVEDGE_RATE_LIMIT: "off",
    KVEDGE_MEDIA: JSON.stringify({ allowlist: [originHost] }),
    KVEDGE_DECODE_URL: svc.url,
    DECODE_TOKEN: TOKEN,
    KVEDGE_MEDIA_URL_KEY: KEY,
  });
  // No worker: the request stops after its media are verified (503), which is all this test needs.
  const index: ChatFrontDoor = {
    route: async () => null,
    profile: async () => ({ blockSize: null, workers: 1, workersUp: 1, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async () => undefined,
    quarantine: async () => undefined,
    markPrefillDone: async () => undefined,
    receipts: async () => undefined,
  };
  return {
    config,
    index: () => index,
    fetch: (u, init) => {
      if (String(u).startsWith(svc.url)) labels.push(new Headers(init?.headers).get("x-kvedge-client"));
      return fetch(u, init);
    },
    receiptOutbox: new ReceiptOutbox(),
    waitUntil: () => undefined,
  };
}

async function send(headers: Record<string, string>, seed: number): Promise<string | null> {
  const before = labels.length;
  const body = { model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [{ type: "text", text: "What is it?" }, { type: "image_url", image_url: { url: `http://${originHost}/img-${seed}.png` } }] }] };
  const res = await handleChatCompletions(new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) }), deps()).catch((e: unknown) => e);
  expect(res).toMatchObject({ code: "no_worker_available" });
  expect(labels.length).toBe(before + 1);
  return labels.at(-1)!;
}

describe("the edge's client label on media store calls", () => {
  it("one label per API key, one per network for keyless callers, none where the edge cannot tell clients apart", async () => {
    const a = await send({ authorization: `Bearer ${KEY_A}` }, 1);
    const a2 = await send({ authorization: `Bearer ${KEY_A}`, "cf-connecting-ip": "198.51.100.7" }, 2);
    const b = await send({ authorization: `Bearer ${KEY_B}` }, 3);
    expect(a).toBe(clientLabel({ apiKey: KEY_A }));
    expect(a2).toBe(a);
    expect(b).toBe(clientLabel({ apiKey: KEY_B }));
    expect(b).not.toBe(a);
    // Keyless: by network (/64 for IPv6, /32 for IPv4).
    const n1 = await send({ "cf-connecting-ip": "2001:db8:1:2::5" }, 4);
    const n2 = await send({ "cf-connecting-ip": "2001:db8:1:2:ffff::9" }, 5);
    expect(n1).toBe(clientLabel({ network: "2001:db8:1:2::/64" }));
    expect(n2).toBe(n1);
    expect(await send({ "cf-connecting-ip": "198.51.100.7" }, 6)).toBe(clientLabel({ network: "198.51.100.7/32" }));
    expect(await send({}, 7)).toBeNull();
    // A digest: neither the key nor the address leaves the edge.
    for (const l of [a, b, n1]) {
      expect(l).toMatch(/^c-[0-9a-f]{32}$/);
      expect(l).not.toContain(KEY_A.slice(0, 8));
    }
  });
});
