import { beforeAll, describe, expect, it } from "vitest";
import { parseRegionsVar, regionFromColo, resolveEdgeRegion, rttMs, RegionsConfigSchema } from "../../../src/selection/regions.ts";
import { estimateTtft } from "../../../src/selection/ttft-cost.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex, RelayHelloSchema } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const B = 16;
/** Three regions; the edge is in Frankfurt (eu). */
const CONFIG = RegionsConfigSchema.parse({
  colos: { FRA: "eu", IAD: "us", NRT: "ap" },
  rttMs: { eu: { eu: 2, us: 80, ap: 160 }, us: { us: 2, ap: 150 }, ap: { ap: 2 } },
  defaultPrefillTokensPerSec: 10_000,
  decodeMsPerBlock: 0.01,
});

function pool(cost?: "ttft" | "blocks") {
  // A still clock: a worker's queued prefill drains with time (load-tracker.ts), and these figures are at one instant.
  const core = new RoutingCore({ blockSize: B, random: () => 0.99, now: () => 0, regions: CONFIG, ...(cost ? { cost } : {}) });
  for (const [id, region] of [["eu-1", "eu"], ["us-1", "us"], ["ap-1", "ap"]] as const) {
    const hello = RelayHelloSchema.parse({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", region, prefillTokensPerSec: 10_000 });
    expect(core.hello(hello, id).ok).toBe(true);
    core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
  }
  return core;
}

function cache(core: RoutingCore, id: string, hashes: bigint[]) {
  const blocks = hashes.map((l, i) => ({ h: String(1 + i), p: i === 0 ? null : String(i), l: localHashToHex(l) }));
  expect(core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks }).ok).toBe(true);
}

const tokens = (n: number, base = 1) => Array.from({ length: n }, (_, i) => base + i);
const costOf = (d: { candidates: { workerId: string; cost: number }[] }, id: string) => d.candidates.find((c) => c.workerId === id)!.cost;

describe("region config", () => {
  it("resolves the edge's region and a symmetric RTT table", () => {
    expect(resolveEdgeRegion(CONFIG, "FRA")).toBe("eu");
    expect(resolveEdgeRegion(CONFIG, "XXX")).toBeNull();
    expect(resolveEdgeRegion({ ...CONFIG, self: "us" }, "FRA")).toBe("us");
    expect(rttMs(CONFIG, "ap", "eu")).toBe(160);
    expect(rttMs(CONFIG, "eu", "ap")).toBe(160);
    expect(rttMs(CONFIG, "eu", null)).toBe(150);
    expect(rttMs(CONFIG, "sa", "sa")).toBe(0);
    expect(parseRegionsVar(undefined)).toBeNull();
    expect(parseRegionsVar(JSON.stringify({ self: "eu" }))!.defaultRttMs).toBe(150);
    expect(() => parseRegionsVar("{")).toThrow(/not valid JSON/);
    expect(() => parseRegionsVar(JSON.stringify({ rttMs: { eu: { us: -1 } } }))).toThrow(/KVEDGE_REGIONS/);
  });

  it.each([
    [{ colos: { FRA: "eu" } }, true],
    [{ self: "us", colos: { FRA: "eu" } }, false],
    [{ self: "us" }, false],
    [{ rttMs: { eu: { us: 90 } } }, false],
  ])("regionFromColo(%j) is %s: exactly then the colo decides the edge's region", (raw, readsColo) => {
    const cfg = RegionsConfigSchema.parse(raw);
    expect(regionFromColo(cfg)).toBe(readsColo);
    const byColo = ["FRA", "XXX", null].map((colo) => resolveEdgeRegion(cfg, colo));
    expect(new Set(byColo).size > 1).toBe(readsColo);
  });

  it("adds optional region fields to the relay hello without breaking old hellos", () => {
    const old = RelayHelloSchema.parse({ type: "hello", workerId: "a", url: "http://a", blockSize: 16, epoch: 1, modelName: "m" });
    expect(old.region).toBeUndefined();
    expect(() => RelayHelloSchema.parse({ ...old, region: "not a region!" })).toThrow();
  });
});

