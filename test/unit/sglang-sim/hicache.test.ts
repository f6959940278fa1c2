/**
 * The simulator's HiCache mode (services/sglang-sim/hicache.ts) end to end in one process: its GPU
 * radix cache and host tier publish SGLang's events with the medium, the relay's tiered block set
 * reads them from the wire bytes, and the index credits the host tier after a GPU eviction.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { initHashing } from "../../../src/util/hash.ts";
import { PagedRadixCache, type KvEvent } from "../../../services/sglang-sim/radix-cache.ts";
import { HostTier } from "../../../services/sglang-sim/hicache.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import { decodeKvEventBatch } from "../../../src/engine-events/event-decode.ts";
import { TieredBlockSet } from "../../../services/relay/tiered-block-set.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";

beforeAll(() => initHashing());

const P = 16;
const prompt = (seed: number, n = 20 * P) => Array.from({ length: n }, (_, i) => ((seed * 7919 + i * 31) % 40_000) + 1);

function rig(capacityTokens: number, hostTokens: number) {
  const events: KvEvent[] = [];
  const host = new HostTier({ pageSize: P, capacityTokens: hostTokens, kvBytesPerToken: 147_456, loadGBps: 37 }, (e) => events.push(e));
  const cache = new PagedRadixCache(P, host.observe);
  const relay = new TieredBlockSet(P);
  const core = new RoutingCore({ blockSize: P });
  core.hello({ type: "hello", workerId: "w", url: "http://w", blockSize: P, epoch: 1, modelName: "m", contract: null, kvEvents: true }, "w");
  core.applyDump("w", { type: "dump", epoch: 1, seq: 0, blocks: [] });
  let seq = 0;
  const flush = () => {
    const decoded = decodeKvEventBatch(encodeEventBatch(1, events.splice(0), 0));
    expect(decoded.dropped).toEqual([]);
    const out = relay.apply(decoded.events);
    expect(out.dropped).toEqual([]);
    expect(core.applyEvents("w", { type: "events", epoch: 1, seq: ++seq, events: out.events })).toEqual({ ok: true });
  };
  const store = (tokens: number[]) => {
    cache.insert(tokens);
    if (cache.totalTokens > capacityTokens) cache.evict(cache.totalTokens - capacityTokens);
    flush();
  };
  return { events, host, cache, relay, core, flush, store };
}

describe("simulator HiCache → relay → index", () => {
  it("write-through, GPU eviction keeping the host copy, host LRU eviction: every tier as SGLang reports it", () => {
    const r = rig(3 * 20 * P, 6 * 20 * P);
    r.store(prompt(1));
    expect(r.relay.gpu.size).toBe(20);
    expect(r.relay.host.size).toBe(20);
    for (let s = 2; s <= 5; s++) r.store(prompt(s)); // conversation 1 leaves the 3-prompt GPU tier
    expect(r.cache.matchPrefix(prompt(1)).length).toBe(0);
    const p = r.core.peek({ localHashes: localBlockHashes(prompt(1), P), isl: 20 * P });
    expect(p).toMatchObject({ workerId: "w", overlapBlocks: 20, hostBlocks: 20 });
    // The simulator loads it back: 20 pages from host memory.
    expect(r.host.lookup(prompt(1), null, 0, 20 * P)).toEqual({ hostTokens: 20 * P, storageTokens: 0 });
    for (let s = 6; s <= 9; s++) r.store(prompt(s)); // host memory (6 prompts) overflows: LRU host-only pages go
    expect(r.host.has(0n)).toBe(false);
    expect(r.relay.host.size).toBe(r.host.size);
    expect(r.core.peek({ localHashes: localBlockHashes(prompt(2), P), isl: 20 * P })).toMatchObject({ overlapBlocks: 0, hostBlocks: 0 });
  });
});
