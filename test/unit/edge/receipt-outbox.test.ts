/**
 * The isolate's receipt queue (src/edge/chat/receipt-outbox.ts): settlements and prefill-done marks
 * go at once when no request of the isolate is preparing a route; otherwise they wait for the next
 * route to their shard, or go together after a short wait.
 * Real handler, real simulated worker over HTTP, real RoutingCore; the front door counts the calls.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorResponse } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { handleCompletions } from "../../../src/edge/completions/handler.ts";
import { handleResponsesRoute } from "../../../src/edge/responses/handler.ts";
import { PREPARING_MARK_MAX_MS, ReceiptOutbox, type PreparingRoute } from "../../../src/edge/chat/receipt-outbox.ts";
import { routeTarget } from "../../../src/edge/chat/route.ts";
import { shardObjectName } from "../../../src/routing-index/pool-address.ts";
import { MAX_RECEIPTS_PER_CALL, type AdmissionFrontDoor, type ChatFrontDoor, type ReceiptEntry } from "../../../src/routing-index/front-door.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";

let sim: SimulatedWorker;

beforeAll(async () => {
  await initHashing();
  sim = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
});

afterAll(async () => {
  await sim.close();
});

/** The front door over a real core, counting every call and what each carried. */
function countingIndex() {
  const { core, index } = oneWorkerIndex(sim.url, MODEL);
  const calls: { method: string; carried: ReceiptEntry["kind"][] }[] = [];
  const counted: ChatFrontDoor = {
    route: (r) => (calls.push({ method: "route", carried: (r.receipts ?? []).map((e) => e.kind) }), index.route(r)),
    receipts: (e) => (calls.push({ method: "receipts", carried: e.map((x) => x.kind) }), index.receipts(e)),
    settle: (s) => (calls.push({ method: "settle", carried: [] }), index.settle(s)),
    markPrefillDone: (id) => (calls.push({ method: "markPrefillDone", carried: [] }), index.markPrefillDone(id)),
    quarantine: (w, r) => (calls.push({ method: "quarantine", carried: [] }), index.quarantine(w, r)),
    profile: () => index.profile(),
  };
  return { core, index: counted, calls };
}

function chat(n: number, stream: boolean): Request {
  return new Request("http://edge/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `Question ${n}: how many calls does a request cost the index?` }], max_tokens: 8, stream }),
  });
}

