/**
 * A worker's redirect is not followed (src/edge/chat/proxy.ts, pd-dispatch.ts): the edge's
 * credentials for a worker (its SGLang key and the Cloudflare Access service token, which fetch
 * keeps on a cross-origin redirect) go only to the URL the worker is registered at, never to a
 * Location a worker, or whoever answers at its URL, names. Real HTTP on both sides.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { initHashing } from "../../../src/util/hash.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ACCESS_SECRET = "access-secret-0123456789abcdef";

let redirector: Server;
let collector: Server;
let redirectorUrl = "";
let collectorUrl = "";
const collected: IncomingHttpHeaders[] = [];

async function listen(s: Server): Promise<string> {
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  await initHashing();
  collector = createServer((req, res) => {
    collected.push(req.headers);
    req.resume();
    res.writeHead(503).end();
  });
  collectorUrl = await listen(collector);
  // The registered worker answers every call with a redirect to another origin (307 keeps the POST).
  redirector = createServer((req, res) => {
    req.resume();
    res.writeHead(307, { location: `${collectorUrl}/generate` }).end();
  });
  redirectorUrl = await listen(redirector);
});

afterAll(async () => {
  for (const s of [redirector, collector]) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

describe("worker redirects", () => {
  it("a worker's redirect to another origin receives neither the worker key nor the Access token", async () => {
    const { index } = oneWorkerIndex(redirectorUrl, MODEL);
    const config = parseEdgeConfig({
      KVEDGE_ACCESS: "public",
      KVEDGE_RATE_LIMIT: "off",
      KVEDGE_ROUTING: JSON.stringify({ maxAttempts: 1 }),
      KVEDGE_WORKER_KEYS: JSON.stringify({ [redirectorUrl]: "worker-key-of-w1-0123456789abcdef" }),
      CF_ACCESS_CLIENT_ID: "client-id.access",
      CF_ACCESS_CLIENT_SECRET: ACCESS_SECRET,
    });
    const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
    for (const stream of [false, true]) {
      collected.length = 0;
      const body = JSON.stringify({ model: MODEL, max_tokens: 4, stream, messages: [{ role: "user", content: "Hello there." }] });
      const out = await handleChatCompletions(new Request("http://edge/v1/chat/completions", { method: "POST", body }), deps).catch((e: unknown) => e);
      expect(out instanceof Response && out.status === 200, `stream=${stream}`).toBe(false);
      expect(collected, `stream=${stream}`).toEqual([]);
    }
  });
});
