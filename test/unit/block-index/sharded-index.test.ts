import { beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { ShardedIndex } from "../../../src/block-index/sharded-index.ts";
import { ChainRootRouter, canonicalEngineHash, shardOf, shardOfHex } from "../../../src/relay-wire/chain-shards.ts";
import { splitRelayEvents } from "../../../src/relay-wire/split-events.ts";
import { RadixIndex, type WireBlock, type WireDumpBlock } from "../../../src/block-index/radix-index.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex, type RelayEvent } from "../../../src/relay-wire/relay-protocol.ts";
import { WorkerBlockSet } from "../../../services/relay/worker-block-set.ts";
import { PagedRadixCache, type KvEvent } from "../../../services/sglang-sim/radix-cache.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { mulberry32 } from "../support/tokenizer-fuzz.ts";

beforeAll(() => initHashing());


function randomHash(r: () => number): bigint {
  return (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32));
}

describe("shardOf", () => {
  it("is stable, in range, and agrees between bigint and wire forms", () => {
    const r = mulberry32(1);
    for (let i = 0; i < 2000; i++) {
      const h = randomHash(r);
      for (const n of [1, 2, 3, 4, 8, 16, 100]) {
        const s = shardOf(h, n);
        expect(s).toBeGreaterThanOrEqual(0);
        expect(s).toBeLessThan(n);
        expect(shardOfHex(localHashToHex(h), n)).toBe(s);
        expect(shardOf(h, n)).toBe(s);
      }
    }
    expect(() => shardOf(1n, 0)).toThrow(RangeError);
  });

  it("spreads chains evenly and moves only ~1/(N+1) of them, all to the new shard, when growing", () => {
    const r = mulberry32(2);
    const keys = Array.from({ length: 40_000 }, () => randomHash(r));
    for (const n of [2, 4, 8]) {
      const counts = new Array<number>(n).fill(0);
      for (const k of keys) counts[shardOf(k, n)]!++;
      for (const c of counts) expect(Math.abs(c - keys.length / n) / (keys.length / n)).toBeLessThan(0.05);
      let moved = 0;
      for (const k of keys) {
        const a = shardOf(k, n);
        const b = shardOf(k, n + 1);
        if (a !== b) {
          expect(b).toBe(n);
          moved++;
        }
      }
      expect(Math.abs(moved / keys.length - 1 / (n + 1))).toBeLessThan(0.01);
    }
  });

  it("canonicalises engine hashes like the index (int64 and uint64 spellings are one block)", () => {
    expect(canonicalEngineHash("18446744073709551615")).toBe("-1");
    expect(canonicalEngineHash("-1")).toBe("-1");
    expect(canonicalEngineHash("007")).toBe("7");
    expect(canonicalEngineHash("-0")).toBe("0");
    expect(canonicalEngineHash("9223372036854775808")).toBe("-9223372036854775808");
  });
});

// ---- random relay traffic: sharded and unsharded indexes must agree on every query ----

interface Op {
  kind: "stored" | "storedRoot" | "removed" | "cleared" | "dump";
  worker: number;
  /** Chain picks: indexes into a small universe so paths, hashes and re-uses collide often. */
  picks: number[];
  alias: boolean;
}

const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom("stored", "stored", "storedRoot", "storedRoot", "removed", "cleared", "dump"),
  worker: fc.integer({ min: 0, max: 3 }),
  picks: fc.array(fc.integer({ min: 0, max: 11 }), { minLength: 1, maxLength: 6 }),
  alias: fc.boolean(),
});

/** Local hashes from a small universe (collisions intended); engine hashes from another. */
const LOCALS = Array.from({ length: 12 }, (_, i) => localHashToHex(BigInt(i + 1) * 0x9e3779b97f4a7c15n & 0xffffffffffffffffn));
const engine = (k: number, alias: boolean) => (alias && k % 3 === 0 ? (2n ** 64n - BigInt(k + 1)).toString() : String(-(k + 1)));