function post(path: string, body: unknown): Request {
  return new Request(`http://edge${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** `n` requests one after another (each read to its end), then whatever they left running. */
async function sequential(n: number, stream: boolean, opts: { shards?: number; flushMs: number }) {
  const { core, index, calls } = countingIndex();
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none", KVEDGE_SHARDS: String(opts.shards ?? 1) });
  const waits: Promise<unknown>[] = [];
  const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox({ flushMs: opts.flushMs }), waitUntil: (p) => void waits.push(p) };
  /** Index calls made by the time each answer was complete. */
  const atAnswer: number[] = [];
  for (let k = 0; k < n; k++) {
    const res = await handleChatCompletions(chat(k, stream), deps);
    expect(res.status).toBe(200);
    await res.text();
    atAnswer.push(calls.length);
  }
  await Promise.all(waits);
  return { core, calls, atAnswer };
}

describe("index calls per request", () => {
  it.each([false, true])("a request alone (stream %s): its receipts go at once, each in its own call, nothing waits for a route", async (stream) => {
    const n = 3;
    // A wait longer than the test: a receipt that waited for a carrier would ride the next route.
    const { core, calls, atAnswer } = await sequential(n, stream, { flushMs: 10_000 });
    const perRequest = [{ method: "route", carried: [] }, ...(stream ? [{ method: "receipts", carried: ["prefill_done"] }] : []), { method: "receipts", carried: ["settle"] }];
    expect(calls).toEqual(Array.from({ length: n }, () => perRequest).flat());
    if (!stream) expect(atAnswer).toEqual([2, 4, 6]);
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.stats().counters.settled).toBe(n);
  });

  it("while another request prepares its route, a settlement waits for it and rides its route call", async () => {
    const { core, index, calls } = countingIndex();
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
    const outbox = new ReceiptOutbox({ flushMs: 500 });
    const waits: Promise<unknown>[] = [];
    const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: outbox, waitUntil: (p) => void waits.push(p) };
    let startRoute!: () => void;
    const go = new Promise<void>((r) => (startRoute = r));
    // Request B prepares until `go`, then picks.
    const b = outbox.whilePreparingRoute(async (preparing) => {
      await go;
      return routeTarget({ ...routeInput(() => index, outbox, waits), preparing }).pick([], true);
    });
    const res = await handleChatCompletions(chat(0, false), deps);
    await res.text();
    expect(calls.map((c) => c.method)).toEqual(["route"]);
    startRoute();
    await b;
    await Promise.all(waits);
    expect(calls).toEqual([
      { method: "route", carried: [] },
      { method: "route", carried: ["settle"] },
    ]);
    expect(core.stats().counters.settled).toBe(1);
  });

  it("a request that fails before routing stops counting: what waited goes on its timer, and a later receipt at once", async () => {
    const { index, calls } = countingIndex();
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
    const outbox = new ReceiptOutbox({ flushMs: 50 });
    const waits: Promise<unknown>[] = [];
    const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: outbox, waitUntil: (p) => void waits.push(p) };
    // Request B's body arrives late and is not JSON: B prepares (reads its body) until it fails with a 400.
    let body!: ReadableStreamDefaultController<Uint8Array>;
    const stalled = new Request("http://edge/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: new ReadableStream<Uint8Array>({ start: (c) => void (body = c) }),
      duplex: "half",
    } as RequestInit);
    const b = handleChatCompletions(stalled, deps).then(
      (r) => r.status,
      (e: unknown) => errorResponse(e).status,
    );
    const a = await handleChatCompletions(chat(0, false), deps);
    await a.text();
    expect(calls.map((c) => c.method)).toEqual(["route"]);
    body.enqueue(new TextEncoder().encode("{not json"));
    body.close();
    expect(await b).toBe(400);
    await Promise.all(waits);
    expect(calls.map((c) => c.method)).toEqual(["route", "receipts"]);
    // Nothing prepares now (the count went back to 0, not below): a receipt goes without waiting.
    const { sent, door } = recordingDoor();
    const released = outbox.queue("m", door, settle("r9"), false);
    await Promise.resolve();
    expect(sent).toEqual([[settle("r9")]]);
    await released;
  });

  it.each([
    ["chat", "/v1/chat/completions", (r: Request, d: ChatDeps) => handleChatCompletions(r, d)],
    ["completions", "/v1/completions", (r: Request, d: ChatDeps) => handleCompletions(r, d)],
    ["responses", "/v1/responses", (r: Request, d: ChatDeps) => handleResponsesRoute(r, "/v1/responses", d) as Promise<Response>],
  ] as const)("a %s request counts as preparing from its start: receipts queued meanwhile wait for it", async (_name, path, handle) => {
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
    const outbox = new ReceiptOutbox({ flushMs: 30 });
    const { sent, door } = recordingDoor();
    const deps: ChatDeps = { config, index: () => door, fetch: (u, i) => fetch(u, i), receiptOutbox: outbox, waitUntil: () => undefined };
    let body!: ReadableStreamDefaultController<Uint8Array>;
    const stalled = new Request(`http://edge${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: new ReadableStream<Uint8Array>({ start: (c) => void (body = c) }),
      duplex: "half",
    } as RequestInit);
    const failed = handle(stalled, deps).then(
      (r) => r.status,
      (e: unknown) => errorResponse(e).status,
    );
    const waited = outbox.queue("m", door, settle("r1"), false);
    await new Promise((r) => setTimeout(r, 5));
    expect(sent).toEqual([]);
    body.close();
    expect(await failed).toBe(400);
    await waited;
    expect(sent).toEqual([[settle("r1")]]);
  });

  it("a mark released twice counts once: another request still preparing keeps receipts waiting", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { sent, door } = recordingDoor();
    let finish!: () => void;
    const stillPreparing = outbox.whilePreparingRoute(() => new Promise<void>((r) => (finish = r)));
    await outbox.whilePreparingRoute(async (mark) => {
      mark.release();
      mark.release();
    });
    void outbox.queue("m", door, settle("r1"), false);
    await Promise.resolve();
    expect(sent).toEqual([]);
    finish();
    await stillPreparing;
    expect(outbox.take("m")!.entries.map((e) => e.receiptId)).toEqual(["r1"]);
  });

  it("a request whose shard is known keeps only that shard's receipts waiting; one whose shard is not known yet keeps every shard's", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { sent, door } = recordingDoor();
    const marks: PreparingRoute[] = [];
    const finish: (() => void)[] = [];
    const prepare = () => void outbox.whilePreparingRoute((mark) => (marks.push(mark), new Promise<void>((r) => finish.push(r))));
    const queued = async (shardKey: string, receiptId: string) => {
      void outbox.queue(shardKey, door, settle(receiptId), false);
      await Promise.resolve();
    };
    prepare();
    await queued("m#1", "r1");
    expect(sent).toEqual([]);
    // Its hashes name shard 2: shard 1's next receipt goes at once, with the one that waited.
    marks[0]!.goesTo("m#2");
    await queued("m#1", "r2");
    expect(sent).toEqual([[settle("r1"), settle("r2")]]);
    await queued("m#2", "r3");
    expect(sent).toHaveLength(1);
    // A second request, its shard not known yet: shard 1's receipts wait again, until it names shard 0.
    prepare();
    await queued("m#1", "r4");
    expect(sent).toHaveLength(1);
    marks[1]!.goesTo("m");
    await queued("m#1", "r5");
    expect(sent).toEqual([[settle("r1"), settle("r2")], [settle("r4"), settle("r5")]]);
    // A batch's prompts may name several shards: each one's receipts wait.
    marks[1]!.goesTo("m#1");
    await queued("m#1", "r6");
    expect(sent).toHaveLength(2);
    finish.forEach((f) => f());
    expect(outbox.take("m#2")!.entries.map((e) => e.receiptId)).toEqual(["r3"]);
    expect(outbox.take("m#1")!.entries.map((e) => e.receiptId)).toEqual(["r6"]);
  });

  it.each([
    ["chat", (d: ChatDeps) => handleChatCompletions(chat(0, false), d)],
    ["completions", (d: ChatDeps) => handleCompletions(post("/v1/completions", { model: MODEL, prompt: "How many calls does a request cost the index?", max_tokens: 8 }), d)],
    ["responses", (d: ChatDeps) => handleResponsesRoute(post("/v1/responses", { model: MODEL, input: "How many calls does a request cost the index?", max_output_tokens: 8, store: false }), "/v1/responses", d) as Promise<Response>],
  ] as const)("two models in one isolate: while a %s request for one still prepares, the other pool's receipts go at once; its own wait and ride its route", async (_name, handle) => {
    const { index, calls } = countingIndex();
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { sent, door } = recordingDoor();
    let quotaAsked!: () => void;
    const asked = new Promise<void>((r) => (quotaAsked = r));
    let grant!: () => void;
    const granted = new Promise<void>((r) => (grant = r));
    const waits: Promise<unknown>[] = [];
    const deps: ChatDeps = {
      config,
      index: () => index,
      fetch: (u, i) => fetch(u, i),
      receiptOutbox: outbox,
      waitUntil: (p) => void waits.push(p),
      // The token quota answers late: the request is still preparing its route.
      tokenQuota: async () => (quotaAsked(), await granted, {}),
    };
    const a = handle(deps);
    await asked;
    void outbox.queue(shardObjectName("another/model", 0), door, settle("r-other"), false);
    void outbox.queue(shardObjectName(MODEL, 0), door, settle("r-own"), false);
    await Promise.resolve();
    expect(sent).toEqual([[settle("r-other")]]);
    grant();
    expect((await a).status).toBe(200);
    expect(calls[0]).toEqual({ method: "route", carried: ["settle"] });
    expect(sent).toHaveLength(1);
    await Promise.all(waits);
  });

  it("a sharded pool's answer waits for its settlement: sent at once, before the answer", async () => {
    const { calls, atAnswer } = await sequential(2, false, { shards: 2, flushMs: 500 });
    expect(calls.map((c) => c.method)).toEqual(["route", "receipts", "route", "receipts"]);
    expect(atAnswer).toEqual([2, 4]);
  });
});

