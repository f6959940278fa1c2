/**
 * The isolate's receipt queue (src/edge/chat/receipt-outbox.ts): settlements and prefill-done marks
 * wait up to RECEIPT_FLUSH_MS for the next route to their shard, or go together on their timer; at
 * once where their room is needed now (a sharded pool's release before reply, a request whose pool
 * was short of room at its pick).
 * Real handler, real simulated worker over HTTP, real RoutingCore; the front door counts the calls;
 * timers are stepped by hand (the outbox's setTimer).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { RECEIPT_FLUSH_MS, ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { routeTarget, type RouteTarget } from "../../../src/edge/chat/route.ts";
import { openReceipt } from "../../../src/edge/chat/settle.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { AdmissionConfigSchema } from "../../../src/config/config.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { MAX_RECEIPTS_PER_CALL, type AdmissionFrontDoor, type ChatFrontDoor, type ReceiptEntry, type RouteDecision } from "../../../src/routing-index/front-door.ts";
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

/** The outbox's timers, run only when the test says (a clock that moves only by hand); `delays`: each one's ms. */
function manualTimers() {
  let pending: (() => void)[] = [];
  const delays: number[] = [];
  return {
    delays,
    setTimer: (fn: () => void, ms: number) => void (delays.push(ms), pending.push(fn)),
    /** Runs every timer set so far (RECEIPT_FLUSH_MS has passed for each). */
    fire(): void {
      const due = pending;
      pending = [];
      due.forEach((fn) => fn());
    },
  };
}

/** `n` requests one after another (each read to its end), then their timers fire and whatever they left runs out. */
async function sequential(n: number, stream: boolean, opts: { shards?: number } = {}) {
  const { core, index, calls } = countingIndex();
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none", KVEDGE_SHARDS: String(opts.shards ?? 1) });
  const waits: Promise<unknown>[] = [];
  const timers = manualTimers();
  const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox({ setTimer: timers.setTimer }), waitUntil: (p) => void waits.push(p) };
  /** Index calls made by the time each answer was complete. */
  const atAnswer: number[] = [];
  for (let k = 0; k < n; k++) {
    const res = await handleChatCompletions(chat(k, stream), deps);
    expect(res.status).toBe(200);
    await res.text();
    atAnswer.push(calls.length);
  }
  timers.fire();
  await Promise.all(waits);
  return { core, calls, atAnswer };
}

describe("index calls per request", () => {
  it.each([false, true])("one client's turns in sequence (stream %s): each request's receipts ride the next request's route; the last one's go on its timer", async (stream) => {
    const n = 3;
    const { core, calls, atAnswer } = await sequential(n, stream);
    const own = stream ? ["prefill_done", "settle"] : ["settle"];
    expect(calls).toEqual([
      { method: "route", carried: [] },
      { method: "route", carried: own },
      { method: "route", carried: own },
      { method: "receipts", carried: own },
    ]);
    // No answer waited for a receipts call.
    expect(atAnswer).toEqual([1, 2, 3]);
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.stats().counters.settled).toBe(n);
  });

  it("a request concurrent with another's settlement carries it on its route call", async () => {
    const { core, index, calls } = countingIndex();
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });
    const timers = manualTimers();
    const outbox = new ReceiptOutbox({ setTimer: timers.setTimer });
    const waits: Promise<unknown>[] = [];
    const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: outbox, waitUntil: (p) => void waits.push(p) };
    const res = await handleChatCompletions(chat(0, false), deps);
    await res.text();
    expect(calls.map((c) => c.method)).toEqual(["route"]);
    await routeTarget(routeInput(() => index, outbox, waits)).pick([], true);
    timers.fire();
    await Promise.all(waits);
    expect(calls).toEqual([
      { method: "route", carried: [] },
      { method: "route", carried: ["settle"] },
    ]);
    expect(core.stats().counters.settled).toBe(1);
  });

  it("a sharded pool's answer waits for its settlement: sent at once, before the answer", async () => {
    const { calls, atAnswer } = await sequential(2, false, { shards: 2 });
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

/**
 * A real core under admission whose one worker `a` holds `capacityTokens`, its clock frozen (as
 * workerd's is within an event) and its timers never firing; `target(seed, tokens = 40)` routes a
 * request of its own prompt through admission; `settleOf` queues a pick's settlement
 * (`sent`: the receipts calls made).
 */
function admittingPool(capacityTokens: number) {
  const core = new RoutingCore({ blockSize: 4, random: () => 0, now: () => 1_000_000, timers: { set: () => 0, clear: () => undefined }, admission: AdmissionConfigSchema.parse({}) });
  core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: MODEL, contract: null, kvEvents: true, kvCapacityTokens: capacityTokens }, "a");
  const admitting: AdmissionFrontDoor = { admit: async ({ admission, ...r }) => core.admit(r, admission), leaveQueue: async (t) => core.leaveQueue(t) };
  const outbox = new ReceiptOutbox({ flushMs: 10_000 });
  const { sent, door } = recordingDoor();
  const waits: Promise<unknown>[] = [];
  const target = (seed: number, tokens = 40) =>
    routeTarget({
      ...routeInput(() => door, outbox, waits),
      localHashes: localBlockHashes(Array.from({ length: tokens }, (_, i) => seed * 1000 + i + 1), 4),
      isl: tokens,
      admission: { index: () => admitting, ticket: { ticket: `t${seed}`, band: 1, tenant: "anonymous", decodeBudget: 0 }, affinityKey: null, signal: null, waitUntil: () => undefined },
    });
  const settleOf = (t: RouteTarget, d: RouteDecision) => void openReceipt({ index: () => door, waitUntil: (p) => void waits.push(p), receiptOutbox: outbox }, t, d, 0, false).settle({ promptTokens: null, cachedTokens: null, outcome: "ok" });
  return { core, target, settleOf, sent };
}

