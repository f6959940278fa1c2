/**
 * The worker registry alone (src/routing-index/worker-registry.ts): hellos and their refusals,
 * epochs as worker lives, the pool block size, slots handed out and reused, status and lastSeen.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { WorkerRegistry, type WorkerRecord } from "../../../src/routing-index/worker-registry.ts";
import { SGLANG_CONTRACT_KEY, contractDigest } from "../../../src/layout/index.ts";
import type { RelayHello } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";

beforeAll(() => initHashing());

const helloMsg = (id: string, over: Partial<RelayHello> = {}): RelayHello => ({
  type: "hello", workerId: id, url: `http://${id}:30000`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...over,
});

describe("WorkerRegistry", () => {
  it("refuses a hello for another worker id, another block size, or an older epoch, changing nothing", () => {
    const reg = new WorkerRegistry(null, () => 5);
    expect(reg.hello(helloMsg("a"), "b")).toEqual({ ok: false, reason: "worker id does not match the authenticated worker" });
    expect(reg.blockSize).toBeNull();
    expect(reg.get("a")).toBeUndefined();
    expect(reg.hello(helloMsg("a", { epoch: 3, blockSize: 16 }), "a").ok).toBe(true);
    // The first worker's block size became the pool's.
    expect(reg.blockSize).toBe(16);
    expect(reg.hello(helloMsg("b", { blockSize: 4 }), "b")).toEqual({ ok: false, reason: "block size 4 differs from the pool's 16" });
    expect(reg.hello(helloMsg("a", { epoch: 2, blockSize: 16 }), "a")).toEqual({ ok: false, reason: "stale epoch 2 < 3", indexEpoch: 3 });
    expect(reg.get("a")!.epoch).toBe(3);
    expect(reg.slotCount).toBe(1);
  });

  it("keeps a draining worker draining when its relay says hello again in the same life, and up in a new life", () => {
    const reg = new WorkerRegistry(4, () => 1);
    reg.hello(helloMsg("a", { epoch: 5 }), "a");
    reg.setStatus("a", "draining");
    const again = reg.hello(helloMsg("a", { epoch: 5 }), "a");
    expect(again).toMatchObject({ ok: true, newLife: false, record: { status: "draining" } });
    expect(reg.get("a")!.status).toBe("draining");
    // A pool object restart: the persisted row comes back draining, then the relay reconnects.
    const restarted = new WorkerRegistry(4, () => 2);
    restarted.restore(reg.record("a")!);
    expect(restarted.hello(helloMsg("a", { epoch: 5 }), "a")).toMatchObject({ ok: true, record: { status: "draining" } });
    // A down worker of the same life comes back up; the worker's next life joins up.
    reg.setStatus("a", "down");
    expect(reg.hello(helloMsg("a", { epoch: 5 }), "a")).toMatchObject({ ok: true, record: { status: "up" } });
    reg.setStatus("a", "draining");
    expect(reg.hello(helloMsg("a", { epoch: 6 }), "a")).toMatchObject({ ok: true, newLife: true, record: { status: "up" } });
  });

  it("tells a new worker life (first hello, another epoch) from a reconnect of the same life", () => {
    const reg = new WorkerRegistry(4, () => 1);
    const first = reg.hello(helloMsg("a"), "a");
    expect(first).toMatchObject({ ok: true, added: true, newLife: true, worker: { slot: 0 } });
    expect(reg.hello(helloMsg("a"), "a")).toMatchObject({ ok: true, added: false, newLife: false, worker: { slot: 0 } });
    expect(reg.hello(helloMsg("a", { epoch: 2 }), "a")).toMatchObject({ ok: true, added: false, newLife: true });
  });

  it("builds the record from the hello: trailing slashes cut, status up, lastSeen now, contract digest", () => {
    const published = { [SGLANG_CONTRACT_KEY]: fixtureContract("qwen2_5_vl") };
    const reg = new WorkerRegistry(4, () => 1234);
    const r = reg.hello(helloMsg("a", { url: "http://a:30000///", contract: published, region: "eu", prefillTokensPerSec: 9000, kvCapacityTokens: 500_000 }), "a");
    if (!r.ok) throw new Error(r.reason);
    expect(r.record).toEqual({
      workerId: "a", url: "http://a:30000", blockSize: 4, epoch: 1, status: "up", modelName: "m", contract: published,
      contractDigest: contractDigest(fixtureContract("qwen2_5_vl")), kvEvents: true, incrementalStreaming: false, lastSeen: 1234, region: "eu", prefillTokensPerSec: 9000,
      kvCapacityTokens: 500_000, disaggregationMode: "null", bootstrapPort: null,
    });
    // The record callers see carries no slot; an unparseable contract has no digest.
    expect(reg.record("a")).toEqual(r.record);
    expect(reg.hello(helloMsg("b", { contract: { nope: 1 } }), "b")).toMatchObject({ ok: true, record: { contractDigest: null, region: null, prefillTokensPerSec: null, kvCapacityTokens: null } });
  });

  it("reuses a removed worker's slot for the next new worker, and keeps the others' slots", () => {
    const reg = new WorkerRegistry(4);
    for (const id of ["a", "b", "c"]) reg.hello(helloMsg(id), id);
    expect(["a", "b", "c"].map((id) => reg.slotOf(id))).toEqual([0, 1, 2]);
    expect(reg.remove("b")).toMatchObject({ workerId: "b", slot: 1 });
    expect(reg.remove("b")).toBeUndefined();
    expect(reg.slotOf("b")).toBe(-1);
    expect(reg.all().map((w) => w.workerId)).toEqual(["a", "c"]);
    expect(reg.hello(helloMsg("d"), "d")).toMatchObject({ ok: true, added: true, worker: { slot: 1 } });
    expect(reg.hello(helloMsg("e"), "e")).toMatchObject({ ok: true, worker: { slot: 3 } });
    expect(reg.slotCount).toBe(4);
  });

  it("restores persisted rows (adopting their block size) and updates a known one in place", () => {
    const reg = new WorkerRegistry(null);
    const rec: WorkerRecord = { workerId: "a", url: "http://a", blockSize: 32, epoch: 7, status: "draining", modelName: "m", contract: null, contractDigest: null, kvEvents: false, incrementalStreaming: true, lastSeen: 10 };
    expect(reg.restore(rec)).toMatchObject({ added: true, worker: { slot: 0, epoch: 7, status: "draining" } });
    expect(reg.blockSize).toBe(32);
    expect(reg.restore({ ...rec, epoch: 8 })).toMatchObject({ added: false, worker: { slot: 0, epoch: 8 } });
    // A configured block size wins over the rows'.
    const configured = new WorkerRegistry(null);
    configured.adoptBlockSize(16);
    configured.adoptBlockSize(64);
    configured.restore(rec);
    expect(configured.blockSize).toBe(16);
  });

  it("touch and setStatus move lastSeen on the clock; unknown workers answer null / undefined", () => {
    let t = 100;
    const reg = new WorkerRegistry(4, () => t);
    reg.hello(helloMsg("a"), "a");
    t = 250;
    expect(reg.touch("a")).toBe(250);
    expect(reg.touch("zz")).toBeNull();
    t = 300;
    expect(reg.setStatus("a", "down")).toMatchObject({ status: "down", lastSeen: 300, slot: 0 });
    expect(reg.setStatus("zz", "down")).toBeUndefined();
    expect(reg.record("a")).toMatchObject({ status: "down", lastSeen: 300 });
  });
});
