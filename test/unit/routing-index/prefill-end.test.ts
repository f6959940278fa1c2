// A routed request's prefill ends when its worker stores the block its chain ends in (the worker's
// own KV events), streamed or not: RadixIndex.holdsChainEnd, PrefillWatch and RoutingCore together.
import { beforeAll, describe, expect, it } from "vitest";
import { chainEndOf, RadixIndex } from "../../../src/block-index/radix-index.ts";
import { ShardedIndex } from "../../../src/block-index/sharded-index.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { MAX_WATCHED_PER_SLOT, PrefillWatch, WATCH_DEADLINE_FACTOR, WATCH_DEADLINE_SLACK_MS, watchDeadline } from "../../../src/routing-index/prefill-watch.ts";
import { localHashToHex, type RelayHello } from "../../../src/relay-wire/relay-protocol.ts";
import { RoutingCore, type RoutingCoreOptions } from "../../../src/routing-index/routing-core.ts";
import { DEFAULT_TTFT_PARAMS } from "../../../src/selection/ttft-cost.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const B = 4;
const tokens = (n: number, seed = 1) => Array.from({ length: n }, (_, i) => seed * 100_000 + i);

/** Wire blocks of a chain below the root, engine hashes from `base`. */
function wire(locals: bigint[], base: number) {
  return locals.map((l, i) => ({ h: String(base + i), l: localHashToHex(l) }));
}

describe("RadixIndex.holdsChainEnd", () => {
  it("is true exactly for a worker holding the chain's whole path, and follows removals", () => {
    const locals = localBlockHashes(tokens(40), B); // 10 blocks
    for (const index of [new RadixIndex(), new ShardedIndex(4)]) {
      index.ensureWorker(0);
      index.ensureWorker(1);
      index.ensureWorker(40); // a second mask word
      const end = chainEndOf(locals, 10);
      expect(index.holdsChainEnd(0, end)).toBe(false);
      index.applyStoredWire(0, null, wire(locals.slice(0, 9), 100));
      expect(index.holdsChainEnd(0, end)).toBe(false); // one block short
      expect(index.holdsChainEnd(0, chainEndOf(locals, 9))).toBe(true);
      index.applyStoredWire(0, "108", wire(locals.slice(9), 109));
      expect(index.holdsChainEnd(0, end)).toBe(true);
      expect(index.holdsChainEnd(1, end)).toBe(false); // another worker
      expect(index.holdsChainEnd(40, end)).toBe(false);
      index.applyStoredWire(40, null, wire(locals, 500));
      expect(index.holdsChainEnd(40, end)).toBe(true);
      expect(index.holdsChainEnd(99, end)).toBe(false); // a slot the index has never seen
      // The same last block below another path is another chain.
      const other = localBlockHashes([...tokens(36, 2), ...tokens(40).slice(36)], B);
      expect(other[9]).toBe(locals[9]);
      expect(index.holdsChainEnd(0, chainEndOf(other, 10))).toBe(false);
      index.applyRemoved(0, ["109"]);
      expect(index.holdsChainEnd(0, end)).toBe(false);
    }
  });

  it("chainEndOf reads a BigUint64Array (the route RPC's form) as it reads a bigint array", () => {
    const locals = localBlockHashes(tokens(64), B);
    const typed = BigUint64Array.from(locals);
    for (const n of [1, 7, 16]) expect(chainEndOf(typed, n)).toEqual(chainEndOf(locals, n));
    expect(chainEndOf(typed.subarray(3), 5)).toEqual(chainEndOf(locals.slice(3), 5));
  });

  it("chainEndOf refuses a length the hashes do not have", () => {
    expect(() => chainEndOf([1n, 2n], 3)).toThrow(RangeError);
    expect(() => chainEndOf([1n, 2n], 0)).toThrow(RangeError);
  });
});

