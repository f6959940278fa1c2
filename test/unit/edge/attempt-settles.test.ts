/**
 * How each attempt of a request is settled on the routing index (src/edge/chat/forward.ts,
 * proxy.ts), through the real chat handler, a real RoutingCore holding two workers and real HTTP:
 * a worker under test (`bad`, its behaviour set per test) always takes the first pick, then the
 * simulated SGLang worker (`good`). Each attempt settles once:
 * - a stream cut before any output by the worker (an unreadable frame, a dropped connection):
 *   settled as an error that is retried, then the next worker answers;
 * - the worker's own error frame before any output: settled once as the request's error;
 * - the client going before any output (before or after the worker's headers): settled once as
 *   cancelled, never an error and never sent to another worker.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { settlementsOf } from "../../helpers/receipts.ts";
import type { ChatFrontDoor, SettleRequest } from "../../../src/routing-index/front-door.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";

type Behaviour = "unreadable-frame" | "drop-after-headers" | "error-frame-500" | "stall-after-headers" | "stall-before-headers";

let sim: SimulatedWorker;
let bad: Server;
let badUrl = "";
let behaviour: Behaviour = "unreadable-frame";
/** Resolved when the bad worker has a request (its headers sent, where it sends them). */
let badReached: () => void = () => undefined;

beforeAll(async () => {
  await initHashing();
  sim = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
  bad = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on("end", () => {
      if (behaviour === "stall-before-headers") return badReached();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      if (behaviour === "unreadable-frame") res.end('data: {"text": 5}\n\n');
      else if (behaviour === "error-frame-500") res.end('data: {"error": {"message": "scheduler failed", "code": 500}}\n\n');
      else if (behaviour === "drop-after-headers") setTimeout(() => res.destroy(), 20);
      badReached();
    });
  });
  await new Promise<void>((r) => bad.listen(0, "127.0.0.1", r));
  badUrl = `http://127.0.0.1:${(bad.address() as AddressInfo).port}`;
});

afterAll(async () => {
  bad.closeAllConnections();
  await new Promise((r) => bad.close(r));
  await sim.close();
});

function setup() {
  const core = new RoutingCore({ blockSize: 16 });
  core.hello({ type: "hello", workerId: "bad", url: badUrl, blockSize: 16, epoch: 1, modelName: MODEL, contract: null, kvEvents: true }, "bad");
  core.hello({ type: "hello", workerId: "good", url: sim.url, blockSize: 16, epoch: 1, modelName: MODEL, contract: null, kvEvents: true }, "good");
  const settles: SettleRequest[] = [];
  let picks = 0;
  const index: ChatFrontDoor = {
    // The first pick is the worker under test; later picks are the core's own (and carry the first's settlement).
    route: async (r) => {
      settles.push(...settlementsOf(r.receipts));
      return core.route(picks++ === 0 ? { ...r, exclude: [...(r.exclude ?? []), "good"] } : r);
    },
    profile: async () => ({ blockSize: null, workers: 2, workersUp: 2, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async (s) => {
      settles.push(s);
      core.settle(s);
    },
    quarantine: async () => undefined,
    markPrefillDone: async (id) => core.markPrefillDone(id),
    receipts: async (entries) => {
      settles.push(...settlementsOf(entries));
      core.applyReceipts(entries);
    },
  };
  const generate = new Map<string, number>();
  let badHeaders: () => void = () => undefined;
  /** Resolved once the edge has the bad worker's headers. */
  const badHeadersSeen = new Promise<void>((r) => (badHeaders = r));
  const waits: Promise<unknown>[] = [];
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
  const deps: ChatDeps = {
    config,
    index: () => index,
    fetch: (u, i) => {
      const url = String(u);
      if (url.endsWith("/generate")) generate.set(url, (generate.get(url) ?? 0) + 1);
      const answer = fetch(u, i);
      if (url === `${badUrl}/generate`) void answer.then(badHeaders, () => undefined);
      return answer;
    },
    receiptOutbox: new ReceiptOutbox(),
    waitUntil: (p) => void waits.push(p),
  };
  const calls = () => ({ bad: generate.get(`${badUrl}/generate`) ?? 0, good: generate.get(`${sim.url}/generate`) ?? 0 });
  // Each settle with its worker, as the index recorded it.
  const outcomes = async () => {
    await Promise.all(waits);
    const workerOf = new Map(core.stats().recentReceipts.map((r) => [r.receiptId, r.workerId]));
    return settles.map((s) => ({ worker: workerOf.get(s.receiptId), outcome: s.outcome, retrying: s.retrying ?? false }));
  };
  return { core, deps, calls, outcomes, badHeadersSeen };
}

function chat(stream: boolean, signal?: AbortSignal): Request {
  return new Request("http://edge/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "How are attempts settled?" }], max_tokens: 8, stream }),
    ...(signal ? { signal } : {}),
  });
}

describe("each attempt settles once (real handler, real index, real HTTP)", () => {
  it.each(["unreadable-frame", "drop-after-headers"] as const)("a stream cut before any output by the worker (%s): an error that is retried, then the next worker answers", async (b) => {
    behaviour = b;
    const { core, deps, calls, outcomes } = setup();
    const res = await handleChatCompletions(chat(true), deps);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("data: [DONE]");
    expect(calls()).toEqual({ bad: 1, good: 1 });
    expect(await outcomes()).toEqual([
      { worker: "bad", outcome: "error", retrying: true },
      { worker: "good", outcome: "ok", retrying: false },
    ]);
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("the worker's own error frame before any output: settled once as the request's error, not retried", async () => {
    behaviour = "error-frame-500";
    const { core, deps, calls, outcomes } = setup();
    const res = await handleChatCompletions(chat(true), deps);
    expect(res.status).toBe(502);
    expect(calls()).toEqual({ bad: 1, good: 0 });
    expect(await outcomes()).toEqual([{ worker: "bad", outcome: "error", retrying: false }]);
    expect(core.sizes().activeRequests).toBe(0);
  });

  it.each([
    ["stall-after-headers", true],
    ["stall-before-headers", true],
    ["stall-before-headers", false],
  ] as const)("the client going before any output (worker: %s, stream %s): settled once as cancelled, not sent elsewhere", async (b, stream) => {
    behaviour = b;
    const { core, deps, calls, outcomes, badHeadersSeen } = setup();
    const reached = new Promise<void>((r) => (badReached = r));
    const client = new AbortController();
    const answer = handleChatCompletions(chat(stream, client.signal), deps);
    await (b === "stall-after-headers" ? badHeadersSeen : reached);
    client.abort();
    const res = await answer;
    expect((await res.json()) as unknown).toMatchObject({ error: { code: "cancelled" } });
    expect(calls()).toEqual({ bad: 1, good: 0 });
    expect(await outcomes()).toEqual([{ worker: "bad", outcome: "cancelled", retrying: false }]);
    expect(core.sizes().activeRequests).toBe(0);
  });
});
