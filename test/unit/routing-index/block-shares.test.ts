/**
 * Per-worker shares of one index object (src/routing-index/block-shares.ts): a relay that floods
 * the index with fabricated blocks (a stolen key for a new worker) is refused past its share and
 * marked approximate; the honest workers stay synced with their blocks indexed.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex, RelayHelloSchema, type RelayHello } from "../../../src/relay-wire/relay-protocol.ts";
import { capacityBlocks } from "../../../src/routing-index/block-shares.ts";

beforeAll(() => initHashing());

const BS = 4;

function hello(core: RoutingCore, id: string, extra: Partial<RelayHello> = {}) {
  const r = core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...extra }, id);
  expect(r.ok).toBe(true);
}

/** One chain of `n` blocks (parents first), engine hashes from `base`, distinct local hashes per `salt`. */
function chain(n: number, base: number, salt: number) {
  const toks = Array.from({ length: n * BS }, (_, i) => salt * 1_000_000 + i + 1);
  return localBlockHashes(toks, BS).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

const row = (core: RoutingCore, id: string) => core.workers().find((w) => w.workerId === id)!;

/** The honest worker's next stored chain, as its relay streams it. */
function storeMore(core: RoutingCore, id: string, seq: number, n: number, base: number, salt: number) {
  const blocks = chain(n, base, salt).map(({ h, l }) => ({ h, l }));
  return core.applyEvents(id, { type: "events", epoch: 1, seq, events: [{ t: "stored", parent: null, blocks }] });
}

describe("a flooding relay cannot take the honest workers' room in the index", () => {
  it("flood after the honest worker: the flooder is refused past its share, the honest worker stays synced and keeps storing", () => {
    const core = new RoutingCore({ blockSize: BS, blockBudget: 2_000 });
    hello(core, "honest", { kvCapacityTokens: 2_000 }); // 500 blocks, bound 1 000
    hello(core, "flood", { kvCapacityTokens: 2 ** 34 }); // a lie: no smaller than the object
    core.applyDump("honest", { type: "dump", epoch: 1, seq: 0, blocks: chain(100, 1, 1) });
    core.applyDump("flood", { type: "dump", epoch: 1, seq: 0, blocks: chain(5_000, 100_000, 2) });
    // The honest worker's guarantee is min(its bound 1 000, 2 000 / 2): 900 of it stay reserved.
    expect(row(core, "flood")).toMatchObject({ blocks: 1_000, approximate: true, synced: false });
    expect(row(core, "honest")).toMatchObject({ blocks: 100, approximate: false, synced: true });
    expect(storeMore(core, "honest", 1, 300, 10_000, 3)).toEqual({ ok: true });
    expect(row(core, "honest")).toMatchObject({ blocks: 400, approximate: false, synced: true });
    // The flooder's streamed blocks are refused as well.
    storeMore(core, "flood", 1, 50, 200_000, 4);
    expect(row(core, "flood").blocks).toBe(1_000);
    expect(core.stats().counters.dropReasons["block_budget"]).toBe(4_050);
  });

  it("flood before the honest worker joins: the flooder's view is dropped for the newcomer's share, never the newcomer's", () => {
    const core = new RoutingCore({ blockSize: BS, blockBudget: 2_000 });
    hello(core, "flood");
    core.applyDump("flood", { type: "dump", epoch: 1, seq: 0, blocks: chain(5_000, 100_000, 2) });
    expect(row(core, "flood").blocks).toBe(2_000);
    hello(core, "honest", { kvCapacityTokens: 2_000 });
    core.applyDump("honest", { type: "dump", epoch: 1, seq: 0, blocks: chain(100, 1, 1) });
    expect(row(core, "honest")).toMatchObject({ blocks: 100, approximate: false, synced: true });
    expect(row(core, "flood")).toMatchObject({ blocks: 0, approximate: true, synced: false });
    expect(row(core, "flood").approximateReasons.join(" ")).toMatch(/share/);
    // The flooder's events now ask for a dump; its next dump fits only beside the honest guarantee.
    expect(storeMore(core, "flood", 1, 10, 300_000, 5)).toMatchObject({ ok: false, resync: true });
    core.applyDump("flood", { type: "dump", epoch: 1, seq: 2, blocks: chain(5_000, 100_000, 2) });
    expect(row(core, "flood").blocks).toBe(1_000);
    expect(storeMore(core, "honest", 1, 300, 10_000, 3)).toEqual({ ok: true });
    expect(row(core, "honest")).toMatchObject({ blocks: 400, approximate: false, synced: true });
  });

  it("a worker's blocks are bounded by its own KV capacity, whatever room the object has", () => {
    const core = new RoutingCore({ blockSize: BS, blockBudget: 100_000 });
    hello(core, "small", { kvCapacityTokens: 400 }); // 100 blocks of KV: bound 200
    expect(capacityBlocks({ kvCapacityTokens: 400, blockSize: BS })).toBe(200);
    core.applyDump("small", { type: "dump", epoch: 1, seq: 0, blocks: chain(300, 1, 1) });
    expect(row(core, "small")).toMatchObject({ blocks: 200, approximate: true });
    core.applyDump("small", { type: "dump", epoch: 1, seq: 1, blocks: chain(150, 1, 1) });
    expect(row(core, "small")).toMatchObject({ blocks: 150, approximate: false, synced: true });
  });

  it("the hello's capacity is validated and bounded", () => {
    const base = { type: "hello", workerId: "w", url: "http://w", blockSize: BS, epoch: 1, modelName: "m" };
    expect(RelayHelloSchema.safeParse({ ...base, kvCapacityTokens: 1_000_000 }).success).toBe(true);
    for (const bad of [0, -1, 1.5, 2 ** 40, "100"]) expect(RelayHelloSchema.safeParse({ ...base, kvCapacityTokens: bad }).success).toBe(false);
  });
});
