/**
 * DP-attention ranks in the routing index: each rank of a worker is its own target
 * (`<worker>#<rank>`, src/routing-index/rank-target.ts) with its own block view, load, cohort entry
 * and receipts; single-rank workers keep their plain id; incoherent rank claims are refused with a
 * message naming the worker.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex, RelayHelloSchema, type RelayHello } from "../../../src/relay-wire/relay-protocol.ts";
import { parseRankTarget, rankTargetId } from "../../../src/routing-index/rank-target.ts";
import { relayConnectTarget } from "../../../src/routing-index/front-door.ts";
import { withRoutedDpRank } from "../../../src/proxy/routed-rank.ts";
import { bodyOfChunks, generateBodyParts } from "../../../src/proxy/generate-body.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";

beforeAll(() => initHashing());

const tokens = Array.from({ length: 40 }, (_, i) => i + 1);

function rankHello(worker: string, rank: number, dpSize: number, extra: Partial<RelayHello> = {}): RelayHello {
  return RelayHelloSchema.parse({ type: "hello", workerId: worker, url: `http://${worker}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true, dpSize, dpRank: rank, ...extra });
}

/** The hello as the index sees it: on the socket the edge named by the connect's worker and rank. */
function sayHello(core: RoutingCore, msg: RelayHello, rankParam: string | null = String(msg.dpRank ?? 0)) {
  const target = relayConnectTarget(msg.workerId, (msg.dpSize ?? 1) > 1 ? rankParam : null, msg.dpSize ?? 1);
  if (!target.ok) throw new Error(target.message);
  return core.hello(msg, target.targetId);
}

function storeChain(core: RoutingCore, target: string, toks: number[]) {
  const locals = localBlockHashes(toks, 4);
  const blocks = locals.map((l, i) => ({ h: String(1000 + i), p: i === 0 ? null : String(999 + i), l: localHashToHex(l) }));
  const r = core.applyDump(target, { type: "dump", epoch: 1, seq: 0, blocks });
  expect(r.ok).toBe(true);
}

describe("rank targets", () => {
  it("name a rank of a DP worker, and nothing else for a single-rank worker", () => {
    expect(rankTargetId("w1", 0, 1)).toBe("w1");
    expect(rankTargetId("w1", 1, 2)).toBe("w1#1");
    expect(parseRankTarget("w1#1")).toEqual({ workerId: "w1", rank: 1 });
    expect(parseRankTarget("w1")).toEqual({ workerId: "w1", rank: null });
    expect(relayConnectTarget("w1", null, 1)).toEqual({ ok: true, targetId: "w1" });
    expect(relayConnectTarget("w1", "3", 4)).toEqual({ ok: true, targetId: "w1#3" });
    expect(relayConnectTarget("w1", "-1", 4).ok).toBe(false);
    expect(relayConnectTarget("w1", "1e3", 4).ok).toBe(false);
    // The key's DP size bounds the unsigned rank: none for a single-rank key, below it otherwise.
    expect(relayConnectTarget("w1", "0", 1)).toMatchObject({ ok: false, code: "rank_not_granted" });
    expect(relayConnectTarget("w1", "4", 4)).toMatchObject({ ok: false, code: "rank_not_granted" });
  });
});

