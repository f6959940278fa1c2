/**
 * Duplication cost (src/selection/duplicate-cost.ts): on a worker whose cache is full (it has
 * evicted), prefilling tokens another worker holds costs their prefill again. Through a real
 * RoutingCore: a question on a document stays with the document's holder while the holder's queue
 * costs less than twice the document's prefill, once the other worker's cache is full; while that
 * cache has room, or with weight 0, the plain TTFT estimate moves it.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex, type RelayEvent } from "../../../src/relay-wire/relay-protocol.ts";
import { DEFAULT_DUPLICATE_COST, displacedMs, duplicateCostMs, duplicateTokens, type DuplicateCostParams } from "../../../src/selection/duplicate-cost.ts";
import { DEFAULT_TIER_COST } from "../../../src/selection/tier-cost.ts";
import type { Candidate } from "../../../src/selection/selection.ts";
import { WorkerBlockSet } from "../../../services/relay/worker-block-set.ts";

beforeAll(() => initHashing());

const B = 16;
const text = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
/** 500 blocks: 800 ms of prefill at the default 10 000 tokens/s. */
const DOC = text(1, 500 * B);

const candidate = (slot: number, overlapBlocks: number, extra: Partial<Candidate> = {}): Candidate => ({ slot, overlapBlocks, activePrefillTokens: 0, activeDecodeBlocks: 0, ...extra });

/** Chain rows for `tokens`' blocks, hashes numbered from `first`. */
function rows(tokens: number[], first: number) {
  return localBlockHashes(tokens, B).map((l, i) => ({ h: String(first + i), p: i === 0 ? null : String(first + i - 1), l: localHashToHex(l) }));
}

/**
 * Workers a (holding DOC, with 1 200 ms of prefill queued) and b (holding one unrelated block,
 * evicted when `bFull`), as their relays report them.
 */
function pool(opts: { bFull: boolean; duplicateCost?: DuplicateCostParams }) {
  const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => 0, ...(opts.duplicateCost ? { duplicateCost: opts.duplicateCost } : {}) });
  for (const id of ["a", "b"]) core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
  core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: rows(DOC, 1000) });
  core.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: rows(text(90_000, 2 * B), 5000) });
  if (opts.bFull) expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 1, events: [{ t: "removed", hashes: ["5001"] }] }).ok).toBe(true);
  const busy = text(200_000, 12_000);
  expect(core.route({ localHashes: localBlockHashes(busy, B), isl: busy.length, onlyWorkers: ["a"] })!.workerId).toBe("a");
  return core;
}

const question = [...DOC, ...text(60_000, 40)];
const pick = (core: RoutingCore) => core.peek({ localHashes: localBlockHashes(question, B), isl: question.length });

describe("duplicateTokens", () => {
  it("counts, on a full cache, the tokens the best other holder has and it lacks, at most the prompt", () => {
    const c = [candidate(0, 10, { cacheFull: true }), candidate(1, 4, { cacheFull: true }), candidate(2, 0, { cacheFull: true })];
    expect(duplicateTokens(c, 400, B)).toEqual([0, 6 * B, 10 * B]);
    // A prompt shorter than the holdings (its last block is partial) counts up to its length.
    expect(duplicateTokens(c, 100, B)).toEqual([0, 100 - 4 * B, 100]);
    // Two equal best holders copy nothing from each other.
    expect(duplicateTokens([candidate(0, 10, { cacheFull: true }), candidate(1, 10, { cacheFull: true })], 400, B)).toEqual([0, 0]);
    // Host-memory blocks are held too.
    expect(duplicateTokens([candidate(0, 2, { hostBlocks: 8, cacheFull: true }), candidate(1, 10, { cacheFull: true })], 400, B)).toEqual([0, 0]);
  });

  it("is 0 on a cache with room: the copy displaces nothing", () => {
    expect(duplicateTokens([candidate(0, 10), candidate(1, 0, { cacheFull: false })], 400, B)).toEqual([0, 0]);
  });

  it("prices the copy as the displaced tokens' prefill time × weight", () => {
    expect(duplicateCostMs(DEFAULT_DUPLICATE_COST, displacedMs(8_000, 10_000, null), 0)).toBe(800);
    expect(duplicateCostMs({ weight: 0.5, targetMs: 10_000 }, displacedMs(8_000, 10_000, null), 0)).toBe(400);
    expect(duplicateCostMs({ weight: 0, targetMs: 10_000 }, displacedMs(8_000, 10_000, null), 0)).toBe(0);
  });

  it("prices tokens a GPU eviction only demotes to host memory at their load-back", () => {
    // 8 000 tokens × 147 456 bytes at 37 GB/s: 31.9 ms, not 800 ms of prefill.
    expect(displacedMs(8_000, 10_000, DEFAULT_TIER_COST)).toBeCloseTo((8_000 * 147_456) / 37e6, 9);
    expect(displacedMs(8_000, 10_000, { ...DEFAULT_TIER_COST, hostLoadGBps: 1 })).toBeCloseTo(1_179.648, 6);
    expect(displacedMs(0, 10_000, DEFAULT_TIER_COST)).toBe(0);
  });

  it("never lifts the worker's estimate past the TTFT target", () => {
    // 120k tokens at 10k tokens/s: a 12 s copy; the term fills only what is left below the target.
    expect(duplicateCostMs(DEFAULT_DUPLICATE_COST, 12_000, 25_000)).toBe(DEFAULT_DUPLICATE_COST.targetMs - 25_000);
    expect(duplicateCostMs({ weight: 1, targetMs: 10_000 }, 800, 9_500)).toBe(500);
    expect(duplicateCostMs({ weight: 1, targetMs: 10_000 }, 12_000, 12_000)).toBe(0);
  });
});

