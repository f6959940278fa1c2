/**
 * The index's side of "state stays true": a worker whose relay lost history, or whose blocks an
 * index object had no room for, is never reported synced; it is routed in approximate mode (routed
 * blocks assumed cached for the TTL) on top of what the index holds, and becomes exact again with a
 * dump that is whole and not approximate, or an AllBlocksCleared.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { BlockBudget } from "../../../src/block-index/block-budget.ts";

beforeAll(() => initHashing());

const tokens = Array.from({ length: 40 }, (_, i) => i + 1);

function hello(core: RoutingCore, id: string, epoch = 1) {
  return core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 4, epoch, modelName: "m", contract: null, kvEvents: true }, id);
}

function dumpOf(toks: number[], base: number) {
  return localBlockHashes(toks, 4).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

const row = (core: RoutingCore, id: string) => core.workers().find((w) => w.workerId === id)!;

describe("approximate workers in the index", () => {
  it("a dump marked approximate: not synced, approximate with its reason, in the metrics snapshot too", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 7, blocks: dumpOf(tokens, 100), approximate: true });
    expect(row(core, "a")).toMatchObject({ synced: false, approximate: true, blocks: 10 });
    expect(row(core, "a").approximateReasons[0]).toMatch(/lost history/);
    expect(core.metricsSnapshot().workers[0]).toMatchObject({ synced: false, approximate: true });
    // Events still apply (the relay keeps streaming); the index's blocks are used for routing.
    expect(core.applyEvents("a", { type: "events", epoch: 1, seq: 8, events: [{ t: "removed", hashes: ["109"] }] })).toEqual({ ok: true });
    expect(row(core, "a").blocks).toBe(9);
  });

  it("routes an approximate worker on index blocks and on what was routed to it within the TTL", () => {
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: 4, now: () => now, random: () => 0.5, approx: { ttlMs: 60_000 } });
    hello(core, "a");
    hello(core, "b");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: [], approximate: true });
    core.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: [] });
    const other = tokens.map((t) => t + 500);
    const first = core.route({ localHashes: localBlockHashes(other, 4), isl: 40, exclude: ["b"] })!;
    expect(first.workerId).toBe("a");
    core.settle({ receiptId: first.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" });
    now += 30_000; // past the pending-route window, within the TTL: assumed cached (approximate mode)
    expect(core.peek({ localHashes: localBlockHashes(other, 4), isl: 40 })).toMatchObject({ workerId: "a", overlapBlocks: 10 });
    now += 60_000; // TTL over
    expect(core.peek({ localHashes: localBlockHashes(other, 4), isl: 40 }).overlapBlocks).toBe(0);
  });

  it("exact again: a dump without the flag, or AllBlocksCleared; a new epoch starts exact", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100), approximate: true });
    core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "cleared" }] });
    expect(row(core, "a")).toMatchObject({ synced: true, approximate: false, blocks: 0 });
    core.applyDump("a", { type: "dump", epoch: 1, seq: 2, blocks: dumpOf(tokens, 100), approximate: true });
    core.applyDump("a", { type: "dump", epoch: 1, seq: 3, blocks: dumpOf(tokens, 100) });
    expect(row(core, "a")).toMatchObject({ synced: true, approximate: false });
    core.applyDump("a", { type: "dump", epoch: 1, seq: 4, blocks: [], approximate: true });
    hello(core, "a", 2);
    expect(row(core, "a").approximate).toBe(false);
  });
});

describe("the index's last copy of a worker whose relay went away", () => {
  it("is kept (approximate, not synced); an approximate dump merges into it; an exact dump replaces it", () => {
    const core = new RoutingCore({ blockSize: 4 });
    hello(core, "a");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    core.relayGone("a");
    expect(row(core, "a")).toMatchObject({ blocks: 10, synced: false, approximate: true });
    expect(core.peek({ localHashes: localBlockHashes(tokens, 4), isl: 40 }).overlapBlocks).toBe(10);
    // The relay comes back having lost history: its view knows only a newer prompt.
    hello(core, "a");
    const other = tokens.map((t) => t + 500);
    core.applyDump("a", { type: "dump", epoch: 1, seq: 50, blocks: dumpOf(other, 300), approximate: true });
    expect(row(core, "a")).toMatchObject({ blocks: 20, synced: false, approximate: true });
    // An exact view (e.g. after the worker's cache was flushed and re-filled) replaces the union.
    core.applyDump("a", { type: "dump", epoch: 1, seq: 60, blocks: dumpOf(other, 300) });
    expect(row(core, "a")).toMatchObject({ blocks: 10, synced: true, approximate: false });
    expect(core.peek({ localHashes: localBlockHashes(tokens, 4), isl: 40 }).overlapBlocks).toBe(0);
  });
});

describe("block budget of one index object", () => {
  it("refuses a limit below one entry", () => {
    expect(() => new BlockBudget(0)).toThrow();
  });

  it("the effective limit follows the bytes per entry, which grow with the workers one object serves", () => {
    const b = new BlockBudget(600_000, 46 * 1024 * 1024);
    expect(b.limitFor(32)).toBe(600_000);
    expect(b.limitFor(1024)).toBeLessThan(300_000);
    expect(b.limitFor(1024) * 179).toBeLessThanOrEqual(46 * 1024 * 1024); // 179 B/entry measured at 1 024 workers
  });

  it("a full index refuses blocks instead of growing: counted, the worker approximate, exact again once a dump fits", () => {
    const core = new RoutingCore({ blockSize: 4, blockBudget: 24 });
    hello(core, "a");
    hello(core, "b");
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf(tokens, 100) });
    core.applyDump("b", { type: "dump", epoch: 1, seq: 0, blocks: dumpOf([...tokens, ...tokens.map((t) => t + 50)], 200) });
    // b may use what the unused part of a's share (12: an even split) leaves: 12 of its 20.
    expect(core.sizes().indexedBlocks).toBe(22);
    expect(row(core, "b")).toMatchObject({ blocks: 12, approximate: true, synced: false });
    expect(row(core, "a")).toMatchObject({ approximate: false, synced: true });
    expect(core.stats().counters.dropReasons["block_budget"]).toBe(8);
    // Streamed blocks beyond the share are refused too, whole chains at a time.
    const more = dumpOf(tokens.map((t) => t + 900), 300).slice(0, 2);
    core.applyEvents("b", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: null, blocks: more.map((b) => ({ h: b.h, l: b.l })) }] });
    expect(core.sizes().indexedBlocks).toBe(22);
    expect(core.stats().counters.dropReasons["block_budget"]).toBe(10);
    // a is within its share: its chain is stored, and the object is full.
    core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: null, blocks: more.map((b) => ({ h: b.h, l: b.l })) }] });
    expect(row(core, "a")).toMatchObject({ blocks: 12, approximate: false, synced: true });
    expect(core.sizes().indexedBlocks).toBe(24);
    // Room again (a's blocks removed): b's next dump fits whole and b is exact.
    core.applyEvents("a", { type: "events", epoch: 1, seq: 2, events: [{ t: "cleared" }] });
    core.applyDump("b", { type: "dump", epoch: 1, seq: 1, blocks: dumpOf(tokens, 200) });
    expect(row(core, "b")).toMatchObject({ blocks: 10, approximate: false, synced: true });
    expect(core.sizes().blocksRefused).toBe(10);
    expect(core.metricsSnapshot().blockBudget).toBe(24);
  });
});
