/**
 * HiCache tiers in the index: blocks a relay reports in a worker's host memory (tier CPU_PINNED)
 * are kept apart from its GPU blocks, count as cached (loaded back, not prefilled) and are priced by
 * their load-back in the TTFT cost; GPU eviction with a host copy keeps the prefix routable.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { DEFAULT_TIER_COST, hostLoadBackMs } from "../../../src/selection/tier-cost.ts";
import { estimateTtft } from "../../../src/selection/ttft-cost.ts";
import { renderMetrics } from "../../../src/metrics/pool-families.ts";

beforeAll(() => initHashing());

const B = 16;
const tokens = Array.from({ length: 64 * B }, (_, i) => (i * 7919) % 50_000);
const hashes = () => localBlockHashes(tokens, B);

/** A worker whose relay key grants the storage group `rack-1` (storage-views.ts), stating `hicacheStorage` as its backend. */
function hello(core: RoutingCore, id: string, hicacheStorage?: string) {
  return core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...(hicacheStorage ? { hicacheStorage } : {}) }, id, "rack-1");
}

function chainRows(n: number, base: number) {
  return hashes().slice(0, n).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

describe("host-memory tier in the index", () => {
  it("a GPU eviction with a host copy keeps the worker's credit: routed there, host blocks counted as cached", () => {
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: B, random: () => 0.5, now: () => now });
    hello(core, "a");
    hello(core, "b");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: chainRows(64, 100) });
    core.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    // Written through to host memory, then evicted from the GPU (the host copy stays).
    const host = chainRows(64, 100);
    expect(core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: null, blocks: host.map((r) => ({ h: r.h, l: r.l })), tier: "CPU_PINNED" }] })).toEqual({ ok: true });
    expect(core.applyEvents("a", { type: "events", epoch: 1, seq: 2, events: [{ t: "removed", hashes: host.slice(16).map((r) => r.h) }] })).toEqual({ ok: true });
    const p = core.peek({ localHashes: hashes(), isl: tokens.length });
    expect(p).toMatchObject({ workerId: "a", overlapBlocks: 64, hostBlocks: 48 });
    // Routed: the decision, its receipt and the per-tier metrics name the tiers.
    expect(core.route({ localHashes: hashes(), isl: tokens.length })).toMatchObject({ workerId: "a", overlapBlocks: 64, hostBlocks: 48 });
    expect(core.metricsSnapshot().recorder.tierBlocks).toEqual({ gpu: 16, host: 48, storage: 0 });
    expect(renderMetrics([{ model: "m", snapshot: core.metricsSnapshot() }] as never)).toMatch(/kvedge_routing_matched_blocks_total\{model="m",tier="host"\} 48/);
    now += 60_000; // past the routed chain's pending window (counted as GPU overlap until then)
    expect(p.candidates.find((c) => c.workerId === "a")).toMatchObject({ overlapBlocks: 16, hostBlocks: 48 });
    // Evicted from host memory too: only the GPU prefix is left.
    core.applyEvents("a", { type: "events", epoch: 1, seq: 3, events: [{ t: "removed", hashes: host.slice(16).map((r) => r.h), tier: "CPU_PINNED" }] });
    expect(core.peek({ localHashes: hashes(), isl: tokens.length })).toMatchObject({ overlapBlocks: 16, hostBlocks: 0 });
  });

  it("host rows of a dump are the host tier; AllBlocksCleared empties every tier", () => {
    const core = new RoutingCore({ blockSize: B });
    hello(core, "a");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: chainRows(8, 100).map((r) => ({ ...r, tier: "CPU_PINNED" as const })) });
    expect(core.peek({ localHashes: hashes(), isl: tokens.length })).toMatchObject({ overlapBlocks: 8, hostBlocks: 8 });
    core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "cleared" }] });
    expect(core.peek({ localHashes: hashes(), isl: tokens.length })).toMatchObject({ overlapBlocks: 0, hostBlocks: 0 });
  });

  it("the TTFT cost prices a host hit by its load-back: GPU beats host beats prefill, unless loading is slower than prefilling", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5 });
    for (const id of ["gpu", "host", "none"]) hello(core, id);
    core.applyDump("gpu", { type: "dump", epoch: 1, seq: 0, blocks: chainRows(64, 100) });
    core.applyDump("host", { type: "dump", epoch: 1, seq: 0, blocks: chainRows(64, 100).map((r) => ({ ...r, tier: "CPU_PINNED" as const })) });
    core.applyDump("none", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    expect(core.peek({ localHashes: hashes(), isl: tokens.length }).workerId).toBe("gpu");
    expect(core.peek({ localHashes: hashes(), isl: tokens.length, exclude: ["gpu"] }).workerId).toBe("host");
    // A link so slow that loading 1024 tokens' KV back takes longer than prefilling them.
    const slow = new RoutingCore({ blockSize: B, random: () => 0.5, tiers: { ...DEFAULT_TIER_COST, hostLoadGBps: 0.001 } });
    for (const id of ["host", "none"]) hello(slow, id);
    slow.applyDump("host", { type: "dump", epoch: 1, seq: 0, blocks: chainRows(64, 100).map((r) => ({ ...r, tier: "CPU_PINNED" as const })) });
    slow.applyDump("none", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    expect(slow.peek({ localHashes: hashes(), isl: tokens.length }).workerId).toBe("none");
  });

  it("a shared storage view credits every attached worker (approximate) and ages out past its capacity", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5, storageCapacityBlocks: 64 });
    hello(core, "a", "file");
    hello(core, "b", "file");
    hello(core, "c");
    hello(core, "d", "mooncake");
    for (const id of ["a", "b", "c", "d"]) core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
    const hostStore = (rows: ReturnType<typeof chainRows>, seq: number) =>
      core.applyEvents("a", { type: "events", epoch: 1, seq, events: [{ t: "stored", parent: null, blocks: rows.map((r) => ({ h: r.h, l: r.l })), tier: "CPU_PINNED" }] });
    hostStore(chainRows(64, 100), 1);
    const byId = (p: { candidates: { workerId: string; overlapBlocks: number; hostBlocks?: number; storageBlocks?: number }[] }) => Object.fromEntries(p.candidates.map((c) => [c.workerId, [c.overlapBlocks, c.hostBlocks ?? 0, c.storageBlocks ?? 0]]));
    expect(byId(core.peek({ localHashes: hashes(), isl: tokens.length }))).toEqual({ a: [0, 64, 0], b: [0, 0, 64], c: [0, 0, 0], d: [0, 0, 0] });
    expect(core.peek({ localHashes: hashes(), isl: tokens.length, exclude: ["a"] })).toMatchObject({ workerId: "b", overlapBlocks: 64, storageBlocks: 64 });
    // Another 64-block chain fills the view: the first is aged out.
    const other = localBlockHashes(tokens.map((t) => t + 1), B);
    core.applyEvents("a", { type: "events", epoch: 1, seq: 2, events: [{ t: "stored", parent: null, blocks: other.map((l, i) => ({ h: String(9000 + i), l: localHashToHex(l) })), tier: "CPU_PINNED" }] });
    expect(byId(core.peek({ localHashes: hashes(), isl: tokens.length })).b).toEqual([0, 0, 0]);
    expect(byId(core.peek({ localHashes: other, isl: tokens.length })).b).toEqual([0, 0, 64]);
  });

  it("load-back time is bytes over bandwidth", () => {
    // 64 blocks × 16 tokens × 147 456 B = 151 MB at 37 GB/s ≈ 4.08 ms.
    expect(hostLoadBackMs(DEFAULT_TIER_COST, 64, 16)).toBeCloseTo((64 * 16 * 147_456) / 37e9 * 1000, 9);
    const t = estimateTtft({ defaultPrefillTokensPerSec: 10_000, decodeMsPerBlock: 0 }, { slot: 0, overlapBlocks: 16, hostBlocks: 48, activePrefillTokens: 0, activeDecodeBlocks: 0 }, { rttMs: 0, prefillTokensPerSec: 10_000 }, 64 * 16 + 8, 16);
    expect(t.prefillMs).toBeCloseTo(0.8, 9); // only the 8 tokens past every cached block
    expect(t.loadBackMs).toBeCloseTo(hostLoadBackMs(DEFAULT_TIER_COST, 48, 16), 9);
  });
});
