/**
 * Shared HiCache storage views (src/routing-index/storage-views.ts) are bounded by the backends in
 * use, not by the identities ever named: a relay that names one backend after another (its hello's
 * `hicacheStorage` is its own word) must not hold every group slot, and with it the object's
 * memory (each group up to storageCapacityBlocks entries), nor keep an honest backend untracked.
 * A stated identity names a view only among keys granted one storage group, and the views hold no
 * more than their members' even split of the object's block budget.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { SharedStorageViews, MAX_STORAGE_GROUPS, storageViewKey } from "../../../src/routing-index/storage-views.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import type { SlottedWorker } from "../../../src/routing-index/worker-registry.ts";

beforeAll(() => initHashing());

const BS = 4;
const toks = Array.from({ length: 8 * BS }, (_, i) => i + 1);

describe("storage groups", () => {
  it("a group whose last member left is dropped: one relay cycling identities leaves room for an honest backend", () => {
    const locals = localBlockHashes(toks, BS);
    const blocks = locals.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) }));
    const views = new SharedStorageViews(1_000, () => Infinity);
    for (let i = 0; i < MAX_STORAGE_GROUPS + 10; i++) {
      views.attach("rogue", `backend-${i}`);
      views.stored("rogue", null, blocks);
    }
    views.attach("honest", "honest-backend");
    expect(views.attached("honest")).toBe(true);
    // The rogue's earlier groups are gone with their blocks: only its current group credits it.
    views.attach("peer", "backend-0");
    views.stored("honest", null, blocks);
    const w = (id: string) => ({ workerId: id }) as SlottedWorker;
    expect(views.overlaps([w("honest"), w("peer"), w("rogue")], locals)).toEqual([8, 0, 8]);
  });
});

describe("storage groups across reconnects", () => {
  it("a hello naming the same backend again keeps the group's view", () => {
    const locals = localBlockHashes(toks, BS);
    const blocks = locals.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) }));
    const views = new SharedStorageViews(1_000, () => Infinity);
    views.attach("solo", "b");
    views.stored("solo", null, blocks);
    views.attach("solo", "b");
    expect(views.overlaps([{ workerId: "solo" } as SlottedWorker], locals)).toEqual([8]);
  });
});

describe("storage views within what relay keys grant", () => {
  const B = 4;
  const chain = (seed: number, n = 16) => localBlockHashes(Array.from({ length: n * B }, (_, i) => seed * 100_000 + i + 1), B);
  const hostEvent = (locals: ReturnType<typeof chain>, base: number) => ({
    t: "stored" as const,
    parent: null,
    blocks: locals.map((l, i) => ({ h: String(base + i), l: localHashToHex(l) })),
    tier: "CPU_PINNED" as const,
  });
  function pool(opts: { blockBudget?: number } = {}) {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5, ...opts });
    const join = (id: string, storageGroup: string | null, identity = "file") => {
      const r = core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true, hicacheStorage: identity }, id, storageGroup);
      if (!r.ok) throw new Error(r.reason);
      core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
    };
    const storageOf = (locals: ReturnType<typeof chain>) =>
      Object.fromEntries(core.peek({ localHashes: locals, isl: locals.length * B }).candidates.map((c) => [c.workerId, c.storageBlocks ?? 0]));
    return { core, join, storageOf };
  }

  it("a backend identity names a shared view only among keys of one storage group; without one the view is the worker's own", () => {
    const { core, join, storageOf } = pool();
    join("a", null);
    join("b", null); // states the same backend, but its key grants no group: a's view is not its
    join("g1", "rack-1");
    join("g2", "rack-1");
    join("x", "rack-2"); // another group stating the same identity
    const locals = chain(1);
    core.applyEvents("a", { type: "events", epoch: 1, seq: 1, events: [hostEvent(locals, 100)] });
    core.applyEvents("g1", { type: "events", epoch: 1, seq: 1, events: [hostEvent(locals, 100)] });
    expect(storageOf(locals)).toEqual({ a: 0, b: 0, g1: 0, g2: 16, x: 0 });
  });

  it("a DP worker's ranks share their worker's own view", () => {
    const key = (target: string, identity: string) => storageViewKey(target, null, identity);
    expect(key("w1#0", "file")).toBe(key("w1#3", "file"));
    expect(key("w1#0", "file")).not.toBe(key("w2#0", "file"));
    expect(storageViewKey("w1#0", "rack-1", "file")).toBe(storageViewKey("w9", "rack-1", "file"));
  });

  it("views hold no more than their members' even split of the object's budget, however many blocks a relay writes and drops from host memory", () => {
    const { core, join, storageOf } = pool({ blockBudget: 256 });
    join("a", "rack-1");
    join("b", "rack-1");
    // 40 chains of 16 blocks, each written through to storage and then dropped from host memory.
    for (let i = 0; i < 40; i++) {
      const locals = chain(i + 10);
      core.applyEvents("a", { type: "events", epoch: 1, seq: 2 * i + 1, events: [hostEvent(locals, 1000 + 16 * i)] });
      core.applyEvents("a", { type: "events", epoch: 1, seq: 2 * i + 2, events: [{ t: "removed", hashes: locals.map((_, k) => String(1000 + 16 * i + k)), tier: "CPU_PINNED" }] });
    }
    // Two members, each bringing floor(256 / 2) = 128 entries: the 16 newest chains stay.
    const held = Array.from({ length: 40 }, (_, i) => storageOf(chain(i + 10)).b);
    expect(held.filter((n) => n === 16).length).toBe(16);
    expect(held.slice(24)).toEqual(Array(16).fill(16));
  });

  it("a group's capacity shrinks with its members", () => {
    const views = new SharedStorageViews(1_000, () => 32);
    views.attach("a", "g");
    views.attach("b", "g");
    for (let i = 0; i < 8; i++) views.stored("a", null, chain(i + 50).map((l, k) => ({ h: String(5000 + 16 * i + k), l: localHashToHex(l) })));
    expect(views.size).toBe(64);
    views.detach("b");
    views.stored("a", null, chain(99).map((l, k) => ({ h: String(9900 + k), l: localHashToHex(l) })));
    expect(views.size).toBe(32);
  });
});
