import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHash } from "../../../src/blocks/block-hash.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import type { BlockStoredEvent, KvCacheEvent } from "../../../src/engine-events/event-decode.ts";
import { localHashToHex, RelayDumpSchema, RelayEventsSchema } from "../../../src/relay-wire/relay-protocol.ts";
import { WorkerBlockSet } from "../../../services/relay/worker-block-set.ts";
import { initHashing } from "../../../src/util/hash.ts";

const B = 4;
beforeAll(() => initHashing());

const stored = (hashes: bigint[], parent: bigint | null, tokens: number[], blockSize: number | null = B): BlockStoredEvent => ({
  type: "BlockStored",
  blockHashes: hashes,
  parentBlockHash: parent,
  tokenIds: tokens,
  blockSize,
  medium: "GPU",
});
const removed = (hashes: bigint[]): KvCacheEvent => ({ type: "BlockRemoved", blockHashes: hashes, medium: "GPU" });
const seqTokens = (n: number, start = 1): number[] => Array.from({ length: n }, (_, i) => start + i);
const lhex = (tokens: number[]): string => localHashToHex(localBlockHash(tokens));

/** SGLang style: one BlockStored per page, parent = previous page's hash. */
function pageEvents(tokens: number[], parent: bigint | null = null): { events: BlockStoredEvent[]; hashes: bigint[] } {
  const { hashes } = engineBlockHashes(tokens, B);
  const events = hashes.map((h, i) => stored([h], i === 0 ? parent : hashes[i - 1]!, tokens.slice(i * B, (i + 1) * B)));
  return { events, hashes };
}

