/**
 * The pool's receipt book (src/routing-index/receipts.ts) through a real RoutingCore: a worker's
 * drift stats last as long as the worker is in the pool, so a removed one leaves `/admin/stats`
 * and the drift gauges instead of staying for the object's life.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";

beforeAll(() => initHashing());

const BS = 4;

describe("receipt stats per worker", () => {
  it("go with a removed worker; the workers still in the pool keep theirs", () => {
    const core = new RoutingCore({ blockSize: BS, random: () => 0 });
    for (const id of ["a", "b"]) core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    for (const id of ["a", "b"]) {
      const d = core.route({ localHashes: localBlockHashes([1, 2, 3, 4, 5, 6, 7, 8], BS), isl: 8, onlyWorkers: [id] })!;
      expect(d.workerId).toBe(id);
      core.settle({ receiptId: d.receiptId, promptTokens: 8, cachedTokens: 0, outcome: "ok" });
    }
    const statsOf = () => core.stats().receipts.map((s) => s.workerId).sort();
    expect(statsOf()).toEqual(["a", "b"]);
    core.removeWorker("a");
    expect(statsOf()).toEqual(["b"]);
    expect(core.metricsSnapshot().drift.map((d) => d.workerId)).toEqual(["b"]);
  });

  it("do not come back with a removed worker's late settlements, nor start its drift; the receipts stay in the recent window", () => {
    const drifted: string[] = [];
    const core = new RoutingCore({ blockSize: BS, random: () => 0, onDrift: (id) => drifted.push(id) });
    for (const id of ["a", "b"]) core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
    const hashes = localBlockHashes(tokens, BS);
    // a holds the prompt: each route predicts 8 cached tokens; the worker reports none (drift after 5).
    core.applyDump("a", { type: "dump", epoch: 1, seq: 0, blocks: hashes.map((l, i) => ({ h: String(i + 1), p: i ? String(i) : null, l: localHashToHex(l) })) });
    const open = Array.from({ length: 5 }, () => core.route({ localHashes: hashes, isl: 8, onlyWorkers: ["a"] })!);
    const b = core.route({ localHashes: hashes, isl: 8, onlyWorkers: ["b"] })!;
    core.settle({ receiptId: b.receiptId, promptTokens: 8, cachedTokens: 0, outcome: "ok" });
    core.removeWorker("a");
    for (const d of open) core.settle({ receiptId: d.receiptId, promptTokens: 8, cachedTokens: 0, outcome: "ok" });
    expect(core.stats().receipts.map((s) => s.workerId)).toEqual(["b"]);
    expect(core.metricsSnapshot().drift.map((d) => d.workerId)).toEqual(["b"]);
    expect(drifted).toEqual([]);
    expect(core.stats().recentReceipts.filter((r) => r.workerId === "a")).toHaveLength(5);
  });
});