describe("the index with DP ranks", () => {
  it("keys blocks by (worker, rank): a repeat goes to the rank that holds it, and its receipt names that rank", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    for (const w of ["w1", "w2"]) for (const r of [0, 1]) expect(sayHello(core, rankHello(w, r, 2)).ok).toBe(true);
    expect(core.cohort()).toBeDefined();
    storeChain(core, "w2#1", tokens);
    storeChain(core, "w1#0", tokens.slice(0, 8));
    const d = core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!;
    expect(d.workerId).toBe("w2#1");
    expect(d.url).toBe("http://w2");
    expect(d.overlapBlocks).toBe(10);
    const { receipt } = core.settle({ receiptId: d.receiptId, promptTokens: 40, cachedTokens: 40, outcome: "ok" });
    expect(receipt).toMatchObject({ workerId: "w2#1", actualCachedTokens: 40 });
  });

  it("counts load per rank: a second rank of the same worker takes new work while the first is busy", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    for (const r of [0, 1]) sayHello(core, rankHello("w1", r, 2));
    const other = Array.from({ length: 400 }, (_, i) => 10_000 + i);
    const a = core.route({ localHashes: localBlockHashes(other, 4), isl: 400 })!;
    const b = core.route({ localHashes: localBlockHashes(other.map((t) => t + 5000), 4), isl: 400 })!;
    expect(new Set([a.workerId, b.workerId])).toEqual(new Set(["w1#0", "w1#1"]));
  });

  it("keeps every rank of an unreachable worker away (they share its URL)", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    for (const w of ["w1", "w2"]) for (const r of [0, 1]) sayHello(core, rankHello(w, r, 2));
    storeChain(core, "w1#1", tokens);
    expect(core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!.workerId).toBe("w1#1");
    core.quarantine("w1#0");
    for (let i = 0; i < 4; i++) expect(core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!.workerId).toMatch(/^w2#/);
  });

  it("keeps a single-rank worker's plain id beside DP workers", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(sayHello(core, RelayHelloSchema.parse({ type: "hello", workerId: "solo", url: "http://solo", blockSize: 4, epoch: 1, modelName: "m", contract: null })).ok).toBe(true);
    expect(core.worker("solo")?.workerId).toBe("solo");
  });

  it("refuses a rank outside the dp size, naming the worker", () => {
    const core = new RoutingCore({ blockSize: 4 });
    const r = core.hello(rankHello("w1", 2, 2), "w1#2");
    expect(r).toMatchObject({ ok: false, reason: expect.stringContaining("worker w1: dp rank 2 is outside its dp size 2") });
  });

  it("refuses ranks that disagree on block size or dp size, naming the worker and rank", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(sayHello(core, rankHello("w1", 0, 2)).ok).toBe(true);
    expect(sayHello(core, rankHello("w1", 1, 2, { blockSize: 8 }))).toMatchObject({ ok: false, reason: "worker w1 rank 1: block size 8 differs from the pool's 4" });
    expect(sayHello(core, rankHello("w1", 2, 4))).toMatchObject({ ok: false, reason: expect.stringContaining("worker w1: w1#2 says dp size 4 but w1#0 said 2") });
    // Once the old life's ranks are down (the worker restarted with another dp size), the new one is taken.
    core.setStatus("w1#0", "down");
    expect(sayHello(core, rankHello("w1", 2, 4)).ok).toBe(true);
  });

  it("removing a DP worker removes every rank target; removing one rank target leaves the others", () => {
    const core = new RoutingCore({ blockSize: 4, random: () => 0.5 });
    for (const w of ["w1", "w2", "w10"]) for (const r of [0, 1]) sayHello(core, rankHello(w, r, 2));
    storeChain(core, "w1#0", tokens);
    expect(core.removeWorker("w2#1")).toEqual(["w2#1"]);
    expect(core.removeWorker("w1")).toEqual(["w1#0", "w1#1"]);
    expect(core.workers().map((w) => w.workerId).sort()).toEqual(["w10#0", "w10#1", "w2#0"]);
    // The removed rank's blocks no longer draw the prefix.
    expect(core.route({ localHashes: localBlockHashes(tokens, 4), isl: 40 })!.overlapBlocks).toBe(0);
    expect(core.removeWorker("w1")).toEqual([]);
  });

  it("refuses a hello whose rank is not the one its connect named", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(sayHello(core, rankHello("w1", 1, 2), "0")).toMatchObject({ ok: false, reason: "worker id does not match the authenticated worker" });
  });
});

describe("routed_dp_rank on /generate", () => {
  it("goes in as the body's first key without re-encoding the prompt", async () => {
    const body = bodyOfChunks(generateBodyParts({ text: "hi \"there\"", rid: "r1", sampling_params: { max_new_tokens: 4 } } as never));
    const ranked = JSON.parse(await withRoutedDpRank(body, 1).text()) as Record<string, unknown>;
    expect(ranked).toEqual({ routed_dp_rank: 1, ...(JSON.parse(await body.text()) as object) });
    expect(() => withRoutedDpRank(body, -1)).toThrow(RangeError);
  });

  it("is the edge's alone: a client's rank fields are refused, naming them", () => {
    for (const field of ["routed_dp_rank", "data_parallel_rank", "disagg_prefill_dp_rank"]) {
      const text = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], [field]: 1 });
      expect(() => parseChatRequest(text), field).toThrow(expect.objectContaining({ type: "invalid_request_error", code: "unsupported_parameter", param: field }));
    }
  });
});
