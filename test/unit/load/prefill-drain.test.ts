// The queued-prefill estimate drains at the worker's prefill rate (SGLang prefills a long prompt
// chunk by chunk, so its queue shrinks before the prefill-done mark), never exceeds the counted
// tokens, and starts over with a worker's reset: LoadTracker.queuedPrefillTokens, and RoutingCore's
// choice through it.
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { LoadTracker, type ActiveRequest } from "../../../src/load/load-tracker.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const request = (receiptId: string, slot: number, prefillTokens: number, startedAt: number): ActiveRequest => ({
  receiptId,
  slot,
  prefillTokens,
  decodeBlocks: 1,
  startedAt,
  prefillDone: false,
});

describe("LoadTracker.queuedPrefillTokens", () => {
  it("drains at the slot's rate from the route, at most the counted tokens", () => {
    const load = new LoadTracker(300_000, (slot) => (slot === 0 ? 10_000 : 30_000));
    load.add(request("a", 0, 100_000, 0));
    load.add(request("b", 1, 100_000, 0));
    expect(load.queuedPrefillTokens(0, 0)).toBe(100_000);
    expect(load.queuedPrefillTokens(0, 2_000)).toBe(80_000);
    expect(load.queuedPrefillTokens(1, 2_000)).toBe(40_000); // a faster worker (a DP rank or another GPU) drains faster
    expect(load.queuedPrefillTokens(0, 12_000)).toBe(0);
    expect(load.prefillTokens(0)).toBe(100_000); // the count waits for the mark
    // A request routed later joins the drained backlog, not the count.
    load.add(request("c", 0, 10_000, 5_000));
    expect(load.queuedPrefillTokens(0, 5_000)).toBe(60_000);
    expect(load.queuedPrefillTokens(0, 6_000)).toBe(50_000);
    // A mark cuts the estimate to what is still counted.
    load.markPrefillDone("a");
    expect(load.queuedPrefillTokens(0, 6_000)).toBe(10_000);
    load.release("c");
    expect(load.queuedPrefillTokens(0, 6_000)).toBe(0);
  });

  it("a reset worker starts from its new requests; a clock that steps back drains nothing", () => {
    const load = new LoadTracker(300_000, () => 1_000);
    load.add(request("a", 0, 50_000, 10_000));
    expect(load.releaseWorker(0)).toBe(1);
    expect(load.queuedPrefillTokens(0, 10_000)).toBe(0);
    load.add(request("b", 0, 4_000, 10_000));
    expect(load.queuedPrefillTokens(0, 10_000)).toBe(4_000); // not 54 000: the lost backlog went with the reset
    expect(load.queuedPrefillTokens(0, 9_000)).toBe(4_000);
    load.add(request("c", 0, 1_000, 8_000)); // routed "before" the last change: no drain, no negative
    expect(load.queuedPrefillTokens(0, 8_000)).toBe(5_000);
    expect(load.queuedPrefillTokens(0, 11_000)).toBe(4_000);
  });

  it("without a rate the estimate is the counted tokens", () => {
    const load = new LoadTracker();
    load.add(request("a", 0, 7_000, 0));
    expect(load.queuedPrefillTokens(0, 1e9)).toBe(7_000);
  });

  it("is a fluid queue: between 0 and the count, equal to a replay of the drain while nothing is marked", () => {
    const op = fc.record({ dt: fc.integer({ min: 0, max: 3_000 }), tokens: fc.integer({ min: 0, max: 20_000 }), kind: fc.constantFrom("add", "add", "done", "release") });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const rate = 5_000;
        const load = new LoadTracker(1e12, () => rate);
        let now = 0;
        let fluid = 0; // backlog of a queue that drains at `rate`, unmarked requests only
        let marked = false;
        const live: string[] = [];
        ops.forEach((o, i) => {
          fluid = Math.max(0, fluid - (rate * o.dt) / 1000);
          now += o.dt;
          if (o.kind === "add") {
            load.add(request(`r${i}`, 0, o.tokens, now));
            live.push(`r${i}`);
            fluid += o.tokens;
          } else if (live.length > 0) {
            const id = live.shift()!;
            if (o.kind === "done") load.markPrefillDone(id);
            else load.release(id);
            marked = true;
          }
          const q = load.queuedPrefillTokens(0, now);
          expect(q).toBeGreaterThanOrEqual(0);
          expect(q).toBeLessThanOrEqual(load.prefillTokens(0));
          if (!marked) expect(q).toBeCloseTo(fluid, 6);
        });
      }),
    );
  });
});

describe("RoutingCore: a long prefill in progress", () => {
  const B = 4;
  const tokens = (n: number, seed: number) => Array.from({ length: n }, (_, i) => seed * 1_000_000 + i);

  it("stops counting in full once its chunks would be done: the holder of a prefix wins again", () => {
    let t = 0;
    const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => t });
    for (const id of ["w1", "w2"]) {
      core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true, prefillTokensPerSec: 1_000 }, id);
      core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
    }
    // w1 holds a 2 000-token document.
    const doc = localBlockHashes(tokens(2_000, 1), B);
    core.applyEvents("w1", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: null, blocks: doc.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) })) }] });
    // An 8 000-token prompt is routed to w1 and nothing marks its prefill done.
    const long = localBlockHashes(tokens(8_000, 2), B);
    expect(core.route({ localHashes: long, isl: 8_000, onlyWorkers: ["w1"] })!.workerId).toBe("w1");
    const question = localBlockHashes(tokens(2_000, 1).concat(tokens(40, 3)), B);
    const peek = () => core.peek({ localHashes: question, isl: 2_040 });
    const queued = () => peek().candidates.find((c) => c.workerId === "w1")!.activePrefillTokens;
    t = 1_000; // 7 s of w1's queue left: prefilling the document on w2 (2 s) is quicker
    expect(queued()).toBe(7_000);
    expect(peek().workerId).toBe("w2");
    t = 7_500; // 0.5 s left: the holder wins (counted in full, 8 s, it would not)
    expect(queued()).toBe(500);
    expect(peek().workerId).toBe("w1");
  });

  it("drainQueuedPrefill false (Dynamo's view): counted in full until its prefill-done mark", () => {
    let t = 0;
    const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => t, cost: "blocks", drainQueuedPrefill: false });
    core.hello({ type: "hello", workerId: "w1", url: "http://w1", blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true, prefillTokensPerSec: 1_000 }, "w1");
    core.applyDump("w1", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    const receipt = core.route({ localHashes: localBlockHashes(tokens(8_000, 2), B), isl: 8_000 })!.receiptId;
    const queued = () => core.peek({ localHashes: localBlockHashes(tokens(40, 3), B), isl: 40 }).candidates[0]!.activePrefillTokens;
    t = 7_500;
    expect(queued()).toBe(8_000);
    core.markPrefillDone(receipt);
    expect(queued()).toBe(0);
  });
});