function routeInput(index: () => ChatFrontDoor, outbox: ReceiptOutbox, waits: Promise<unknown>[]) {
  return {
    index,
    shards: 1,
    model: MODEL,
    localHashes: [],
    isl: 1,
    fallbackReason: null,
    edgeColo: null,
    traceId: "t",
    incrementalOnly: false,
    receiptOutbox: outbox,
    waitUntil: (p: Promise<unknown>) => void waits.push(p),
  };
}

const settle = (receiptId: string): ReceiptEntry => ({ kind: "settle", receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" });

function recordingDoor(fail = false) {
  const sent: ReceiptEntry[][] = [];
  const door = { receipts: async (e: readonly ReceiptEntry[]) => void sent.push([...e]) } as ChatFrontDoor;
  const failing = { receipts: async () => Promise.reject(new Error("index unreachable")) } as unknown as ChatFrontDoor;
  return { sent, door: fail ? failing : door };
}

/** An outbox where a request prepares a route for as long as the test runs: receipts wait for a carrier or their timer. */
function preparingOutbox(opts: ConstructorParameters<typeof ReceiptOutbox>[0]): ReceiptOutbox {
  const outbox = new ReceiptOutbox(opts);
  void outbox.whilePreparingRoute(() => new Promise<never>(() => undefined));
  return outbox;
}

describe("the queue (a request preparing a route throughout)", () => {

  it("a mark never released (workerd cancelled its request) stops counting after PREPARING_MARK_MAX_MS: receipts then go at once", async () => {
    let now = 1_000;
    const outbox = new ReceiptOutbox({ flushMs: 10_000, now: () => now });
    void outbox.whilePreparingRoute(() => new Promise<never>(() => undefined));
    const { sent, door } = recordingDoor();
    void outbox.queue("m", door, settle("r1"), false);
    await Promise.resolve();
    expect(sent).toEqual([]);
    now += PREPARING_MARK_MAX_MS;
    const released = outbox.queue("m", door, settle("r2"), false);
    await Promise.resolve();
    expect(sent).toEqual([[settle("r1"), settle("r2")]]);
    await released;
  });

  it("keeps each shard's receipts for that shard: a route to one carries none of another's", async () => {
    const outbox = preparingOutbox({ flushMs: 10_000 });
    const { door } = recordingDoor();
    void outbox.queue("m", door, settle("r1"), false);
    void outbox.queue("m#1", door, settle("r2"), false);
    expect(outbox.take("m#2")).toBeNull();
    expect(outbox.take("m")!.entries.map((e) => e.receiptId)).toEqual(["r1"]);
    expect(outbox.take("m")).toBeNull();
    expect(outbox.take("m#1")!.entries.map((e) => e.receiptId)).toEqual(["r2"]);
  });

  it("sends a full queue at once, in one call of MAX_RECEIPTS_PER_CALL", async () => {
    const outbox = preparingOutbox({ flushMs: 200 });
    const { sent, door } = recordingDoor();
    const released = Array.from({ length: MAX_RECEIPTS_PER_CALL }, (_, k) => outbox.queue("m", door, settle(`r${k}`), false));
    await new Promise((r) => setTimeout(r, 0)); // before any receipt's timer
    expect(sent.map((c) => c.length)).toEqual([MAX_RECEIPTS_PER_CALL]);
    await Promise.all(released);
    expect(outbox.take("m")).toBeNull();
  });

  it("a receipt another request's call took settles its promise on its own timer, not on that call; a failed carrying call sends it on its own", async () => {
    const outbox = preparingOutbox({ flushMs: 20 });
    const { sent, door } = recordingDoor();
    let done = false;
    const released = outbox.queue("m", door, settle("r1"), false).then(() => (done = true));
    const carried = outbox.take("m")!;
    await Promise.resolve();
    expect(done).toBe(false);
    // The carrying call never answers: the queuing request is done with it at its timer.
    await released;
    expect(sent).toEqual([]);
    await carried.sendAlone(door);
    expect(sent).toEqual([[settle("r1")]]);
  });

  it("a resent mark is dated by its wait until the resend, not until the failed call took it", async () => {
    let now = 1_000;
    const outbox = preparingOutbox({ flushMs: 10_000, now: () => now });
    const { sent, door } = recordingDoor();
    void outbox.queue("m", door, { kind: "prefill_done", receiptId: "r1", ageMs: 0 }, false);
    now += 2;
    const carried = outbox.take("m")!;
    expect(carried.entries).toEqual([{ kind: "prefill_done", receiptId: "r1", ageMs: 2 }]);
    now += 5; // the carrying call failed 5 ms later
    await carried.sendAlone(door);
    expect(sent).toEqual([[{ kind: "prefill_done", receiptId: "r1", ageMs: 7 }]]);
  });

  it("a call that fails still resolves its receipts' promises (best-effort, like every receipt call)", async () => {
    const outbox = preparingOutbox({ flushMs: 10_000 });
    const { door } = recordingDoor(true);
    await expect(outbox.queue("m", door, settle("r1"), true)).resolves.toBeUndefined();
  });

  it("a timer whose receipt went already sends nothing: a later receipt goes on its own request's timer and stub", async () => {
    const outbox = preparingOutbox({ flushMs: 40 });
    const first = recordingDoor();
    const second = recordingDoor();
    const delivered = [outbox.queue("m", first.door, settle("r1"), false)];
    outbox.take("m"); // a route carried r1: its request may be ending
    await new Promise((r) => setTimeout(r, 20));
    delivered.push(outbox.queue("m", second.door, settle("r2"), false));
    await Promise.all(delivered);
    expect(first.sent).toEqual([]);
    expect(second.sent).toEqual([[settle("r2")]]);
  });

  it("a route call that fails sends the receipts it carried on their own; a refusal that answered does not", async () => {
    const outbox = preparingOutbox({ flushMs: 20 });
    const { sent, door } = recordingDoor();
    const failing = { ...door, route: async () => Promise.reject(new Error("index reset")) } as ChatFrontDoor;
    const refusing = { admit: async () => ({ kind: "refused", reason: "queue_full", retryAfterSeconds: 1 }), leaveQueue: async () => false } as unknown as AdmissionFrontDoor;
    const waits: Promise<unknown>[] = [];
    const target = (admission: boolean) =>
      routeTarget({
        ...routeInput(() => failing, outbox, waits),
        preparing: { goesTo: () => undefined, release: () => undefined },
        ...(admission ? { admission: { index: () => refusing, ticket: { ticket: "t1", band: 1, tenant: "anonymous", decodeBudget: 0 }, affinityKey: null, signal: null, waitUntil: () => undefined } } : {}),
      });
    const first = outbox.queue(MODEL, door, settle("r1"), false);
    await expect(target(false).pick([], true)).rejects.toThrow("index reset");
    await Promise.all(waits);
    await first;
    expect(sent).toEqual([[settle("r1")]]);
    const second = outbox.queue(MODEL, door, settle("r2"), false);
    await expect(target(true).pick([], true)).rejects.toThrow(/capacity/);
    await second;
    expect(sent).toEqual([[settle("r1")]]);
  });

  it("dates a prefill-done mark by the time it waited in the queue", () => {
    let now = 1_000;
    const outbox = preparingOutbox({ flushMs: 10_000, now: () => now });
    void outbox.queue("m", recordingDoor().door, { kind: "prefill_done", receiptId: "r1", ageMs: 0 }, false);
    now += 7;
    expect(outbox.take("m")!.entries).toEqual([{ kind: "prefill_done", receiptId: "r1", ageMs: 7 }]);
  });
});
