/**
 * A worker that answers every call 503 and counts the calls, with the edge deps of a one-worker pool
 * pointing at it (one attempt, public, no worker auth): for tests that ask only whether the edge
 * called a worker.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { parseEdgeConfig } from "../../src/config/config.ts";
import type { ChatDeps } from "../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../src/edge/chat/receipt-outbox.ts";
import { oneWorkerIndex } from "./one-worker-index.ts";

export class RefusingWorker {
  calls = 0;
  url = "";
  readonly #server: Server = createServer((req, res) => {
    this.calls++;
    req.resume();
    res.writeHead(503).end();
  });

  async start(): Promise<void> {
    await new Promise<void>((r) => this.#server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((r) => this.#server.close(r));
  }

  /** Edge deps of a pool of `model` whose one worker is this one. */
  deps(model: string): ChatDeps {
    const { index } = oneWorkerIndex(this.url, model);
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none", KVEDGE_ROUTING: JSON.stringify({ maxAttempts: 1 }) });
    return { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
  }
}