describe("PrefillWatch", () => {
  const end = (k: number) => ({ key: k, lo: k, hi: 0, root: BigInt(k) });

  it("hands back the receipts whose chain end is held, drops settled ones, and stays bounded", () => {
    const w = new PrefillWatch(3);
    expect([1, 2, 3, 4].map((k) => w.watch(0, `r${k}`, end(k), Infinity))).toEqual([[], [], [], ["r1"]]); // r1, the oldest, given up on
    expect(w.watched(0)).toBe(3);
    const pending = new Set(["r2", "r3", "r4"]);
    expect(w.finished(0, (e) => e.key === 3, (id) => pending.has(id))).toEqual(["r3"]);
    pending.delete("r2"); // settled meanwhile
    expect(w.finished(0, () => false, (id) => pending.has(id))).toEqual([]);
    expect(w.watched(0)).toBe(1);
    w.clear(0);
    expect(w.watched(0)).toBe(0);
    expect(w.finished(5, () => true, () => true)).toEqual([]);
  });

  it("gives up on receipts past their deadline on every slot, and on a released slot's", () => {
    const w = new PrefillWatch();
    w.watch(0, "a", end(1), 100);
    w.watch(0, "b", end(2), 300);
    w.watch(7, "c", end(3), 200);
    w.watch(7, "d", end(4), 400);
    expect(w.overdue(99)).toEqual([]);
    expect(w.overdue(200)).toEqual(["a", "c"]);
    expect(w.overdue(250)).toEqual([]);
    expect(w.release(7)).toEqual(["d"]);
    expect(w.release(7)).toEqual([]);
    expect(w.overdue(1_000)).toEqual(["b"]);
    expect([w.watched(0), w.watched(7)]).toEqual([0, 0]);
  });

  it("a deadline is route time + 4 × the expected queue and prefill time at the worker's rate + 10 s", () => {
    expect(watchDeadline(1_000, 30_000, 10_000, 20_000)).toBe(1_000 + WATCH_DEADLINE_FACTOR * 2_000 + WATCH_DEADLINE_SLACK_MS);
    expect(watchDeadline(0, 0, 64, 10_000)).toBeCloseTo(4 * 6.4 + 10_000, 9);
  });
});

