/**
 * Receipts carried by a route or admit call (src/routing-index/receipt-entries.ts): the index
 * applies them, in order, before the call's decision, so a settlement that frees a worker lets
 * the carrying request (or one waiting in the admission queue) in at once; a prefill-done mark that
 * waited at the edge is dated back by its age. Real RoutingCore, manual clock.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore, type RouteDecision } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { AdmissionConfigSchema } from "../../../src/config/config.ts";
import type { AdmissionTicket, AdmitOutcome, Timers } from "../../../src/admission/admission-gate.ts";
import { BAND_DEFAULT } from "../../../src/admission/bands.ts";
import { MAX_RECEIPT_ID_LENGTH, MAX_RECEIPTS_PER_CALL, type ReceiptEntry } from "../../../src/routing-index/receipt-entries.ts";

beforeAll(() => initHashing());

const BS = 4;
/** Timers that never fire: the admission deadlines stay out of these tests. */
const NEVER: Timers = { set: () => 0, clear: () => undefined };

/** One worker that holds one request of `prompt()`'s size (40 tokens) before admission queues. */
function fullAfterOne() {
  const core = new RoutingCore({ blockSize: BS, random: () => 0, timers: NEVER, admission: AdmissionConfigSchema.parse({}) });
  core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: 40 }, "a");
  return core;
}