describe("region-aware selection (edge in eu; RTT eu 2 ms, us 80 ms, ap 160 ms; 10 000 prefill tok/s)", () => {
  it("sends a cold request to the nearest region", () => {
    const core = pool();
    const h = localBlockHashes(tokens(2000), B); // 125 blocks
    const d = core.route({ localHashes: h, isl: 2000, edgeRegion: "eu" })!;
    // eu: 2 + 2000/10k s (200 ms) + 0.01·125 = 203.25 ms; us: 80 + 200 + 1.25 = 281.25; ap: 361.25.
    expect(d.workerId).toBe("eu-1");
    expect(costOf(d, "eu-1")).toBeCloseTo(203.25, 6);
    expect(costOf(d, "us-1")).toBeCloseTo(281.25, 6);
    expect(costOf(d, "ap-1")).toBeCloseTo(361.25, 6);
  });

  it("lets a long cached prefix pull the request to a farther region when that is faster", () => {
    const core = pool();
    const t = tokens(32_000); // 2000 blocks
    const h = localBlockHashes(t, B);
    cache(core, "ap-1", h.slice(0, 1937)); // 30 992 tokens cached in ap
    const d = core.route({ localHashes: h, isl: 32_000, edgeRegion: "eu" })!;
    // eu: 2 + 3200 ms prefill + 20 = 3222 ms. ap: 160 + (32000 − 30992)/10k s = 100.8 ms + 20 = 280.8 ms.
    expect(d.workerId).toBe("ap-1");
    expect(d.overlapBlocks).toBe(1937);
    expect(costOf(d, "ap-1")).toBeCloseTo(280.8, 6);
    expect(costOf(d, "eu-1")).toBeCloseTo(3222, 6);
  });

  it("keeps a short cached prefix local when the saved prefill is less than the extra round trip", () => {
    const core = pool();
    const h = localBlockHashes(tokens(2000), B);
    cache(core, "ap-1", h.slice(0, 31)); // 496 tokens: saves 49.6 ms, costs 158 ms more RTT
    const d = core.route({ localHashes: h, isl: 2000, edgeRegion: "eu" })!;
    expect(d.workerId).toBe("eu-1");
    expect(costOf(d, "ap-1")).toBeCloseTo(160 + 150.4 + 1.25, 6);
    expect(costOf(d, "eu-1")).toBeCloseTo(203.25, 6);
    // Break-even: ap wins once 160 + (2000 − 16k)/10 + 1.25 < 203.25, i.e. k > 98.75 blocks.
    for (const [k, want] of [[99, "ap-1"], [98, "eu-1"]] as const) {
      const fresh = pool();
      cache(fresh, "ap-1", h.slice(0, k));
      expect(fresh.peek({ localHashes: h, isl: 2000, edgeRegion: "eu" }).workerId).toBe(want);
    }
  });

  it("skips a busy or unhealthy nearest region", () => {
    const core = pool();
    const a = localBlockHashes(tokens(1000, 5_000_000), B);
    // Load eu with an uncached 1000-token prefill: eu is now 100 ms behind.
    const first = core.route({ localHashes: a, isl: 1000, edgeRegion: "eu" })!;
    expect(first.workerId).toBe("eu-1");
    const h = localBlockHashes(tokens(2000), B);
    const d = core.route({ localHashes: h, isl: 2000, edgeRegion: "eu" })!;
    // eu: 2 + 100 (queue) + 200 + 0.01·(63 + 125) = 303.88 ms > us: 281.25 ms.
    expect(costOf(d, "eu-1")).toBeCloseTo(303.88, 6);
    expect(d.workerId).toBe("us-1");
    core.setStatus("us-1", "down");
    core.settle({ receiptId: first.receiptId, promptTokens: 1000, cachedTokens: 0, outcome: "ok" });
    core.settle({ receiptId: d.receiptId, promptTokens: 2000, cachedTokens: 0, outcome: "ok" });
    core.setStatus("eu-1", "down");
    // With eu and us down the nearest healthy region is ap.
    expect(core.peek({ localHashes: h, isl: 2000, edgeRegion: "eu" }).workerId).toBe("ap-1");
  });

  it("uses the worker's prefill rate: a fast far worker beats a slow near one for a big cold prefill", () => {
    const cfg = CONFIG;
    const cold = { slot: 0, overlapBlocks: 0, activePrefillTokens: 0, activeDecodeBlocks: 0 };
    const near = estimateTtft(cfg, cold, { rttMs: rttMs(cfg, "eu", "eu"), prefillTokensPerSec: 2_000 }, 8000, B);
    const far = estimateTtft(cfg, cold, { rttMs: rttMs(cfg, "eu", "us"), prefillTokensPerSec: 12_000 }, 8000, B);
    expect(near.totalMs).toBeCloseTo(2 + 4000 + 5, 6);
    expect(far.totalMs).toBeCloseTo(80 + 666.6666666 + 5, 5);
    expect(far.totalMs).toBeLessThan(near.totalMs);
  });

  it("finds the edge's region from its colo (request.cf.colo)", () => {
    const core = pool();
    const h = localBlockHashes(tokens(2000), B);
    expect(core.peek({ localHashes: h, isl: 2000, edgeColo: "NRT" }).workerId).toBe("ap-1");
    expect(core.peek({ localHashes: h, isl: 2000, edgeColo: "IAD" }).workerId).toBe("us-1");
    // An explicit region wins over the colo.
    expect(core.peek({ localHashes: h, isl: 2000, edgeColo: "IAD", edgeRegion: "eu" }).workerId).toBe("eu-1");
  });

  it("cost \"blocks\" scores by Dynamo's block cost while the edge's region is unknown", () => {
    const core = pool("blocks");
    const h = localBlockHashes(tokens(2000), B);
    cache(core, "ap-1", h.slice(0, 31));
    const d = core.route({ localHashes: h, isl: 2000 })!;
    // max(0, 125 − 31) + 0 + 125 = 219 for ap vs 250 elsewhere: the overlap wins.
    expect(d.workerId).toBe("ap-1");
    expect(costOf(d, "ap-1")).toBe(219);
  });

  it("cost \"ttft\" (the default) counts no round trip while the edge's region is unknown, with the table's tunables", () => {
    const core = pool();
    const h = localBlockHashes(tokens(2000), B);
    cache(core, "ap-1", h.slice(0, 31));
    const d = core.route({ localHashes: h, isl: 2000 })!;
    // ap: (2000 − 496) tokens at 10k/s = 150.4 ms + 0.01 × 125; the others 200 ms + 1.25, no RTT.
    expect(d.workerId).toBe("ap-1");
    expect(costOf(d, "ap-1")).toBeCloseTo(151.65, 6);
    expect(costOf(d, "eu-1")).toBeCloseTo(201.25, 6);
  });
});