describe("ShardedIndex ≡ RadixIndex", () => {
  it("answers every query identically under random stores, removals, re-used hashes, clears and dumps", () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 1, maxLength: 60 }), fc.constantFrom(2, 3, 4, 8), (ops, shards) => {
        const plain = new RadixIndex();
        const sharded = new ShardedIndex(shards);
        for (let w = 0; w < 4; w++) {
          plain.ensureWorker(w);
          sharded.ensureWorker(w);
        }
        const heldBy: string[][] = [[], [], [], []]; // engine hashes stored per worker (for parents)
        let step = 0;
        for (const op of ops) {
          step++;
          const mk = (j: number): WireBlock => ({ h: engine(op.picks[j]! * 7 + step % 5, op.alias), l: LOCALS[op.picks[(j + 1) % op.picks.length]!]! });
          if (op.kind === "stored" || op.kind === "storedRoot") {
            const held = heldBy[op.worker]!;
            const parent = op.kind === "storedRoot" || held.length === 0 ? null : held[op.picks[0]! % held.length]!;
            const blocks = op.picks.map((_, j) => mk(j));
            const a = plain.applyStoredWire(op.worker, parent, blocks);
            const b = sharded.applyStoredWire(op.worker, parent, blocks);
            expect(b).toEqual(a);
            if (a.ok) held.push(...blocks.map((x) => x.h));
          } else if (op.kind === "removed") {
            const held = heldBy[op.worker]!;
            const hashes = op.picks.map((p) => held[p % Math.max(1, held.length)] ?? engine(p, op.alias));
            expect(sharded.applyRemoved(op.worker, hashes)).toBe(plain.applyRemoved(op.worker, hashes));
          } else if (op.kind === "cleared") {
            plain.clearWorker(op.worker);
            sharded.clearWorker(op.worker);
            heldBy[op.worker] = [];
          } else {
            const rows: WireDumpBlock[] = op.picks.map((_, j) => ({ ...mk(j), p: j === 0 ? null : j % 4 === 3 ? engine(99, false) : mk(j - 1).h }));
            plain.clearWorker(op.worker);
            sharded.clearWorker(op.worker);
            expect(sharded.applyDumpWire(op.worker, rows)).toEqual(plain.applyDumpWire(op.worker, rows));
            heldBy[op.worker] = rows.map((r) => r.h);
          }
          expect(sharded.size).toBe(plain.size);
          for (let w = 0; w < 4; w++) expect(sharded.workerBlockCount(w)).toBe(plain.workerBlockCount(w));
          // Every query over the universe (all 1..3-block paths from 12 locals would be 1 884; sample).
          const sa = new Int32Array(4);
          const sb = new Int32Array(4);
          for (let q = 0; q < 40; q++) {
            const len = 1 + (q % 4);
            const query = Array.from({ length: len }, (_, j) => BigInt("0x" + LOCALS[(q * 5 + j * (q + 1)) % 12]!));
            plain.findMatches(query, sa);
            sharded.findMatches(query, sb);
            expect([...sb]).toEqual([...sa]);
          }
          for (let w = 0; w < 4; w++) expect(sharded.workerLocalHashesHex(w).sort()).toEqual(plain.workerLocalHashesHex(w).sort());
        }
      }),
      { numRuns: 300, seed: 0x5eed },
    );
  });

  it("a chain's blocks all land in the shard of its root", () => {
    const idx = new ShardedIndex(8);
    idx.ensureWorker(0);
    const locals = localBlockHashes(Array.from({ length: 64 }, (_, i) => i + 1), 4);
    const blocks = locals.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) }));
    expect(idx.applyStoredWire(0, null, blocks.slice(0, 5)).ok).toBe(true);
    expect(idx.applyStoredWire(0, "104", blocks.slice(5)).ok).toBe(true);
    const home = shardOf(locals[0]!, 8);
    expect(idx.shardSizes()[home]).toBe(16);
    expect(idx.size).toBe(16);
    expect(idx.applyStoredWire(0, "999", blocks.slice(0, 1))).toEqual({ ok: false, applied: 0, error: "parent_not_found" });
  });
});

