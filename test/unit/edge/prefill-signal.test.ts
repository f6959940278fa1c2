/**
 * The edge's prefill-done call (src/edge/chat/settle.ts): a streamed request tells its pool when the
 * worker's first output arrives, also where the routing index watches the prefill end through the
 * worker's stored blocks (their event comes a relay hop later; ending streams only from it cost
 * goodput in the routing replay, docs/benchmarks.md). Real handler, real simulated worker over
 * HTTP, real RoutingCore; the front door records which calls the edge made.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import type { RouteDecision } from "../../../src/routing-index/front-door.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { prefillMarksOf } from "../../helpers/receipts.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const LONG = "Tell me about the stored blocks of a prompt long enough to span several of them. ".repeat(4);

let sim: SimulatedWorker;

beforeAll(async () => {
  await initHashing();
  sim = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
});

afterAll(async () => {
  await sim.close();
});

/** One request through the handler, read to its end; the pool's decision and the edge's prefill-done calls. */
async function run(kvEvents: boolean, content: string, stream: boolean) {
  const { index } = oneWorkerIndex(sim.url, MODEL, kvEvents);
  const decisions: RouteDecision[] = [];
  const prefillDone: string[] = [];
  const route = index.route;
  const receipts = index.receipts;
  index.route = async (r) => {
    prefillDone.push(...prefillMarksOf(r.receipts));
    const d = await route(r);
    if (d) decisions.push(d);
    return d;
  };
  index.receipts = async (entries) => {
    prefillDone.push(...prefillMarksOf(entries));
    return receipts(entries);
  };
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", ADMIN_TOKEN: "admin-token-for-this-test-0123", KVEDGE_WORKER_AUTH: "none" });
  const waits: Promise<unknown>[] = [];
  const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: (p) => void waits.push(p) };
  const req = new Request("http://edge/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content }], max_tokens: 8, stream }),
  });
  const res = await handleChatCompletions(req, deps);
  expect(res.status).toBe(200);
  await res.text();
  await Promise.all(waits);
  expect(decisions).toHaveLength(1);
  return { decision: decisions[0]!, prefillDone };
}

describe("the edge's prefill-done call", () => {
  it("is sent once for every streamed request: a worker with or without KV events, a prompt over or under one block", async () => {
    for (const [kvEvents, content] of [
      [true, LONG],
      [false, LONG],
      [true, "hi"],
    ] as const) {
      const { decision, prefillDone } = await run(kvEvents, content, true);
      expect(prefillDone, `kvEvents ${kvEvents}, ${content.length} chars`).toEqual([decision.receiptId]);
    }
  });

  it("is never sent for an unstreamed request (its answer comes whole)", async () => {
    for (const kvEvents of [true, false]) expect((await run(kvEvents, LONG, false)).prefillDone).toEqual([]);
  });
});
