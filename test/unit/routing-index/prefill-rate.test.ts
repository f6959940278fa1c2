// RoutingCore learns a worker's prefill rate from route → prefill-done on a worker with nothing
// queued (prefill-rates.ts), prices and drains it at that rate while the hello reports none, and
// forgets it with the worker's life.
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { DEFAULT_PREFILL_RATE_LEARNING } from "../../../src/load/prefill-rate-learner.ts";
import { RoutingCore, type RoutingCoreOptions } from "../../../src/routing-index/routing-core.ts";
import { DEFAULT_TTFT_PARAMS } from "../../../src/selection/ttft-cost.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const B = 16;
const N = DEFAULT_PREFILL_RATE_LEARNING.minSamples;

function pool(opts: Partial<RoutingCoreOptions> = {}, helloRate?: number) {
  const clock = { t: 0 };
  const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => clock.t, learnPrefillRate: true, ...opts });
  const hello = (id: string, epoch = 1) =>
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch, modelName: "m", contract: null, kvEvents: false, ...(helloRate ? { prefillTokensPerSec: helloRate } : {}) }, id);
  hello("w1");
  hello("w2");
  let seq = 0;
  /** Routes an uncached prompt of `tokens` to w1; its receipt. */
  const route = (tokens: number) => {
    const ids = Array.from({ length: tokens }, (_, i) => ++seq * 1_000_000 + i);
    return core.route({ localHashes: localBlockHashes(ids, B), isl: tokens, onlyWorkers: ["w1"] })!.receiptId;
  };
  /** One prefill on an idle w1: `tokens` in `ms`, then its first output marks it done. */
  const prefill = (tokens: number, ms: number, ageMs = 0) => {
    const r = route(tokens);
    clock.t += ms + ageMs;
    core.markPrefillDone(r, ageMs);
    core.settle({ receiptId: r, promptTokens: tokens, cachedTokens: 0, outcome: "ok" });
    clock.t += 10;
  };
  const learned = (id = "w1") => core.workers().find((w) => w.workerId === id)!.learnedPrefillTokensPerSec;
  return { core, clock, hello, route, prefill, learned };
}

describe("RoutingCore: a worker's learned prefill rate", () => {
  it("is learned from prefill-done marks on an idle worker, from minSamples on, the edge's queue wait taken off", () => {
    const p = pool();
    for (let i = 0; i < N - 1; i++) p.prefill(8_000, 400, 5); // 20k tok/s, each mark 5 ms in the edge's queue
    expect(p.learned()).toBeNull();
    p.prefill(8_000, 400);
    expect(p.learned()).toBe(20_000);
    expect(p.learned("w2")).toBeNull();
  });

  it("prices and drains the worker's queue at the learned rate", () => {
    const p = pool();
    for (let i = 0; i < N; i++) p.prefill(8_000, 400);
    p.route(10_000); // not marked: counted, and drained at 20k tok/s (not the default 10k)
    p.clock.t += 250;
    const probe = localBlockHashes([7, 7, 7], B);
    const w1 = p.core.peek({ localHashes: probe, isl: 3 }).candidates.find((c) => c.workerId === "w1")!;
    expect(w1.activePrefillTokens).toBe(10_000 - 20_000 * 0.25);
    expect(DEFAULT_TTFT_PARAMS.defaultPrefillTokensPerSec).toBe(10_000);
  });

  it("takes no sample from a request routed behind the worker's counted prefill", () => {
    const p = pool();
    for (let i = 0; i < N; i++) {
      const first = p.route(8_000); // never marked: every later request waits behind it
      const r = p.route(8_000);
      p.clock.t += 400;
      p.core.markPrefillDone(r);
      p.core.settle({ receiptId: r, promptTokens: 8_000, cachedTokens: 0, outcome: "ok" });
      p.core.settle({ receiptId: first, promptTokens: 8_000, cachedTokens: 0, outcome: "ok" });
    }
    // Only the first route of each pair saw an empty queue, and it was never marked.
    expect(p.learned()).toBeNull();
    // A request too short to measure the rate is no sample either.
    for (let i = 0; i < N; i++) p.prefill(DEFAULT_PREFILL_RATE_LEARNING.minTokens - 1, 10);
    expect(p.learned()).toBeNull();
  });

  it("starts over with a new epoch, and when the worker goes down; a mark from the old life is no sample", () => {
    const p = pool();
    for (let i = 0; i < N; i++) p.prefill(8_000, 400);
    expect(p.learned()).toBe(20_000);
    const old = p.route(8_000);
    p.hello("w1", 2);
    expect(p.learned()).toBeNull();
    p.clock.t += 400;
    p.core.markPrefillDone(old); // routed to epoch 1: no sample of epoch 2
    p.core.settle({ receiptId: old, promptTokens: 8_000, cachedTokens: 0, outcome: "ok" });
    for (let i = 0; i < N - 1; i++) p.prefill(8_000, 800);
    expect(p.learned()).toBeNull();
    p.prefill(8_000, 800);
    expect(p.learned()).toBe(10_000);
    p.core.setStatus("w1", "down");
    expect(p.learned()).toBeNull();
  });

  it("the hello's rate wins over the learned one; learning off (RoutingCore's default) keeps the default rate", () => {
    const p = pool({}, 5_000);
    for (let i = 0; i < N; i++) p.prefill(8_000, 400);
    expect(p.learned()).toBe(20_000); // shown to operators beside the hello's
    p.route(10_000);
    p.clock.t += 1_000;
    const probe = localBlockHashes([7, 7, 7], B);
    expect(p.core.peek({ localHashes: probe, isl: 3 }).candidates.find((c) => c.workerId === "w1")!.activePrefillTokens).toBe(5_000);

    const off = pool({ learnPrefillRate: undefined });
    for (let i = 0; i < N; i++) off.prefill(8_000, 400);
    expect(off.learned()).toBeNull();
    off.route(10_000);
    off.clock.t += 500;
    expect(off.core.peek({ localHashes: probe, isl: 3 }).candidates.find((c) => c.workerId === "w1")!.activePrefillTokens).toBe(5_000);
  });
});
