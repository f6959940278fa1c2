/**
 * `/v1/completions` streams logprobs through the same cumulative frames as chat, so the same cost
 * bound applies (src/proxy/stream-cost.ts): a stream with `logprobs` past it goes only to workers
 * that stream increments, and is the client's 400 when the pool has none, before any worker is
 * called. A short one is served.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import type { ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { handleCompletions } from "../../../src/edge/completions/handler.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { initHashing } from "../../../src/util/hash.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
let worker: Server;
let workerUrl = "";
let calls = 0;

beforeAll(async () => {
  await initHashing();
  // Counts calls; answers 503 (the test only asks whether the edge called it).
  worker = createServer((req, res) => {
    calls++;
    req.resume();
    res.writeHead(503).end();
  });
  await new Promise<void>((r) => worker.listen(0, "127.0.0.1", r));
  workerUrl = `http://127.0.0.1:${(worker.address() as AddressInfo).port}`;
});

afterAll(async () => {
  worker.closeAllConnections();
  await new Promise((r) => worker.close(r));
});

function deps(): ChatDeps {
  // A cumulative-frame worker (SGLang's default): incrementalStreaming false.
  const { index } = oneWorkerIndex(workerUrl, MODEL);
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none", KVEDGE_ROUTING: JSON.stringify({ maxAttempts: 1 }) });
  return { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
}

const complete = (body: Record<string, unknown>) =>
  handleCompletions(new Request("http://edge/v1/completions", { method: "POST", body: JSON.stringify({ model: MODEL, prompt: "Once upon a time", ...body }) }), deps()).catch((e: unknown) => e);

describe("completions: streamed logprobs on cumulative-frame workers", () => {
  it("past the bound: 400 logprobs_stream_too_costly naming max_tokens, and no worker is called", async () => {
    calls = 0;
    const err = await complete({ stream: true, logprobs: 5, max_tokens: 4_000 });
    expect(err).toMatchObject({ code: "logprobs_stream_too_costly", param: "max_tokens" });
    expect(calls).toBe(0);
  });

  it("within the bound, or without logprobs or streaming: the worker is called", async () => {
    for (const body of [{ stream: true, logprobs: 5, max_tokens: 100 }, { stream: true, max_tokens: 4_000 }, { logprobs: 5, max_tokens: 4_000 }]) {
      calls = 0;
      await complete(body);
      expect(calls, JSON.stringify(body)).toBe(1);
    }
  });
});