describe("RoutingCore: prefill end from the worker's stored blocks", () => {
  function pool(replicateLoad = false) {
    const core = new RoutingCore({ blockSize: B, random: () => 0, replicateLoad });
    for (const id of ["a", "b"]) {
      core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
      core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
    }
    return core;
  }
  let seq = 1;
  const loadOn = (core: RoutingCore, workerId: string) => core.workers().find((w) => w.workerId === workerId)!;
  const stored = (core: RoutingCore, id: string, parent: string | null, blocks: ReturnType<typeof wire>) =>
    core.applyEvents(id, { type: "events", epoch: 1, seq: seq++, events: [{ t: "stored", parent, blocks }] });

  it("an unstreamed request's prefill stops counting once its worker stores its last full block", () => {
    const core = pool(true);
    const prompt = tokens(42); // 10 full blocks + 2 tokens
    const locals = localBlockHashes(prompt, B);
    const d = core.route({ localHashes: locals, isl: prompt.length })!;
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(42);
    core.takeLoadOps();
    // The first chunk's blocks: not over yet.
    expect(stored(core, d.workerId, null, wire(locals.slice(0, 6), 100)).ok).toBe(true);
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(42);
    // Another worker storing the whole chain says nothing about this one.
    stored(core, d.workerId === "a" ? "b" : "a", null, wire(locals, 900));
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(42);
    stored(core, d.workerId, "105", wire(locals.slice(6), 106));
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(0);
    expect(loadOn(core, d.workerId).activeRequests).toBe(1); // still decoding: only its prefill ended
    // The other shards hear of it as they would from the edge.
    expect(core.takeLoadOps()).toMatchObject([{ op: "done", id: d.receiptId }]);
    core.settle({ receiptId: d.receiptId, promptTokens: 42, cachedTokens: 0, outcome: "ok" });
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(0);
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("a chain routed on a prefix of the prompt (text before unhashed media) is not ended by its prefix", () => {
    const core = pool();
    const prompt = tokens(80);
    const prefix = localBlockHashes(prompt.slice(0, 16), B); // 4 of the prompt's 20 full blocks
    const d = core.route({ localHashes: prefix, isl: prompt.length })!;
    stored(core, d.workerId, null, wire(prefix, 100));
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(80);
    core.markPrefillDone(d.receiptId); // the edge's signal for a stream still ends it
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(0);
  });

  it("a fallback route (text before media) is not watched even when its isl counts only the hashed text", () => {
    // The edge's text-prefix plan hashes the text before the first image and counts that text's
    // tokens: hashes and isl agree, but the image after them is still to be prefilled.
    const core = pool();
    const text = tokens(40);
    const locals = localBlockHashes(text, B);
    const d = core.route({ localHashes: locals, isl: text.length, fallbackReason: "media_unprobeable" })!;
    stored(core, d.workerId, null, wire(locals, 100));
    expect(loadOn(core, d.workerId).activePrefillTokens).toBe(40);
  });

  it("a worker that goes down takes its watched requests with it", () => {
    const core = pool();
    const locals = localBlockHashes(tokens(40), B);
    const d = core.route({ localHashes: locals, isl: 40 })!;
    core.setStatus(d.workerId, "down");
    expect(core.sizes().activeRequests).toBe(0);
    core.setStatus(d.workerId, "up");
    expect(stored(core, d.workerId, null, wire(locals, 100)).ok).toBe(false); // unsynced after down: nothing to end either
    expect(core.sizes().activeRequests).toBe(0);
  });
});

describe("RoutingCore: a watched prefill whose end the index cannot see stops counting", () => {
  let t = 1_000;
  let seq = 1;
  function pool(ids: string[] = ["a"], opts: Partial<RoutingCoreOptions> = {}) {
    t = 1_000;
    const core = new RoutingCore({ blockSize: B, random: () => 0, replicateLoad: true, now: () => t, ...opts });
    for (const id of ids) join(core, id);
    return core;
  }
  function join(core: RoutingCore, id: string, blocks: ReturnType<typeof dumpRows> = [], extra: Partial<RelayHello> = {}) {
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...extra }, id);
    core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks });
  }
  /** Dump rows of a chain (parents first), engine hashes from `base`. */
  const dumpRows = (locals: bigint[], base: number) => locals.map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
  const row = (core: RoutingCore, id: string) => core.workers().find((w) => w.workerId === id)!;
  const stored = (core: RoutingCore, id: string, blocks: ReturnType<typeof wire>) => core.applyEvents(id, { type: "events", epoch: 1, seq: seq++, events: [{ t: "stored", parent: null, blocks }] });
  /** A fresh 40-token prompt (10 full blocks) routed to `id`, watched by the index. */
  function routeWatched(core: RoutingCore, id: string, seed: number) {
    const locals = localBlockHashes(tokens(40, seed), B);
    const d = core.route({ localHashes: locals, isl: 40, onlyWorkers: [id] })!;
    expect(d).toMatchObject({ workerId: id, overlapBlocks: 0 });
    expect(row(core, id).activePrefillTokens).toBe(40);
    core.takeLoadOps();
    return { d, locals };
  }
  /** The prefill ended, on this shard and (replicated) on the others; the request still decodes. */
  function expectEnded(core: RoutingCore, id: string, receiptId: string) {
    expect(row(core, id)).toMatchObject({ activePrefillTokens: 0, activeRequests: 1 });
    expect(core.takeLoadOps()).toMatchObject([{ op: "done", id: receiptId }]);
  }

  it("its relay disconnects, the worker's view exact and empty or holding blocks", () => {
    const core = pool(["a", "b"]);
    stored(core, "b", wire(localBlockHashes(tokens(8, 9), B), 500));
    const onA = routeWatched(core, "a", 2);
    core.relayGone("a");
    expect(core.isApproximate("a")).toBe(false); // nothing to route on: not approximate, yet nothing it stores is seen
    expectEnded(core, "a", onA.d.receiptId);
    const onB = routeWatched(core, "b", 3);
    core.relayGone("b");
    expect(core.isApproximate("b")).toBe(true);
    expectEnded(core, "b", onB.d.receiptId);
  });

  it("its relay goes silent, also on a worker already approximate for another reason", () => {
    const core = pool(["a", "b"], { relaySilentMs: 1_000 });
    const onA = routeWatched(core, "a", 2);
    // b's relay lost history: approximate, yet its events flow and the watch follows them.
    core.applyDump("b", { type: "dump", epoch: 1, seq: 1, blocks: [], approximate: true });
    const onB = routeWatched(core, "b", 3);
    t += 1_500;
    core.touch("b");
    row(core, "a"); // a read of the views checks for silence
    expect(core.isApproximate("a")).toBe(true);
    expectEnded(core, "a", onA.d.receiptId);
    expect(row(core, "b").activePrefillTokens).toBe(40);
    t += 1_500;
    row(core, "b");
    expectEnded(core, "b", onB.d.receiptId);
  });

  it("the block budget refuses the worker's stored chain", () => {
    const core = pool(["a"], { blockBudget: 4 });
    const { d, locals } = routeWatched(core, "a", 2);
    stored(core, "a", wire(locals, 100)); // 10 blocks, room for 4: refused whole
    expect(core.isApproximate("a")).toBe(true);
    expectEnded(core, "a", d.receiptId);
  });

  it("the worker's view is shed for a newcomer's share", () => {
    const core = pool(["big"], { blockBudget: 200 });
    stored(core, "big", wire(localBlockHashes(tokens(800, 7), B), 1_000)); // the whole budget
    const { d } = routeWatched(core, "big", 2);
    join(core, "small", dumpRows(localBlockHashes(tokens(40, 8), B), 5_000)); // under its guarantee, no room left
    expect(core.isApproximate("big")).toBe(true);
    expect(row(core, "big").blocks).toBe(0);
    expectEnded(core, "big", d.receiptId);
  });

  it("its chain end never matches (the worker's blocks are not the edge's hashes): ended at its deadline", () => {
    const core = pool(["a"]);
    const { d, locals } = routeWatched(core, "a", 2);
    const deadline = watchDeadline(1_000, 0, 40, DEFAULT_TTFT_PARAMS.defaultPrefillTokensPerSec);
    stored(core, "a", wire(localBlockHashes(tokens(40, 3), B), 100)); // another template's blocks for the same prompt
    t = deadline - 1;
    expect(row(core, "a").activePrefillTokens).toBe(40);
    t = deadline;
    expectEnded(core, "a", d.receiptId);
    stored(core, "a", wire(locals, 200)); // its real end, late: nothing twice
    expect(row(core, "a").activePrefillTokens).toBe(0);
  });

  it("beyond the watch's bound per worker, the oldest", () => {
    const core = pool(["a"]);
    const first = routeWatched(core, "a", 1);
    for (let k = 1; k < MAX_WATCHED_PER_SLOT; k++) core.route({ localHashes: localBlockHashes(tokens(40, 10 + k), B), isl: 40 });
    expect(row(core, "a").activePrefillTokens).toBe(40 * MAX_WATCHED_PER_SLOT);
    core.takeLoadOps();
    core.route({ localHashes: localBlockHashes(tokens(40, 5), B), isl: 40 }); // one more: the first is given up on
    expect(row(core, "a").activePrefillTokens).toBe(40 * MAX_WATCHED_PER_SLOT);
    expect(core.takeLoadOps()).toMatchObject([{ op: "add" }, { op: "done", id: first.d.receiptId }]);
  });

});
