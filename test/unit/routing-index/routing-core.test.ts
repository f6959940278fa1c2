import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { blockCost } from "../../../src/selection/block-cost.ts";
import { pickIndex } from "../../../src/selection/selection.ts";

beforeAll(() => initHashing());

function hello(core: RoutingCore, id: string, epoch = 1, blockSize = 4) {
  return core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize, epoch, modelName: "m", contract: null, kvEvents: true }, id);
}

function storeChain(core: RoutingCore, id: string, tokens: number[], epoch = 1) {
  const locals = localBlockHashes(tokens, 4);
  const blocks = locals.map((l, i) => ({ h: String(1000 + i), p: i === 0 ? null : String(999 + i), l: localHashToHex(l) }));
  return core.applyDump(id, { type: "dump", epoch, seq: 0, blocks });
}

describe("RoutingCore", () => {
  const tokens = Array.from({ length: 40 }, (_, i) => i + 1);

  it("routes to the worker holding the longest prefix and records the receipt", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    hello(core, "a");
    hello(core, "b");
    storeChain(core, "a", tokens.slice(0, 8));
    storeChain(core, "b", tokens);
    const d = core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!;
    expect(d.workerId).toBe("b");
    expect(d.overlapBlocks).toBe(10);
    expect(d.totalBlocks).toBe(10);
    const { receipt } = core.settle({ receiptId: d.receiptId, promptTokens: 40, cachedTokens: 40, outcome: "ok" });
    expect(receipt).toMatchObject({ workerId: "b", predictedOverlapBlocks: 10, actualCachedTokens: 40 });
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("refuses hellos with the wrong worker id, block size or a stale epoch", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "b").ok).toBe(false);
    expect(hello(core, "a", 1, 16).ok).toBe(false);
    expect(hello(core, "a", 5).ok).toBe(true);
    expect(hello(core, "a", 4).ok).toBe(false);
  });

  it("a new epoch fences out the old blocks; events need a dump first", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a", 1);
    storeChain(core, "a", tokens, 1);
    expect(core.sizes().indexedBlocks).toBe(10);
    hello(core, "a", 2);
    expect(core.sizes().indexedBlocks).toBe(0);
    const r = core.applyEvents("a", { type: "events", epoch: 2, seq: 1, events: [{ t: "cleared" }] });
    expect(r).toMatchObject({ ok: false, resync: true });
    expect(storeChain(core, "a", tokens, 1)).toMatchObject({ ok: false, reason: "stale_epoch" });
  });

  it("a synced worker whose relay has been silent too long is approximate until the relay is heard again", () => {
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: 4, now: () => now, relaySilentMs: 90_000 });
    hello(core, "a");
    storeChain(core, "a", tokens);
    expect(core.workers()[0]).toMatchObject({ synced: true, approximate: false });
    now += 90_000;
    expect(core.workers()[0]).toMatchObject({ synced: true, approximate: false });
    now += 1;
    // No message for more than three pings: the path may be dead (half-open) and events lost.
    expect(core.workers()[0]).toMatchObject({ synced: false, approximate: true });
    expect(core.workers()[0]!.approximateReasons.join()).toMatch(/nothing from its relay for 90 s/);
    expect(core.relaySilent("a")).toBe(true);
    core.touch("a"); // a ping arrives
    expect(core.relaySilent("a")).toBe(false);
    expect(core.workers()[0]).toMatchObject({ synced: true, approximate: false });
    // route() checks too, without any read of the worker list first.
    now += 200_000;
    core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 });
    expect(core.isApproximate("a")).toBe(true);
  });

  it("an edge's failed connect quarantines the worker: routed around until it expires, its view and status kept", () => {
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: 4, now: () => now, random: () => 0.5, quarantineMs: 15_000 });
    hello(core, "a");
    hello(core, "b");
    storeChain(core, "a", tokens);
    const ask = () => core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!;
    const first = ask();
    expect(first.workerId).toBe("a");
    core.settle({ receiptId: first.receiptId, promptTokens: 40, cachedTokens: 40, outcome: "ok" });
    expect(core.quarantine("a")).toMatchObject({ status: "up", quarantinedUntil: 1_015_000 });
    const during = ask();
    expect(during.workerId).toBe("b");
    core.settle({ receiptId: during.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" });
    expect(core.workers().find((w) => w.workerId === "a")).toMatchObject({ status: "up", synced: true, blocks: 10 });
    expect(core.metricsSnapshot().workers.find((w) => w.workerId === "a")!.quarantined).toBe(true);
    now += 15_001;
    expect(core.metricsSnapshot().workers.find((w) => w.workerId === "a")!.quarantined).toBe(false);
    expect(ask()).toMatchObject({ workerId: "a", overlapBlocks: 10 });
    // Every worker quarantined (one lost pooled connection each): still routed rather than 503.
    core.quarantine("a");
    core.quarantine("b");
    expect(ask().workerId).toBe("a");
    now += 15_001;
    // A new life of the worker ends a quarantine at once.
    core.quarantine("a");
    hello(core, "a", 2);
    expect(core.worker("a")!.quarantinedUntil).toBeUndefined();
  });

  it("fenceRefusedLife: another life refused by the pool ends the registered one (down, no blocks)", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a", 5);
    storeChain(core, "a", tokens, 5);
    expect(hello(core, "a", 4).ok).toBe(false);
    expect(core.fenceRefusedLife("a", 5)).toBeUndefined(); // the same life: nothing to fence
    expect(core.fenceRefusedLife("a", 4)).toMatchObject({ status: "down" });
    expect(core.workers()[0]).toMatchObject({ status: "down", blocks: 0, synced: false });
  });

  it("a dump continued in stored events: synced only once its last block has arrived (RelayDump continues)", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    const locals = localBlockHashes(tokens, 4);
    const rows = locals.map((l, i) => ({ h: String(1000 + i), p: i === 0 ? null : String(999 + i), l: localHashToHex(l) }));
    core.applyDump("a", { type: "dump", epoch: 1, seq: 7, blocks: rows.slice(0, 4), continues: 6 });
    const row = () => core.workers()[0]!;
    expect(row()).toMatchObject({ synced: false, blocks: 4 });
    const more = (from: number, to: number) => core.applyEvents("a", { type: "events", epoch: 1, seq: 7, events: rows.slice(from, to).map((r) => ({ t: "stored" as const, parent: r.p, blocks: [{ h: r.h, l: r.l }] })) });
    expect(more(4, 8)).toMatchObject({ ok: true });
    expect(row()).toMatchObject({ synced: false, blocks: 8 });
    more(8, 10);
    expect(row()).toMatchObject({ synced: true, approximate: false, blocks: 10 });
    // A complete dump (no continuation) is synced at once, and clears what a cut-off one left.
    core.applyDump("a", { type: "dump", epoch: 1, seq: 8, blocks: rows.slice(0, 2), continues: 8 });
    hello(core, "a");
    storeChain(core, "a", tokens);
    expect(row()).toMatchObject({ synced: true, blocks: 10 });
  });

  it("load spreads cold requests across workers", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.99 });
    hello(core, "a");
    hello(core, "b");
    const chosen = new Set<string>();
    for (let i = 0; i < 4; i++) chosen.add(core.route({ localHashes: [BigInt(i)], isl: 400 })!.workerId);
    expect(chosen.size).toBe(2);
  });

  it("a worker marked down gets no traffic and loses its blocks", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    hello(core, "b");
    storeChain(core, "a", tokens);
    core.setStatus("a", "down");
    expect(core.sizes().indexedBlocks).toBe(0);
    for (let i = 0; i < 5; i++) expect(core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!.workerId).toBe("b");
    expect(core.route({ localHashes: [], isl: 1, exclude: ["b"] })).toBeNull();
  });

  it("selection cost and tie-breaking", () => {
    expect(blockCost({ slot: 0, overlapBlocks: 2, activePrefillTokens: 0, activeDecodeBlocks: 0 }, 16, 4)).toBe(2 + 4);
    expect(blockCost({ slot: 0, overlapBlocks: 9, activePrefillTokens: 0, activeDecodeBlocks: 3 }, 16, 4)).toBe(0 + 3 + 4);
    const scored = [{ slot: 0, cost: 1, overlapBlocks: 0 }, { slot: 1, cost: 1, overlapBlocks: 0 }, { slot: 2, cost: 2, overlapBlocks: 0 }];
    const seen = new Set<number>();
    let x = 0;
    for (let i = 0; i < 20; i++) seen.add(pickIndex(scored, 0, () => ((x = (x * 9301 + 49297) % 233280) / 233280)));
    expect([...seen].sort()).toEqual([0, 1]);
  });
});

