/**
 * KV events as SGLang's own structs encode them (test/fixtures/sglang-kv-events.json, written by
 * scripts/golden/gen_sglang_kv_events.py with msgspec and the struct shapes of SGLang's
 * disaggregation/kv_events.py; hash chains from mem_cache/utils.py, bigram pages from
 * mem_cache/events.py — see the generator's header):
 *  - the relay's decoder reads every case: plain, coalesced, BlockStoredWithMetadata (cache_salt),
 *    EAGLE bigram pairs (mapped to the tokens each page holds) and bigram + salt;
 *  - the simulator encodes the same events to the same bytes and computes the same engine hashes
 *    (salted chains and bigram pages included): the fixture's hashes come from the Python
 *    restatement of SGLang's hashing, not from the simulator's code;
 *  - the relay's block set turns them into the router's local hashes: bigram blocks hash like the
 *    plain tokens they hold (an EAGLE worker is routed like any other), salted blocks only match
 *    requests seeded with their salt.
 */
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { encode } from "@msgpack/msgpack";
import { decodeKvEventBatch, MAX_CACHE_SALT_CHARS, type KvCacheEvent } from "../../../src/engine-events/event-decode.ts";
import { hexToLocalHash, localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { TieredBlockSet } from "../../../services/relay/tiered-block-set.ts";
import { WorkerBlockSet } from "../../../services/relay/worker-block-set.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import { PagedRadixCache, type KvEvent } from "../../../services/sglang-sim/radix-cache.ts";

interface ExpectedEvent {
  type: string;
  blockHashes?: string[];
  parent?: string | null;
  tokenIds?: number[];
  blockSize?: number;
  cacheSalt?: string | null;
  bigram?: boolean;
  medium?: string;
}
interface Case {
  name: string;
  raw: number[];
  pageSize: number;
  payloadHex: string;
  events: ExpectedEvent[];
}
const fixture = JSON.parse(readFileSync(new URL("../../fixtures/sglang-kv-events.json", import.meta.url), "utf8")) as { cases: Case[] };
const byName = (n: string) => fixture.cases.find((c) => c.name === n)!;
const unhex = (h: string) => Uint8Array.from(Buffer.from(h, "hex"));

/** The case's events as decoded; `medium` only where the fixture states it (the tiers case). */
function simplify(e: KvCacheEvent, withMedium = false): ExpectedEvent {
  const m = withMedium && e.type !== "AllBlocksCleared" ? { medium: e.medium } : {};
  if (e.type === "BlockStored")
    return {
      type: e.type,
      blockHashes: e.blockHashes.map(String),
      parent: e.parentBlockHash === null ? null : String(e.parentBlockHash),
      tokenIds: e.tokenIds,
      blockSize: e.blockSize ?? undefined,
      cacheSalt: e.cacheSalt ?? null,
      bigram: e.bigram ?? false,
      ...m,
    };
  if (e.type === "BlockRemoved") return { type: e.type, blockHashes: e.blockHashes.map(String), ...m };
  return { type: e.type };
}

beforeAll(() => initHashing());

describe("SGLang-encoded KV events", () => {
  it("has every case the generator writes", () => {
    expect(fixture.cases.map((c) => c.name)).toEqual(["plain", "plain_coalesced", "salted", "salted_coalesced", "bigram", "bigram_coalesced", "bigram_salted", "hicache_tiers"]);
  });

  for (const c of fixture.cases) {
    it(`decodes ${c.name}`, () => {
      const b = decodeKvEventBatch(unhex(c.payloadHex));
      expect(b.dropped).toEqual([]);
      expect(b.ts).toBe(1767225600.5);
      expect(b.attnDpRank).toBe(0);
      expect(b.events.map((e) => simplify(e, c.name === "hicache_tiers"))).toEqual(c.events);
    });
  }

  it("the simulator publishes the same bytes and engine hashes (salt and EAGLE bigrams included)", () => {
    for (const [name, bigram, salt] of [
      ["plain", false, null],
      ["salted", false, "tenant-a"],
      ["bigram", true, null],
      ["bigram_salted", true, "tenant-b"],
    ] as const) {
      const c = byName(name);
      const events: KvEvent[] = [];
      const cache = new PagedRadixCache(c.pageSize, (e) => events.push(e), { bigram });
      const { alreadyCached } = cache.insert(c.raw, salt);
      expect(alreadyCached).toBe(0);
      const stored = c.events.filter((e) => e.type === "BlockStored");
      expect(events.map((e) => (e.type === "BlockStored" ? String(e.hash) : e.type)), name).toEqual(stored.map((e) => e.blockHashes![0]));
      if (name === "plain") events.push({ type: "BlockRemoved", hashes: [BigInt(stored.at(-1)!.blockHashes![0]!)] }, { type: "AllBlocksCleared" });
      expect(Buffer.from(encodeEventBatch(1767225600.5, events, 0)).toString("hex"), name).toBe(c.payloadHex);
    }
  });

  it("a namespace never shares nodes with another (or none) in the simulator's tree", () => {
    const c = byName("plain");
    const cache = new PagedRadixCache(c.pageSize);
    cache.insert(c.raw, "tenant-a");
    expect(cache.matchPrefix(c.raw, "tenant-a").length).toBe(12);
    expect(cache.matchPrefix(c.raw, "tenant-b").length).toBe(0);
    expect(cache.matchPrefix(c.raw).length).toBe(0);
    const eagle = new PagedRadixCache(c.pageSize, () => {}, { bigram: true });
    eagle.insert(c.raw);
    // 12 tokens → 11 pairs → 2 whole pages; a request diverging at the page's lookahead token misses it.
    expect(eagle.matchPrefix(c.raw).length).toBe(8);
    expect(eagle.matchPrefix([...c.raw.slice(0, 8), 5]).length).toBe(4);
  });

  it("the relay maps them to the router's local hashes: bigram pages like plain ones, salted pages only with their salt", () => {
    const plainLocals = localBlockHashes(byName("plain").raw, 4);
    const localsOf = (name: string) => {
      const set = new WorkerBlockSet(4);
      const out = set.apply(decodeKvEventBatch(unhex(byName(name).payloadHex)).events.filter((e) => e.type === "BlockStored"));
      expect(out.dropped).toEqual([]);
      return out.events.flatMap((e) => (e.t === "stored" ? e.blocks.map((b) => hexToLocalHash(b.l)) : []));
    };
    expect(localsOf("plain")).toEqual(plainLocals.slice(0, 3));
    expect(localsOf("plain_coalesced")).toEqual(plainLocals.slice(0, 3));
    // EAGLE: 12 tokens give 2 full bigram pages, holding tokens 0-3 and 4-7: the same blocks as a plain worker's.
    expect(localsOf("bigram")).toEqual(plainLocals.slice(0, 2));
    expect(localsOf("bigram_coalesced")).toEqual(plainLocals.slice(0, 2));
    const salted = localsOf("salted");
    expect(salted).toEqual(namespacedLocalHashes(localBlockHashes(byName("salted").raw, 4), namespaceTag("tenant-a")).slice(0, 3));
    for (const h of salted) expect(plainLocals).not.toContain(h);
    expect(namespacedLocalHashes(localBlockHashes(byName("salted").raw, 4), namespaceTag("tenant-b"))).not.toContain(salted[0]);
    expect(localsOf("bigram_salted")).toEqual(namespacedLocalHashes(localBlockHashes(byName("plain").raw, 4), namespaceTag("tenant-b")).slice(0, 2));
  });

  it("HiCache tiers: a GPU eviction with a host copy leaves the block in the relay's host tier, tagged on the wire", () => {
    const c = byName("hicache_tiers");
    const locals = localBlockHashes(c.raw, 4).slice(0, 3).map(localHashToHex);
    const events = decodeKvEventBatch(unhex(c.payloadHex)).events;
    const set = new TieredBlockSet(4);
    // Stored on the GPU, backed up to host memory, evicted from the GPU.
    const upToGpuEviction = set.apply(events.slice(0, 7));
    expect(upToGpuEviction.dropped).toEqual([]);
    expect(set.gpu.size).toBe(0);
    expect(set.host.size).toBe(3);
    expect(upToGpuEviction.events.filter((e) => e.t === "stored" && e.tier === "CPU_PINNED").flatMap((e) => (e.t === "stored" ? e.blocks.map((b) => b.l) : []))).toEqual(locals);
    const gpuEviction = upToGpuEviction.events.at(-1)!;
    expect(gpuEviction.t === "removed" && [[...gpuEviction.hashes].sort(), gpuEviction.tier]).toEqual([[...c.events[6]!.blockHashes!].sort(), undefined]);
    expect(set.dumpBlocks().map((r) => [r.l, r.tier])).toEqual(locals.map((l) => [l, "CPU_PINNED"]));
    // Evicted from host memory: gone; DISK and EXTERNAL are counted, not tracked.
    const rest = set.apply(events.slice(7));
    expect(set.size).toBe(0);
    expect(rest.events).toEqual([expect.objectContaining({ t: "removed", tier: "CPU_PINNED" })]);
    expect(rest.dropped.map((d) => [d.reason, d.count])).toEqual([["untracked_medium", 3], ["untracked_medium", 3]]);
  });

  it("refuses bigram pairs that do not chain, mixed token lists and malformed metadata", () => {
    const stored = (tokens: unknown, ...rest: unknown[]) => ["BlockStored", [1], null, tokens, 2, null, "GPU", ...rest];
    const b = decodeKvEventBatch(
      encode(
        [
          0,
          [
            stored([[1, 2], [2, 3]]), // good bigram page
            stored([[1, 2], [5, 6]]), // pairs do not overlap
            stored([[1, 2], 3]), // pair then a plain token
            stored([1, [2, 3]]), // plain token then a pair
            stored([[1, 2, 3], [3, 4]]), // not a pair
            stored([1, 2], "lora-x"), // not a map: another engine's trailing field, ignored
            stored([1, 2], { cache_salt: 7 }), // salt not a string
            stored([1, 2], { cache_salt: "x".repeat(MAX_CACHE_SALT_CHARS + 1) }),
            stored([1, 2], { cache_salt: "ok", other: 1 }), // unknown metadata fields are ignored
          ],
          0,
        ],
        { useBigInt64: true },
      ),
    );
    expect(b.events.map((e) => e.type === "BlockStored" && [e.tokenIds, e.bigram ?? false, e.cacheSalt ?? null])).toEqual([
      [[1, 2], true, null],
      [[1, 2], false, null],
      [[1, 2], false, "ok"],
    ]);
    expect(b.dropped.map((d) => d.reason)).toEqual(["bad_bigram", "bad_bigram", "bad_bigram", "bad_bigram", "bad_event", "bad_event"]);
  });
});