const settle = (receiptId: string): ReceiptEntry => ({ kind: "settle", receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" });

function recordingDoor(fail = false) {
  const sent: ReceiptEntry[][] = [];
  const door = { receipts: async (e: readonly ReceiptEntry[]) => void sent.push([...e]) } as ChatFrontDoor;
  const failing = { receipts: async () => Promise.reject(new Error("index unreachable")) } as unknown as ChatFrontDoor;
  return { sent, door: fail ? failing : door };
}

describe("the queue", () => {
  it("a receipt queued while no request of the isolate routes waits: a route starting within RECEIPT_FLUSH_MS carries it; else its timer sends it alone", async () => {
    const timers = manualTimers();
    const outbox = new ReceiptOutbox({ setTimer: timers.setTimer });
    const { sent, door } = recordingDoor();
    const carriedOne = outbox.queue("m", door, settle("r1"), false);
    await Promise.resolve();
    expect(timers.delays).toEqual([RECEIPT_FLUSH_MS]);
    expect(sent).toEqual([]);
    expect(outbox.take("m")!.entries).toEqual([settle("r1")]);
    timers.fire();
    await carriedOne;
    const aloneOne = outbox.queue("m", door, settle("r2"), false);
    await Promise.resolve();
    expect(sent).toEqual([]);
    timers.fire();
    await aloneOne;
    expect(sent).toEqual([[settle("r2")]]);
    expect(outbox.take("m")).toBeNull();
  });

  it.each([
    ["waited in the admission queue: its settlement goes at once", true],
    ["was admitted at once: its settlement waits for a carrier", false],
  ] as const)("a request that %s", async (_name, atOnce) => {
    const timers = manualTimers();
    const outbox = new ReceiptOutbox({ setTimer: timers.setTimer });
    const { sent, door } = recordingDoor();
    const decision = { workerId: "w1", receiptId: "A" } as RouteDecision;
    const admitting = { admit: async () => ({ kind: "routed", decision, waited: atOnce, crowded: false }), leaveQueue: async () => false } as unknown as AdmissionFrontDoor;
    const waits: Promise<unknown>[] = [];
    const target = routeTarget({
      ...routeInput(() => door, outbox, waits),
      admission: { index: () => admitting, ticket: { ticket: "t1", band: 1, tenant: "anonymous", decodeBudget: 0 }, affinityKey: null, signal: null, waitUntil: () => undefined },
    });
    expect(await target.pick([], true)).toBe(decision);
    const receipt = openReceipt({ index: () => door, waitUntil: (p) => void waits.push(p), receiptOutbox: outbox }, target, decision, 0, false);
    void receipt.settle({ promptTokens: null, cachedTokens: null, outcome: "ok" });
    const entry = { ...settle("A"), edgeOverheadMs: 0 };
    await Promise.resolve();
    expect(sent).toEqual(atOnce ? [[entry]] : []);
    timers.fire();
    await Promise.all(waits);
    expect(sent).toEqual([[entry]]);
  });

  it("a request that waited in the admission queue and was let in within the same ms (workerd's clock is frozen per event) sends its settlement at once", async () => {
    const { core, target, settleOf, sent } = admittingPool(40);
    const first = await target(1).pick([], true);
    const second = target(2);
    const picked = second.pick([], true);
    await Promise.resolve();
    expect(core.admissionSnapshot().bands.some((b) => b.queued > 0)).toBe(true);
    // The first request's settlement reaches the core in the same ms: the second is let in, 0 ms after it queued.
    core.applyReceipts([settle(first!.receiptId)]);
    const decision = (await picked)!;
    expect(second.roomWanted).toBe(true);
    settleOf(second, decision);
    await Promise.resolve();
    expect(sent).toEqual([[{ ...settle(decision.receiptId), edgeOverheadMs: 0 }]]);
  });

  it("a request let in from the admission queue that leaves room behind it (nothing waits, the worker is not full) still sends its settlement at once: it waited", async () => {
    const { core, target, settleOf, sent } = admittingPool(40);
    const first = await target(1).pick([], true);
    const small = target(2, 20);
    const picked = small.pick([], true);
    await Promise.resolve();
    expect(core.admissionSnapshot().bands.some((b) => b.queued > 0)).toBe(true);
    core.applyReceipts([settle(first!.receiptId)]);
    // Let in, it holds 20 of the worker's 40 tokens and the queue is empty: not crowded, only waited.
    const decision = (await picked)!;
    expect(core.admissionSnapshot().bands.every((b) => b.queued === 0)).toBe(true);
    expect(small.roomWanted).toBe(true);
    settleOf(small, decision);
    await Promise.resolve();
    expect(sent).toEqual([[{ ...settle(decision.receiptId), edgeOverheadMs: 0 }]]);
  });

  it("a request admitted at once whose pick left no worker with room sends its settlement at once (the next request, of any isolate, queues); one that left room waits for a carrier", async () => {
    const { target, settleOf, sent } = admittingPool(80);
    const [roomy, filling] = [target(1), target(2)];
    const [a, b] = [(await roomy.pick([], true))!, (await filling.pick([], true))!];
    expect([roomy.roomWanted, filling.roomWanted]).toEqual([false, true]);
    settleOf(roomy, a);
    await Promise.resolve();
    expect(sent).toEqual([]);
    settleOf(filling, b);
    await Promise.resolve();
    expect(sent).toEqual([[{ ...settle(a.receiptId), edgeOverheadMs: 0 }, { ...settle(b.receiptId), edgeOverheadMs: 0 }]]);
  });

  it("a failed attempt of a request that waited, settled as retrying, still goes at once (media recovery settles it long before its retry's pick)", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { sent, door } = recordingDoor();
    const decision = { workerId: "w1", receiptId: "A" } as RouteDecision;
    const routes: (readonly ReceiptEntry[] | undefined)[] = [];
    const routing = { ...door, route: async (r) => (routes.push(r.receipts), { workerId: "w2", receiptId: "B" }) } as ChatFrontDoor;
    const admitting = { admit: async () => ({ kind: "routed", decision, waited: true, crowded: false }), leaveQueue: async () => false } as unknown as AdmissionFrontDoor;
    const waits: Promise<unknown>[] = [];
    const target = routeTarget({
      ...routeInput(() => routing, outbox, waits),
      admission: { index: () => admitting, ticket: { ticket: "t1", band: 1, tenant: "anonymous", decodeBudget: 0 }, affinityKey: null, signal: null, waitUntil: () => undefined },
    });
    expect(await target.pick([], true)).toBe(decision);
    const retrying = { promptTokens: null, cachedTokens: null, outcome: "error", retrying: true } as const;
    void openReceipt({ index: () => routing, waitUntil: (p) => void waits.push(p), receiptOutbox: outbox }, target, decision, 0, false).settle(retrying);
    await Promise.resolve();
    expect(sent).toEqual([[{ kind: "settle", receiptId: "A", edgeOverheadMs: 0, ...retrying }]]);
    await target.pick(["w1"], false);
    expect(routes).toEqual([undefined]);
  });

  it("keeps each shard's receipts for that shard: a route to one carries none of another's", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { door } = recordingDoor();
    void outbox.queue("m", door, settle("r1"), false);
    void outbox.queue("m#1", door, settle("r2"), false);
    expect(outbox.take("m#2")).toBeNull();
    expect(outbox.take("m")!.entries.map((e) => e.receiptId)).toEqual(["r1"]);
    expect(outbox.take("m")).toBeNull();
    expect(outbox.take("m#1")!.entries.map((e) => e.receiptId)).toEqual(["r2"]);
  });

  it("sends a full queue at once, in one call of MAX_RECEIPTS_PER_CALL", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 200 });
    const { sent, door } = recordingDoor();
    const released = Array.from({ length: MAX_RECEIPTS_PER_CALL }, (_, k) => outbox.queue("m", door, settle(`r${k}`), false));
    await new Promise((r) => setTimeout(r, 0)); // before any receipt's timer
    expect(sent.map((c) => c.length)).toEqual([MAX_RECEIPTS_PER_CALL]);
    await Promise.all(released);
    expect(outbox.take("m")).toBeNull();
  });

  it("a receipt another request's call took settles its promise on its own timer, not on that call; a failed carrying call sends it on its own", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 20 });
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
    const outbox = new ReceiptOutbox({ flushMs: 10_000, now: () => now });
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
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { door } = recordingDoor(true);
    await expect(outbox.queue("m", door, settle("r1"), true)).resolves.toBeUndefined();
  });

  it("a timer whose receipt went already sends nothing: a later receipt goes on its own request's timer and stub", async () => {
    const outbox = new ReceiptOutbox({ flushMs: 40 });
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
    const outbox = new ReceiptOutbox({ flushMs: 20 });
    const { sent, door } = recordingDoor();
    const failing = { ...door, route: async () => Promise.reject(new Error("index reset")) } as ChatFrontDoor;
    const refusing = { admit: async () => ({ kind: "refused", reason: "queue_full", retryAfterSeconds: 1 }), leaveQueue: async () => false } as unknown as AdmissionFrontDoor;
    const waits: Promise<unknown>[] = [];
    const target = (admission: boolean) =>
      routeTarget({
        ...routeInput(() => failing, outbox, waits),
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

  it.each([false, true])("a carrying call's resend waits under its request's waitUntil from the call's start (admission %s): a handler cancelled while the call waits (workerd drops its continuations) still resends", async (admission) => {
    const outbox = new ReceiptOutbox({ flushMs: 10_000 });
    const { sent, door } = recordingDoor();
    let fail!: (e: Error) => void;
    const hanging = () => new Promise<never>((_, reject) => (fail = reject));
    const waits: Promise<unknown>[] = [];
    const target = routeTarget({
      ...routeInput(() => ({ ...door, route: hanging }) as ChatFrontDoor, outbox, waits),
      ...(admission ? { admission: { index: () => ({ admit: hanging, leaveQueue: async () => false }), ticket: { ticket: "t1", band: 1, tenant: "anonymous", decodeBudget: 0 }, affinityKey: null, signal: null, waitUntil: () => undefined } } : {}),
    });
    void outbox.queue(MODEL, door, settle("r1"), false);
    target.pick([], true).catch(() => undefined);
    await Promise.resolve();
    // All the request holds while its call waits: its own path after the await may never run.
    const held = [...waits];
    expect(held).toHaveLength(1);
    fail(new Error("index reset"));
    await Promise.all(held);
    expect(sent).toEqual([[settle("r1")]]);
  });

  it("dates a prefill-done mark by the time it waited in the queue", () => {
    let now = 1_000;
    const outbox = new ReceiptOutbox({ flushMs: 10_000, now: () => now });
    void outbox.queue("m", recordingDoor().door, { kind: "prefill_done", receiptId: "r1", ageMs: 0 }, false);
    now += 7;
    expect(outbox.take("m")!.entries).toEqual([{ kind: "prefill_done", receiptId: "r1", ageMs: 7 }]);
  });
});