describe("RoutingCore with the duplication cost", () => {
  it("keeps the question on the document's holder once the other worker's cache is full", () => {
    const p = pick(pool({ bFull: true }));
    expect(p.workerId).toBe("a");
    const [a, b] = p.candidates;
    // b: 0 queued + 804 ms of prefill + 800 ms for the copy; a: 1 200 ms queued + 4 ms.
    expect(b!.cost - a!.cost).toBeGreaterThan(350);
  });

  it("moves it by the TTFT estimate alone while that cache has room, or with weight 0", () => {
    expect(pick(pool({ bFull: false })).workerId).toBe("b");
    expect(pick(pool({ bFull: true, duplicateCost: { weight: 0, targetMs: 30_000 } })).workerId).toBe("b");
  });

  it("lets the question move once waiting on the holder would pass the TTFT target", () => {
    // b's own estimate is ~805 ms: with a 1 s target the term lifts it to 1 000 ms, under a's ~1 204 ms.
    const p = pick(pool({ bFull: true, duplicateCost: { weight: 1, targetMs: 1_000 } }));
    expect(p.workerId).toBe("b");
    const b = p.candidates.find((c) => c.workerId === "b")!;
    expect(b.cost).toBeCloseTo(1_000, 6);
    expect(b.duplicateMs).toBeLessThan(200);
  });

  it("shows the flag in the worker rows and the flag and the term in the candidate view", () => {
    const core = pool({ bFull: true });
    expect(core.workers().map((w) => [w.workerId, w.cacheFull])).toEqual([["a", false], ["b", true]]);
    expect(core.metricsSnapshot().workers.map((w) => w.cacheFull)).toEqual([false, true]);
    const [a, b] = pick(core).candidates;
    expect(a!.cacheFull).toBeUndefined();
    expect(a!.duplicateMs).toBeUndefined();
    expect(b!.cacheFull).toBe(true);
    expect(b!.duplicateMs).toBeCloseTo(800, 0);
  });

  const fullOf = (core: RoutingCore, id: string) => pick(core).candidates.find((c) => c.workerId === id)?.cacheFull ?? false;

  it("a new worker life starts with room", () => {
    const core = pool({ bFull: true });
    expect(core.hello({ type: "hello", workerId: "b", url: "http://b", blockSize: B, epoch: 2, modelName: "m", contract: null, kvEvents: true }, "b").ok).toBe(true);
    expect(fullOf(core, "b")).toBe(false);
  });

  it("a worker marked down and up again starts with room", () => {
    const core = pool({ bFull: true });
    core.setStatus("b", "down");
    core.setStatus("b", "up");
    expect(fullOf(core, "b")).toBe(false);
  });

  it("a removed worker's slot, taken again, starts with room", () => {
    const core = pool({ bFull: true });
    core.removeWorker("b");
    expect(core.hello({ type: "hello", workerId: "c", url: "http://c", blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "c").ok).toBe(true);
    expect(core.worker("c")).toBeDefined();
    expect(fullOf(core, "c")).toBe(false);
  });

  it("a host-memory (HiCache) removal does not fill the cache: the GPU made no room", () => {
    const core = pool({ bFull: false });
    const host = rows(text(70_000, B), 7000);
    const stored = { t: "stored" as const, parent: null, blocks: host.map(({ h, l }) => ({ h, l })), tier: "CPU_PINNED" as const };
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 1, events: [stored, { t: "removed", hashes: ["7000"], tier: "CPU_PINNED" }] }).ok).toBe(true);
    expect(fullOf(core, "b")).toBe(false);
  });

  it("a removal the engine never made (the relay's re-parenting, a shard move) does not fill the cache", () => {
    const core = pool({ bFull: false });
    // The relay's own block set: block 2 stored under 1, then the engine stores it under 3.
    const relay = new WorkerBlockSet(B);
    const first = relay.apply([{ type: "BlockStored", blockHashes: [1n, 2n], parentBlockHash: null, tokenIds: text(300_000, 2 * B), blockSize: B, medium: "GPU" }]);
    const moved = relay.apply([{ type: "BlockStored", blockHashes: [3n, 2n], parentBlockHash: null, tokenIds: text(310_000, 2 * B), blockSize: B, medium: "GPU" }]);
    expect(moved.events.some((e) => e.t === "removed")).toBe(true);
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 1, events: [...first.events, ...moved.events] }).ok).toBe(true);
    expect(fullOf(core, "b")).toBe(false);
    // The engine's eviction does.
    const evicted = relay.apply([{ type: "BlockRemoved", blockHashes: [2n], medium: "GPU" }]);
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 2, events: evicted.events }).ok).toBe(true);
    expect(fullOf(core, "b")).toBe(true);
  });

  /** pool({ bFull: true }) with b a HiCache worker: its GPU blocks written through to host memory before its GPU eviction, then `hostEvicts` host blocks removed. */
  function hicachePool(hostEvicts: number) {
    const core = pool({ bFull: false });
    const gpu = rows(text(90_000, 2 * B), 5000);
    const spare = rows(text(95_000, 2 * B), 8000);
    const host = (r: typeof gpu): RelayEvent => ({ t: "stored", parent: null, blocks: r.map(({ h, l }) => ({ h, l })), tier: "CPU_PINNED" });
    const events: RelayEvent[] = [host(gpu), host(spare), { t: "removed", hashes: ["5001"] }];
    if (hostEvicts > 0) events.push({ t: "removed", hashes: spare.slice(2 - hostEvicts).map((r) => r.h), tier: "CPU_PINNED" });
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 1, events }).ok).toBe(true);
    return core;
  }

  it("on a HiCache worker whose host tier has room, prices the copy at the load-back of what it demotes", () => {
    const p = pick(hicachePool(0));
    const b = p.candidates.find((c) => c.workerId === "b")!;
    expect(b.cacheFull).toBe(true);
    // 8 000 displaced tokens demoted, not lost: ~31.9 ms at 37 GB/s, so b (~836 ms) beats a's queue (~1 204 ms).
    expect(b.duplicateMs).toBeCloseTo((8_000 * 147_456) / 37e6, 3);
    expect(p.workerId).toBe("b");
  });

  it("on a HiCache worker whose host tier evicts too, prices the copy at prefill again", () => {
    const p = pick(hicachePool(1));
    expect(p.candidates.find((c) => c.workerId === "b")!.duplicateMs).toBeCloseTo(800, 0);
    expect(p.workerId).toBe("a");
  });

  it("a host-tier move is no host eviction: the worker still demotes", () => {
    const core = hicachePool(0);
    const moved: RelayEvent = { t: "removed", hashes: ["8001"], tier: "CPU_PINNED", moved: true };
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 2, events: [moved] }).ok).toBe(true);
    expect(pick(core).candidates.find((c) => c.workerId === "b")!.duplicateMs).toBeCloseTo((8_000 * 147_456) / 37e6, 3);
  });

  it("a cleared HiCache worker demotes again once its host tier holds blocks", () => {
    const core = hicachePool(1);
    const gpu = rows(text(90_000, 2 * B), 5000);
    const stored = (tier?: "CPU_PINNED"): RelayEvent => ({ t: "stored", parent: null, blocks: gpu.map(({ h, l }) => ({ h, l })), ...(tier ? { tier } : {}) });
    const events: RelayEvent[] = [{ t: "cleared" }, stored(), stored("CPU_PINNED"), { t: "removed", hashes: ["5001"] }];
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 2, events }).ok).toBe(true);
    expect(pick(core).candidates.find((c) => c.workerId === "b")!.duplicateMs).toBeCloseTo((8_000 * 147_456) / 37e6, 3);
  });

  it("counts a cache full from its capacity when the index sees no removal (exact view or no KV events)", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0, now: () => 0 });
    // 40 blocks of capacity: full at 36 indexed blocks (0.9).
    const hello = (id: string, kvEvents: boolean) => core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents, kvCapacityTokens: 40 * B }, id);
    expect(hello("e", true).ok).toBe(true);
    expect(hello("n", false).ok).toBe(true);
    core.applyDump("e", { type: "dump", epoch: 1, seq: 0, blocks: rows(text(1, 35 * B), 1) });
    const peekAll = () => core.peek({ localHashes: localBlockHashes(text(1, 4 * B), B), isl: 4 * B }).candidates;
    expect(peekAll().map((c) => c.cacheFull ?? false)).toEqual([false, false]);
    core.applyEvents("e", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: "35", blocks: rows(text(1, 36 * B), 1).slice(35).map(({ h, l }) => ({ h, l })) }] });
    // The worker without KV events: what was routed to it, as its approximate view holds it.
    const routed = text(500_000, 36 * B);
    expect(core.route({ localHashes: localBlockHashes(routed, B), isl: routed.length, onlyWorkers: ["n"] })!.workerId).toBe("n");
    expect(peekAll().map((c) => c.cacheFull ?? false)).toEqual([true, true]);
  });

  it("a cleared cache has room again", () => {
    const core = pool({ bFull: true });
    expect(core.applyEvents("b", { type: "events", epoch: 1, seq: 2, events: [{ t: "cleared" }] }).ok).toBe(true);
    expect(pick(core).workerId).toBe("b");
  });
});
