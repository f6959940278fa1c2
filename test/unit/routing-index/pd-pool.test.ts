/**
 * Prefill/decode pools in the index and at the edge: the prefill pick by exact overlap among
 * prefill (and unified) workers, the decode pick by load, each side's load held until settle, the
 * pool refused when it cannot pair (naming the worker), the KV transfer in the TTFT cost, and the
 * bootstrap fields the edge adds to a /generate body.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { pdPoolProblem } from "../../../src/routing-index/pd-pool.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex, RelayHelloSchema, type DisaggregationMode } from "../../../src/relay-wire/relay-protocol.ts";
import { DEFAULT_PD_TRANSFER_GBPS, pdTransferMs } from "../../../src/selection/pd-transfer-cost.ts";
import { bootstrapHostOf, takeBootstrapRoom, withBootstrap } from "../../../src/edge/chat/pd-dispatch.ts";

beforeAll(() => initHashing());

const B = 16;
const tokens = Array.from({ length: 64 * B }, (_, i) => (i * 7919) % 50_000);
const hashes = () => localBlockHashes(tokens, B);

function hello(core: RoutingCore, id: string, mode: DisaggregationMode = "null", region?: string) {
  const msg = RelayHelloSchema.parse({
    ...(region ? { region } : {}),
    type: "hello",
    workerId: id,
    url: `http://${id}.local:30000`,
    blockSize: B,
    epoch: 1,
    modelName: "m",
    ...(mode !== "null" ? { disaggregationMode: mode } : {}),
    ...(mode === "prefill" ? { bootstrapPort: 8998 } : {}),
  });
  const r = core.hello(msg, id);
  expect(r.ok).toBe(true);
  core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
}

function holdPrefix(core: RoutingCore, id: string, n: number) {
  const blocks = hashes().slice(0, n).map((l, i) => ({ h: String(100 + i), p: i === 0 ? null : String(99 + i), l: localHashToHex(l) }));
  core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks });
}

describe("prefill/decode pairs in the index", () => {
  it("picks the prefill holding the prefix and the least-loaded decode; each side's load is freed at settle", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5 });
    hello(core, "p1", "prefill");
    hello(core, "p2", "prefill");
    hello(core, "d1", "decode");
    hello(core, "d2", "decode");
    holdPrefix(core, "p2", 64);
    const req = { localHashes: hashes(), isl: tokens.length };
    const a = core.route(req)!;
    expect(a).toMatchObject({ workerId: "p2", url: "http://p2.local:30000", overlapBlocks: 64, pd: { decodeWorkerId: "d1", decodeUrl: "http://d1.local:30000", bootstrapPort: 8998 } });
    // d1 now holds a's decode blocks: the next pair decodes on d2.
    const b = core.route(req)!;
    expect(b.pd?.decodeWorkerId).toBe("d2");
    const rows = new Map(core.workers().map((w) => [w.workerId, w]));
    expect(rows.get("d1")!.activeDecodeBlocks).toBe(64);
    expect(rows.get("d2")!.activeDecodeBlocks).toBe(64);
    expect(rows.get("p2")!.activePrefillTokens).toBe(0); // all cached: nothing to prefill
    core.settle({ receiptId: a.receiptId, promptTokens: tokens.length, cachedTokens: 1008, outcome: "ok" });
    core.settle({ receiptId: b.receiptId, promptTokens: tokens.length, cachedTokens: 1008, outcome: "ok" });
    for (const w of core.workers()) expect([w.workerId, w.activeRequests]).toEqual([w.workerId, 0]);
    expect(core.stats().recentReceipts[0]).toMatchObject({ workerId: "p2", decodeWorkerId: "d2" });
    // explain shows both stages.
    expect(core.peek(req)).toMatchObject({ workerId: "p2", decodeWorkerId: "d1" });
  });

  it("prefers a decode worker in the prefill's region, however loaded, over one elsewhere", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5 });
    hello(core, "p-eu", "prefill", "eu");
    hello(core, "d-us", "decode", "us");
    hello(core, "d-eu", "decode", "eu");
    const req = { localHashes: hashes(), isl: tokens.length };
    expect(core.route(req)!.pd?.decodeWorkerId).toBe("d-eu");
    expect(core.route(req)!.pd?.decodeWorkerId).toBe("d-eu"); // loaded, still the near one
    expect(core.route({ ...req, exclude: ["d-eu"] })!.pd?.decodeWorkerId).toBe("d-us");
  });

  it("never takes a decode worker for the prefill pick, and an excluded decode is replaced", () => {
    const core = new RoutingCore({ blockSize: B, random: () => 0.5 });
    hello(core, "p1", "prefill");
    hello(core, "d1", "decode");
    hello(core, "d2", "decode");
    holdPrefix(core, "d1", 64); // a decode that somehow published events: still no prefill pick
    const d = core.route({ localHashes: hashes(), isl: tokens.length, exclude: ["d1"] })!;
    expect(d.workerId).toBe("p1");
    expect(d.candidates.map((c) => c.workerId)).toEqual(["p1"]);
    expect(d.pd?.decodeWorkerId).toBe("d2");
  });

  it("refuses a pool that cannot pair, naming the worker; a unified pool is unchanged", () => {
    const decodeOnly = new RoutingCore({ blockSize: B });
    hello(decodeOnly, "d1", "decode");
    expect(decodeOnly.route({ localHashes: hashes(), isl: tokens.length })).toBeNull();
    expect(pdPoolProblem(decodeOnly.workers())).toMatch(/^decode worker d1 has no prefill peer up/);
    const prefillOnly = new RoutingCore({ blockSize: B });
    hello(prefillOnly, "p1", "prefill");
    expect(prefillOnly.route({ localHashes: hashes(), isl: tokens.length })).toBeNull();
    expect(pdPoolProblem(prefillOnly.workers())).toMatch(/^prefill worker p1 has no decode peer up/);
    const unified = new RoutingCore({ blockSize: B });
    hello(unified, "u1");
    const u = unified.route({ localHashes: hashes(), isl: tokens.length })!;
    expect(u.workerId).toBe("u1");
    expect(u.pd).toBeUndefined();
    expect(pdPoolProblem(unified.workers())).toBeNull();
  });

  it("the TTFT cost adds the prompt's KV transfer to a prefill worker (bytes per token over the link)", () => {
    // 1024 tokens × 147 456 B (Qwen3-VL-8B bf16) over 25 GB/s = 6.04 ms.
    expect(pdTransferMs({ kvBytesPerToken: 147_456, transferGBps: DEFAULT_PD_TRANSFER_GBPS }, 1024)).toBeCloseTo((1024 * 147_456) / 25e6, 9);
    expect(pdTransferMs({ kvBytesPerToken: 147_456, transferGBps: 25 }, 0)).toBe(0);
    const core = new RoutingCore({ blockSize: B, random: () => 0.5, cost: "ttft", pdTransfer: { kvBytesPerToken: 147_456, transferGBps: 0.01 } });
    hello(core, "u1");
    hello(core, "p1", "prefill");
    hello(core, "d1", "decode");
    const p = core.peek({ localHashes: hashes(), isl: tokens.length });
    const cost = new Map(p.candidates.map((c) => [c.workerId, c.cost]));
    expect(cost.get("p1")! - cost.get("u1")!).toBeCloseTo(pdTransferMs({ kvBytesPerToken: 147_456, transferGBps: 0.01 }, tokens.length), 6);
    // Over a slow link the unified worker wins although both hold nothing.
    expect(p.workerId).toBe("u1");
  });
});

describe("the bootstrap fields the edge sends", () => {
  it("appends host, port and an exact 63-bit room to the body", async () => {
    const room = (1n << 62n) + 12345n; // beyond 2^53: must be written exactly
    const out = await (await withBootstrap(new Blob(['{"text":"hi","stream":true}']), { host: "10.0.0.7", port: 8998, room })).text();
    expect(out).toBe(`{"text":"hi","stream":true,"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":${room}}`);
    expect(await (await withBootstrap(new Blob(["{}"]), { host: "h", port: 1, room: 7n })).text()).toBe('{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":7}');
    await expect(withBootstrap(new Blob(["[1]"]), { host: "h", port: 1, room: 7n })).rejects.toThrow();
  });

  it("rooms are non-zero, below 2^63 with headroom for n, and unique among requests in flight", () => {
    const draws = [0n, (1n << 64n) - 1n, 5n, 5n, 6n];
    const next = () => draws.shift()!;
    const a = takeBootstrapRoom(next); // 0 and an all-ones draw (2^63 − 1 once masked: no headroom) are skipped
    expect(a.room).toBe(5n);
    const b = takeBootstrapRoom(next); // 5 is in flight
    expect(b.room).toBe(6n);
    a.release();
    b.release();
    const c = takeBootstrapRoom(() => 5n);
    expect(c.room).toBe(5n);
    c.release();
  });

  it("the bootstrap host is the prefill URL's hostname (IPv6 without brackets)", () => {
    expect(bootstrapHostOf("http://10.1.2.3:30000")).toBe("10.1.2.3");
    expect(bootstrapHostOf("https://[fd00::7]:30000")).toBe("fd00::7");
    expect(bootstrapHostOf("http://prefill-0.pool.svc:30000")).toBe("prefill-0.pool.svc");
  });
});