describe("splitRelayEvents (relay fan-out)", () => {
  it("a block re-used in another shard's chain leaves its old shard as a move, not an eviction", () => {
    // Two chain roots in different shards of 2.
    const hex = (n: number) => n.toString(16).padStart(16, "0");
    const roots = [1, 2, 3, 4, 5, 6, 7, 8].map(hex);
    const a = roots.find((l) => shardOfHex(l, 2) === 0)!;
    const b = roots.find((l) => shardOfHex(l, 2) === 1)!;
    const router = new ChainRootRouter(2);
    const first = splitRelayEvents(router, [{ t: "stored", parent: null, blocks: [{ h: "1", l: a }, { h: "9", l: hex(99) }] }]);
    expect(first.perShard[1]).toEqual([]);
    const again: RelayEvent = { t: "stored", parent: null, blocks: [{ h: "2", l: b }, { h: "9", l: hex(99) }] };
    const { perShard } = splitRelayEvents(router, [again, { t: "removed", hashes: ["2"] }]);
    expect(perShard[0]).toEqual([{ t: "removed", hashes: ["9"], moved: true }]);
    // The engine's own removal is routed as it came.
    expect(perShard[1]).toEqual([again, { t: "removed", hashes: ["2"] }]);
  });

  it("a relay move that comes in as a removal (a re-parented block) stays a move in its shard", () => {
    const hex = (n: number) => n.toString(16).padStart(16, "0");
    const a = [1, 2, 3, 4, 5, 6, 7, 8].map(hex).find((l) => shardOfHex(l, 2) === 1)!;
    const router = new ChainRootRouter(2);
    splitRelayEvents(router, [{ t: "stored", parent: null, blocks: [{ h: "1", l: a }, { h: "5", l: hex(55) }] }]);
    const { perShard } = splitRelayEvents(router, [{ t: "removed", hashes: ["5"], moved: true }]);
    expect(perShard[1]).toEqual([{ t: "removed", hashes: ["5"], moved: true }]);
    expect(perShard[0]).toEqual([]);
  });

  it("feeds per-shard indexes to the same state as one index", () => {
    const r = mulberry32(3);
    const plain = new RadixIndex();
    plain.ensureWorker(0);
    const shards = [new RadixIndex(), new RadixIndex(), new RadixIndex(), new RadixIndex()];
    for (const s of shards) s.ensureWorker(0);
    const router = new ChainRootRouter(4);
    const set = new WorkerBlockSet(4);
    const cache = new PagedRadixCache(4, (ev) => pending.push(ev));
    let pending: KvEvent[] = [];
    const prefixes = Array.from({ length: 6 }, (_, k) => Array.from({ length: 16 }, (_, i) => 1000 * (k + 1) + i));
    for (let i = 0; i < 400; i++) {
      const tokens = [...prefixes[Math.floor(r() * 6)]!, ...Array.from({ length: Math.floor(r() * 24) }, () => Math.floor(r() * 50))];
      cache.insert(tokens);
      if (cache.totalTokens > 300) cache.evict(cache.totalTokens - 300);
      const out = set.apply(pending.map(toKv));
      pending = [];
      for (const ev of out.events) applyPlain(plain, ev);
      const { perShard, resync } = splitRelayEvents(router, out.events);
      expect(resync).toBe(false);
      perShard.forEach((evs, k) => evs.forEach((ev) => applyPlain(shards[k]!, ev)));
      const q = localBlockHashes(tokens, 4);
      const a = new Int32Array(1);
      const b = new Int32Array(1);
      plain.findMatches(q, a);
      shards[shardOf(q[0]!, 4)]!.findMatches(q, b);
      expect(b[0]).toBe(a[0]);
    }
    expect(shards.reduce((n, s) => n + s.size, 0)).toBe(plain.size);
  });
});

function toKv(ev: KvEvent) {
  return ev.type === "BlockStored"
    ? { type: "BlockStored" as const, blockHashes: [ev.hash], parentBlockHash: ev.parent, tokenIds: ev.tokens, blockSize: ev.blockSize, loraId: null, medium: "GPU" }
    : ev.type === "BlockRemoved"
      ? { type: "BlockRemoved" as const, blockHashes: ev.hashes, medium: "GPU" }
      : { type: "AllBlocksCleared" as const };
}