describe("pending routes", () => {
  it("a repeat routed before the worker's events arrive still goes to the same worker, until the TTL", () => {
    let now = 1_000;
    const core = new RoutingCore({ blockSize: 4, random: () => 0.99, now: () => now });
    hello(core, "a");
    hello(core, "b");
    const hashes = localBlockHashes(Array.from({ length: 64 }, (_, i) => i + 7), 4);
    const first = core.route({ localHashes: hashes, isl: 64 })!;
    core.settle({ receiptId: first.receiptId, promptTokens: 64, cachedTokens: 0, outcome: "ok" });
    const again = core.route({ localHashes: hashes, isl: 64 })!;
    expect(again.workerId).toBe(first.workerId);
    expect(again.overlapBlocks).toBe(16);
    core.settle({ receiptId: again.receiptId, promptTokens: 64, cachedTokens: 64, outcome: "ok" });
    now += 60_000;
    expect(core.route({ localHashes: hashes, isl: 64 })!.overlapBlocks).toBe(0);
  });
});

describe("receipts", () => {
  it("a sustained gap between predicted and actual cached tokens is flagged as drift", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    storeChain(core, "a", Array.from({ length: 40 }, (_, i) => i + 1));
    const hashes = localBlockHashes(Array.from({ length: 40 }, (_, i) => i + 1), 4);
    let flagged = 0;
    for (let i = 0; i < 8; i++) {
      const d = core.route({ localHashes: hashes, isl: 40 })!;
      if (core.settle({ receiptId: d.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" }).drift) flagged++;
    }
    expect(flagged).toBe(1);
    expect(core.stats().receipts[0]).toMatchObject({ workerId: "a", drifting: true });
    // Accurate receipts bring it back.
    for (let i = 0; i < 40; i++) {
      const d = core.route({ localHashes: hashes, isl: 40 })!;
      core.settle({ receiptId: d.receiptId, promptTokens: 40, cachedTokens: 40, outcome: "ok" });
    }
    expect(core.stats().receipts[0]!.drifting).toBe(false);
  });
});

describe("decode load counts shared blocks once", () => {
  it("concurrent turns of one chat on a worker add only their new blocks", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    hello(core, "a");
    const base = Array.from({ length: 40 }, (_, i) => i + 1);
    const first = core.route({ localHashes: localBlockHashes(base, 4), isl: 40 })!;
    expect(core.workers()[0]!.activeDecodeBlocks).toBe(10);
    const longer = [...base, ...Array.from({ length: 8 }, (_, i) => 900 + i)];
    const second = core.route({ localHashes: localBlockHashes(longer, 4), isl: 48 })!;
    expect(core.workers()[0]!.activeDecodeBlocks).toBe(12);
    core.settle({ receiptId: first.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" });
    expect(core.workers()[0]!.activeDecodeBlocks).toBe(12);
    core.settle({ receiptId: second.receiptId, promptTokens: 48, cachedTokens: 40, outcome: "ok" });
    expect(core.workers()[0]!.activeDecodeBlocks).toBe(0);
  });
});