describe("WorkerBlockSet", () => {
  it("applies per-page stored chains and recomputes local hashes", () => {
    const set = new WorkerBlockSet(B);
    const toks = seqTokens(12);
    const { events, hashes } = pageEvents(toks);
    const out = set.apply(events);
    expect(set.size).toBe(3);
    expect(out.stored).toBe(3);
    expect(out.dropped).toEqual([]);
    expect(set.get(hashes[1]!)).toEqual({ parent: hashes[0], localHash: localBlockHash(toks.slice(4, 8)), tokensLength: 4 });
    expect(out.events).toEqual([
      { t: "stored", parent: null, blocks: [{ h: hashes[0]!.toString(), l: lhex(toks.slice(0, 4)) }] },
      { t: "stored", parent: hashes[0]!.toString(), blocks: [{ h: hashes[1]!.toString(), l: lhex(toks.slice(4, 8)) }] },
      { t: "stored", parent: hashes[1]!.toString(), blocks: [{ h: hashes[2]!.toString(), l: lhex(toks.slice(8, 12)) }] },
    ]);
    expect(RelayEventsSchema.safeParse({ type: "events", epoch: 1, seq: 0, events: out.events }).success).toBe(true);
    expect(set.needsResync).toBe(false);
  });

  it("applies a multi-block stored event as one chain", () => {
    const set = new WorkerBlockSet(B);
    const out = set.apply([stored([10n, 11n, 12n], null, seqTokens(12))]);
    expect(out.events).toEqual([
      {
        t: "stored",
        parent: null,
        blocks: [
          { h: "10", l: lhex(seqTokens(4)) },
          { h: "11", l: lhex(seqTokens(4, 5)) },
          { h: "12", l: lhex(seqTokens(4, 9)) },
        ],
      },
    ]);
    expect(set.get(12n)!.parent).toBe(11n);
  });

  it("stops at the first block whose token count differs from the block size", () => {
    const set = new WorkerBlockSet(B);
    const out = set.apply([stored([1n, 2n, 3n], null, seqTokens(10))]); // 4 + 4 + 2
    expect(set.size).toBe(2);
    expect(set.has(3n)).toBe(false);
    expect(out.dropped).toMatchObject([{ reason: "wrong_block_size", count: 1 }]);
    const declared = set.apply([stored([9n], null, seqTokens(8), 8)]);
    expect(set.has(9n)).toBe(false);
    expect(declared.dropped).toMatchObject([{ reason: "wrong_block_size" }]);
    expect(declared.events).toEqual([]);
  });

  it("drops self-referencing and duplicate-hash events whole", () => {
    const set = new WorkerBlockSet(B);
    set.apply([stored([1n], null, seqTokens(4))]);
    const self = set.apply([stored([1n], 1n, seqTokens(4))]);
    expect(self.dropped).toMatchObject([{ reason: "self_parent" }]);
    const dup = set.apply([stored([2n, 3n, 2n], 1n, seqTokens(12))]);
    expect(dup.dropped).toMatchObject([{ reason: "duplicate_in_event" }]);
    expect(set.size).toBe(1);
    expect(self.events.concat(dup.events)).toEqual([]);
  });

  it("drops blocks with an unknown parent and flags needsResync", () => {
    const set = new WorkerBlockSet(B);
    const out = set.apply([stored([5n], 999n, seqTokens(4))]);
    expect(out.dropped).toMatchObject([{ reason: "unknown_parent" }]);
    expect(set.size).toBe(0);
    expect(set.needsResync).toBe(true);
    set.apply([{ type: "AllBlocksCleared" }]);
    expect(set.needsResync).toBe(false);
  });

  it("treats a re-announced block as a no-op and continues the chain from it", () => {
    const set = new WorkerBlockSet(B);
    set.apply([stored([1n], null, seqTokens(4))]);
    const out = set.apply([stored([1n, 2n], null, seqTokens(8))]);
    expect(out.events).toEqual([{ t: "stored", parent: "1", blocks: [{ h: "2", l: lhex(seqTokens(4, 5)) }] }]);
    expect(set.size).toBe(2);
  });

  it("re-parenting a held block removes its old placement as a move, not an eviction", () => {
    const set = new WorkerBlockSet(B);
    set.apply([stored([1n, 2n], null, seqTokens(8))]);
    const out = set.apply([stored([3n, 2n], null, seqTokens(8, 50))]);
    expect(out.events).toEqual([
      { t: "stored", parent: null, blocks: [{ h: "3", l: lhex(seqTokens(4, 50)) }] },
      { t: "removed", hashes: ["2"], moved: true },
      { t: "stored", parent: "3", blocks: [{ h: "2", l: lhex(seqTokens(4, 54)) }] },
    ]);
    // The engine's own removal is not a move.
    expect(set.apply([removed([2n])]).events).toEqual([{ t: "removed", hashes: ["2"] }]);
  });

  it("removes blocks and, robustly, everything below them", () => {
    const set = new WorkerBlockSet(B);
    const a = pageEvents(seqTokens(12));
    const b = pageEvents(seqTokens(8, 100), a.hashes[0]!); // branch under the first block
    set.apply([...a.events, ...b.events]);
    expect(set.size).toBe(5);
    // Leaf removal (what SGLang does).
    const leaf = set.apply([removed([a.hashes[2]!])]);
    expect(leaf.events).toEqual([{ t: "removed", hashes: [a.hashes[2]!.toString()] }]);
    // Removing an inner block takes its descendants too and lists all of them.
    const inner = set.apply([removed([a.hashes[0]!, 12345n])]);
    expect(set.size).toBe(0);
    expect(inner.removed).toBe(4);
    expect(new Set((inner.events[0] as { hashes: string[] }).hashes)).toEqual(
      new Set([a.hashes[0]!, a.hashes[1]!, ...b.hashes].map(String)),
    );
    expect(inner.dropped).toMatchObject([{ reason: "unknown_removed", count: 1 }]);
  });

  it("does not count a node's own later pages as unknown when the first one took them along", () => {
    const set = new WorkerBlockSet(B);
    const a = pageEvents(seqTokens(12));
    set.apply(a.events);
    const out = set.apply([removed(a.hashes)]); // one node's pages, root-first, as SGLang sends them
    expect(set.size).toBe(0);
    expect(out.dropped).toEqual([]);
    expect(out.events).toEqual([{ t: "removed", hashes: a.hashes.map(String) }]);
  });

  it("clears everything", () => {
    const set = new WorkerBlockSet(B);
    set.apply(pageEvents(seqTokens(8)).events);
    const out = set.apply([{ type: "AllBlocksCleared" }]);
    expect(set.size).toBe(0);
    expect(out.events).toEqual([{ t: "cleared" }]);
  });

  it("dumps parents before children in the protocol shape", () => {
    const set = new WorkerBlockSet(B);
    const a = pageEvents(seqTokens(16));
    const b = pageEvents(seqTokens(8, 50), a.hashes[1]!);
    const c = pageEvents(seqTokens(4, 90));
    // Interleave so insertion order alone would not be enough after a re-store.
    set.apply([...a.events, ...c.events, ...b.events]);
    set.apply([removed([a.hashes[3]!])]);
    set.apply([a.events[3]!]);
    const dump = set.dump(7, 42);
    expect(RelayDumpSchema.safeParse(dump).success).toBe(true);
    expect(dump.blocks).toHaveLength(set.size);
    const seen = new Set<string>();
    for (const blk of dump.blocks) {
      if (blk.p !== null) expect(seen.has(blk.p)).toBe(true);
      seen.add(blk.h);
    }
    const first = dump.blocks.find((x) => x.h === a.hashes[0]!.toString())!;
    expect(first).toEqual({ h: a.hashes[0]!.toString(), p: null, l: lhex(seqTokens(4)) });
    expect(dump).toMatchObject({ type: "dump", epoch: 7, seq: 42 });
  });

  it("keeps the forest invariant under random event sequences (property)", () => {
    // After any sequence of stored/removed/cleared events: every block's parent is held, and the
    // dump lists each block exactly once, parents first.
    const op = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          k: fc.constant("store" as const),
          h: fc.integer({ min: 0, max: 40 }),
          p: fc.integer({ min: -15, max: 40 }), // < 0: a root
          tok: fc.nat(1000),
        }),
      },
      { weight: 3, arbitrary: fc.record({ k: fc.constant("remove" as const), h: fc.integer({ min: 0, max: 40 }) }) },
      { weight: 1, arbitrary: fc.record({ k: fc.constant("clear" as const) }) },
    );
    fc.assert(
      fc.property(fc.array(op, { minLength: 20, maxLength: 300, size: "max" }), (ops) => {
        const set = new WorkerBlockSet(1);
        for (const o of ops) {
          if (o.k === "store") set.apply([stored([BigInt(o.h)], o.p < 0 ? null : BigInt(o.p), [o.tok], 1)]);
          else if (o.k === "remove") set.apply([removed([BigInt(o.h)])]);
          else set.apply([{ type: "AllBlocksCleared" }]);
          const dump = set.dumpBlocks();
          expect(dump).toHaveLength(set.size);
          const seen = new Set<string>();
          for (const blk of dump) {
            if (blk.p !== null) expect(seen.has(blk.p)).toBe(true);
            expect(seen.has(blk.h)).toBe(false);
            seen.add(blk.h);
            expect(set.get(BigInt(blk.h))!.parent?.toString() ?? null).toBe(blk.p);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});