const prompt = (seed: number) => Array.from({ length: 10 * BS }, (_, i) => seed * 100_000 + i + 1);
const request = (seed: number) => ({ localHashes: localBlockHashes(prompt(seed), BS), isl: 10 * BS });
let seq = 0;
const ticket = (): AdmissionTicket => ({ ticket: `t${seq++}`, band: BAND_DEFAULT, tenant: "anonymous", decodeBudget: 0 });
const settlement = (d: RouteDecision): ReceiptEntry => ({ kind: "settle", receiptId: d.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" });

function routed(o: AdmitOutcome<RouteDecision> | Promise<AdmitOutcome<RouteDecision>>): RouteDecision {
  if (o instanceof Promise || o.kind !== "routed") throw new Error(`not routed at once: ${o instanceof Promise ? "queued" : o.kind}`);
  return o.decision;
}

describe("receipts carried by a call are applied before its decision", () => {
  it("an admit carrying the settlement that frees the only worker is routed at once, not queued", () => {
    const core = fullAfterOne();
    const first = routed(core.admit(request(1), ticket()));
    // Without the receipt the worker is full: a request waits (and leaves again).
    const other = ticket();
    expect(core.admit(request(2), other)).toBeInstanceOf(Promise);
    expect(core.leaveQueue(other.ticket)).toBe(true);
    const next = core.admit({ ...request(3), receipts: [settlement(first)] }, ticket());
    expect(next).not.toBeInstanceOf(Promise);
    expect(routed(next).workerId).toBe("a");
    expect(core.stats().counters.settled).toBe(1);
  });

  it("a route carrying a settlement lets the request waiting in the admission queue in first", async () => {
    const core = fullAfterOne();
    const first = routed(core.admit(request(1), ticket()));
    const waiting = core.admit(request(2), ticket());
    expect(waiting).toBeInstanceOf(Promise);
    let admitted: AdmitOutcome<RouteDecision> | null = null;
    void (waiting as Promise<AdmitOutcome<RouteDecision>>).then((o) => (admitted = o));
    // A retry's route (never queued) carries the first request's settlement.
    const retry = core.route({ ...request(3), receipts: [settlement(first)] });
    await Promise.resolve();
    expect(admitted).toMatchObject({ kind: "routed", decision: { workerId: "a" } });
    expect(retry?.workerId).toBe("a");
    // The waiting request took the room before the retry's pick added its own load.
    expect(core.sizes().activeRequests).toBe(2);
  });

  it("entries apply in order, a resent one changes nothing, and no more than a call's bound are read", () => {
    const core = fullAfterOne();
    const first = routed(core.admit(request(1), ticket()));
    core.applyReceipts([{ kind: "prefill_done", receiptId: first.receiptId, ageMs: 0 }, settlement(first)]);
    core.applyReceipts([settlement(first)]);
    expect(core.stats().counters.settled).toBe(1);
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("a settlement sent again (its first answer lost) is not counted twice in the drain rate a refusal's Retry-After comes from", async () => {
    const core = new RoutingCore({ blockSize: BS, random: () => 0, now: () => 1_000_000, timers: NEVER, admission: AdmissionConfigSchema.parse({ maxQueue: 0 }) });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: 40 }, "a");
    const first = routed(core.admit(request(1), ticket()));
    core.applyReceipts([settlement(first)]);
    routed(core.admit(request(2), ticket()));
    core.applyReceipts([settlement(first)]);
    // One request drained over the 10 s window: 0.1 per second, so one ahead of a refused request is 10 s.
    expect(await core.admit(request(3), ticket())).toEqual({ kind: "refused", reason: "queue_full", retryAfterSeconds: 10 });
  });

  it("a call's receipts beyond MAX_RECEIPTS_PER_CALL are not read, and are counted as rejected", () => {
    const core = new RoutingCore({ blockSize: BS, random: () => 0 });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    const decisions = Array.from({ length: MAX_RECEIPTS_PER_CALL + 1 }, (_, k) => core.route(request(k))!);
    core.applyReceipts(decisions.map(settlement));
    expect(core.stats().counters).toMatchObject({ settled: MAX_RECEIPTS_PER_CALL, receiptsRejected: 1 });
    expect(core.sizes().activeRequests).toBe(1);
  });
});

describe("settlements a route or admit call carried (a sharded pool's object sends their releases to the other shards at once)", () => {
  it("counts only those the core applied: a malformed settlement, one past the call's bound, a mark or a receipts call's count none", () => {
    const core = new RoutingCore({ blockSize: BS, random: () => 0, timers: NEVER, admission: AdmissionConfigSchema.parse({}) });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    const d = Array.from({ length: MAX_RECEIPTS_PER_CALL + 4 }, (_, k) => core.route(request(k))!);
    const malformed = [
      { kind: "settle", receiptId: d[0]!.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "done" },
      { kind: "settle", receiptId: d[0]!.receiptId, promptTokens: -1, cachedTokens: 0, outcome: "ok" },
      { kind: "settle" },
      { kind: "prefill_done", receiptId: d[0]!.receiptId, ageMs: 0 },
    ] as unknown as ReceiptEntry[];
    core.route({ ...request(100), receipts: malformed });
    expect(core.takeCarriedSettlements()).toBe(0);
    // The settlement after MAX_RECEIPTS_PER_CALL marks is not read: its load stays.
    const marks = d.slice(0, MAX_RECEIPTS_PER_CALL).map((x): ReceiptEntry => ({ kind: "prefill_done", receiptId: x.receiptId, ageMs: 0 }));
    const active = core.sizes().activeRequests;
    core.route({ ...request(101), receipts: [...marks, settlement(d[MAX_RECEIPTS_PER_CALL]!)] });
    expect(core.sizes().activeRequests).toBe(active + 1);
    expect(core.takeCarriedSettlements()).toBe(0);
    // A receipts call's settlements are its own call's to send (it awaits them).
    core.applyReceipts([settlement(d[0]!)]);
    expect(core.takeCarriedSettlements()).toBe(0);
    // Applied settlements carried by a route and by an admit: counted until taken.
    core.route({ ...request(102), receipts: [settlement(d[1]!), settlement(d[2]!)] });
    void core.admit({ ...request(103), receipts: [{ kind: "prefill_done", receiptId: d[3]!.receiptId, ageMs: 0 }, settlement(d[3]!)] }, ticket());
    expect(core.takeCarriedSettlements()).toBe(3);
    expect(core.takeCarriedSettlements()).toBe(0);
  });

  it("counts only settlements that freed load: the same one carried again, or an unknown receipt id, counts none", () => {
    const core = new RoutingCore({ blockSize: BS, random: () => 0, timers: NEVER, admission: AdmissionConfigSchema.parse({}) });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    const d = core.route(request(1))!;
    core.route({ ...request(2), receipts: [settlement(d)] });
    expect(core.takeCarriedSettlements()).toBe(1);
    // Resent (its first answer lost): it frees nothing this time.
    core.route({ ...request(3), receipts: [settlement(d)] });
    expect(core.takeCarriedSettlements()).toBe(0);
    void core.admit({ ...request(4), receipts: [{ ...settlement(d), receiptId: "r-unknown" }] }, ticket());
    expect(core.takeCarriedSettlements()).toBe(0);
    expect(core.stats().counters.settled).toBe(1);
  });
});

describe("receipts read off the wire", () => {
  it("skips and counts each entry that does not match its schema; the valid ones in the same call apply", () => {
    const core = fullAfterOne();
    const first = routed(core.admit(request(1), ticket()));
    const prefill = () => core.workers().find((w) => w.workerId === "a")!.activePrefillTokens;
    expect(prefill()).toBe(40);
    const id = first.receiptId;
    core.applyReceipts([
      { kind: "prefill", receiptId: id, ageMs: 0 }, // no such kind
      { kind: "prefill_done", receiptId: id, ageMs: Number.NaN },
      { kind: "prefill_done", receiptId: id, ageMs: -1 },
      { kind: "prefill_done", receiptId: 7, ageMs: 0 },
      { kind: "settle", receiptId: "r".repeat(MAX_RECEIPT_ID_LENGTH + 1), promptTokens: 40, cachedTokens: 0, outcome: "ok" },
      { kind: "settle", receiptId: id, promptTokens: 40, cachedTokens: 0, outcome: "done" },
      { kind: "settle", receiptId: id, promptTokens: Number.POSITIVE_INFINITY, cachedTokens: 0, outcome: "ok" },
      null,
    ]);
    // Nothing applied: the prefill still counts, the load is still held.
    expect(prefill()).toBe(40);
    expect(core.sizes().activeRequests).toBe(1);
    expect(core.stats().counters.receiptsRejected).toBe(8);
    core.applyReceipts([{ kind: "bogus" }, settlement(first)]);
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.stats().counters).toMatchObject({ receiptsRejected: 9, settled: 1 });
  });
});

describe("a prefill-done mark's age", () => {
  it("dates the first output back by the time the mark waited at the edge (load-back measured from it)", () => {
    const B = 16;
    const tokens = Array.from({ length: 64 * B }, (_, i) => (i * 7919) % 50_000);
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: B, random: () => 0.5, now: () => now, cost: "ttft" });
    core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "a");
    const rows = localBlockHashes(tokens, B).map((l, i) => ({ h: String(100 + i), p: i === 0 ? null : String(99 + i), l: localHashToHex(l), tier: "CPU_PINNED" as const }));
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: rows });
    const d = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length })!;
    expect(d.hostBlocks).toBe(64);
    now += 30; // the first output, 30 ms after the route
    now += 4; // the mark waited 4 ms in the edge's queue
    core.applyReceipts([
      { kind: "prefill_done", receiptId: d.receiptId, ageMs: 4 },
      { kind: "settle", receiptId: d.receiptId, promptTokens: tokens.length, cachedTokens: tokens.length, outcome: "ok" },
    ]);
    expect(core.stats().recentReceipts.at(-1)!.measuredTtftMs).toBe(30);
  });
});