describe("cost \"ttft\" without regions (the deployed default): estimated TTFT with no round trip", () => {
  function local(cost: "ttft" | "blocks") {
    const core = new RoutingCore({ blockSize: B, random: () => 0.99, cost });
    for (const [id, rate] of [["a", 10_000], ["b", 10_000], ["slow", 2_500]] as const) {
      const hello = RelayHelloSchema.parse({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", prefillTokensPerSec: rate });
      expect(core.hello(hello, id).ok).toBe(true);
      core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
    }
    return core;
  }

  it("costs are milliseconds of queued + uncached prefill at each worker's rate, plus decode interference", () => {
    const core = local("ttft");
    const h = localBlockHashes(tokens(2000), B); // 125 blocks
    cache(core, "b", h.slice(0, 100));
    const d = core.peek({ localHashes: h, isl: 2000 });
    // a: 2000 tokens at 10k/s = 200 ms + 125 blocks × 0.01; b: 400 uncached → 40 ms + 1.25; slow: 800 ms + 1.25.
    expect(costOf(d, "a")).toBeCloseTo(201.25, 6);
    expect(costOf(d, "b")).toBeCloseTo(41.25, 6);
    expect(costOf(d, "slow")).toBeCloseTo(801.25, 6);
    expect(d.workerId).toBe("b");
  });

  it("a cached prefix wins until the worker's queue costs more than the prefill it saves", () => {
    const h = localBlockHashes(tokens(2000), B);
    for (const [queued, expected] of [[1000, "b"], [2500, "a"]] as const) {
      const core = local("ttft");
      cache(core, "b", h.slice(0, 100)); // saves 1 600 tokens = 160 ms on b
      const busy = localBlockHashes(tokens(queued, 90_000), B);
      expect(core.route({ localHashes: busy, isl: queued, exclude: ["a", "slow"] })!.workerId).toBe("b");
      // queue 100 ms < 160 ms saved → stay on b; 250 ms > 160 ms → a.
      expect(core.peek({ localHashes: h, isl: 2000 }).workerId).toBe(expected);
    }
  });
});