function applyPlain(idx: RadixIndex, ev: RelayEvent): void {
  if (ev.t === "stored") idx.applyStoredWire(0, ev.parent, ev.blocks);
  else if (ev.t === "removed") idx.applyRemoved(0, ev.hashes);
  else idx.clearWorker(0);
}

// ---- the acceptance test: identical routing decisions on the same seeded trace ----

describe("RoutingCore over a ShardedIndex", () => {
  function replay(shards: number | null, seed: number) {
    let now = 0;
    const B = 4;
    const core = new RoutingCore({ blockSize: B, random: mulberry32(seed), now: () => now, ...(shards ? { index: new ShardedIndex(shards) } : {}) });
    const W = 8;
    const caches: PagedRadixCache[] = [];
    const sets: WorkerBlockSet[] = [];
    const queued: KvEvent[][] = [];
    for (let w = 0; w < W; w++) {
      const id = `w${w}`;
      core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: w !== 7 }, id);
      core.applyDump(id, { type: "dump", epoch: 1, seq: -1, blocks: [] });
      const q: KvEvent[] = [];
      queued.push(q);
      caches.push(new PagedRadixCache(B, (ev) => q.push(ev)));
      sets.push(new WorkerBlockSet(B));
    }
    const r = mulberry32(seed ^ 0xabcdef);
    const systems = Array.from({ length: 12 }, (_, k) => Array.from({ length: 8 + k * 4 }, (_, i) => 10_000 * (k + 1) + i));
    const decisions: string[] = [];
    const open: { receiptId: string; isl: number; cached: number }[] = [];
    let relaySeq = 0;
    for (let i = 0; i < 1500; i++) {
      now += 1 + Math.floor(r() * 40);
      const tokens = [...systems[Math.floor(r() * r() * 12)]!, ...Array.from({ length: Math.floor(r() * 60) }, () => Math.floor(r() * 30))];
      const d = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length })!;
      decisions.push(`${d.workerId}:${d.overlapBlocks}:${d.candidates.map((c) => c.cost).join(",")}`);
      const w = Number(d.workerId.slice(1));
      const cache = caches[w]!;
      const cached = cache.matchPrefix(tokens).length;
      cache.insert(tokens);
      if (cache.totalTokens > 600) cache.evict(cache.totalTokens - 600);
      open.push({ receiptId: d.receiptId, isl: tokens.length, cached });
      // Deliver the events of a random subset of workers (lag), settle some requests.
      for (let v = 0; v < W; v++) {
        if (r() < 0.5 || queued[v]!.length === 0 || v === 7) continue;
        const out = sets[v]!.apply(queued[v]!.splice(0).map(toKv));
        if (out.events.length) expect(core.applyEvents(`w${v}`, { type: "events", epoch: 1, seq: relaySeq++, events: out.events }).ok).toBe(true);
      }
      while (open.length > 6 || (open.length > 0 && r() < 0.3)) {
        const o = open.splice(Math.floor(r() * open.length), 1)[0]!;
        core.settle({ receiptId: o.receiptId, promptTokens: o.isl, cachedTokens: o.cached, outcome: "ok" });
      }
    }
    return { decisions, core };
  }

  it("gives identical decisions to the unsharded index on the same seeded trace (1, 2, 4, 8 shards)", () => {
    for (const seed of [11, 12]) {
      const base = replay(null, seed);
      const hits = base.decisions.filter((d) => !d.split(":")[1]!.startsWith("0")).length;
      expect(hits).toBeGreaterThan(300); // the trace actually exercises overlap
      for (const n of [1, 2, 4, 8]) {
        const { decisions, core } = replay(n, seed);
        expect(decisions).toEqual(base.decisions);
        expect(core.sizes().indexedBlocks).toBe(base.core.sizes().indexedBlocks);
      }
    }
  });
});
