// The radix index's walk memo (src/block-index/walk-memo.ts) against the same index walking every
// query from the root: seeded traces of growing, forking conversations routed between stores,
// removals, aliases, dumps, cleared and removed workers and a mask widening; every overlap and every
// chain end must be equal.
import { describe, expect, it } from "vitest";
import { chainEndOf, RadixIndex } from "../../../src/block-index/radix-index.ts";
import { WALK_MEMO_BLOCKS, WALK_MEMO_ENTRIES, WalkMemo } from "../../../src/block-index/walk-memo.ts";
import { mulberry32 as rng } from "../support/tokenizer-fuzz.ts";

const hex = (l: bigint) => l.toString(16).padStart(16, "0");

/** Both indexes, fed the same operations; `query` compares their overlaps and chain ends. */
class Pair {
  /** Every walk kept, however short (the traces' conversations are). */
  readonly memo = new RadixIndex({ walkMemoMinBlocks: 1 });
  readonly plain = new RadixIndex({ walkMemo: false });
  readonly other = new RadixIndex();
  readonly scoresA = new Int32Array(96);
  readonly scoresB = new Int32Array(96);
  queries = 0;

  each(fn: (ix: RadixIndex) => unknown): void {
    const a = fn(this.memo);
    const b = fn(this.plain);
    expect(a).toEqual(b);
  }

  query(hashes: bigint[], form: "typed" | "array"): void {
    const q = form === "typed" ? BigUint64Array.from(hashes) : [...hashes];
    this.memo.findMatches(q, this.scoresA);
    // A second tree walks the same array (as the host tier's does in a route): its prefix keys join the first's.
    if (this.queries % 3 === 0) this.other.findMatches(q, this.scoresB);
    // Right after the walk, as a route asks it (from the walk's prefix keys), and for a shorter chain.
    const counts = hashes.length > 0 ? [hashes.length, 1 + (hashes.length >> 2)] : [];
    const ends = counts.map((n) => chainEndOf(q, n));
    this.plain.findMatches(BigUint64Array.from(hashes), this.scoresB);
    expect([...this.scoresA]).toEqual([...this.scoresB]);
    for (const [i, n] of counts.entries()) expect(ends[i]).toEqual(chainEndOf([...hashes], n));
    this.queries++;
  }
}

/** One seeded trace: conversations grow and fork, workers store, evict, alias, clear and leave. */
function runTrace(seed: number, steps: number, slots: number): Pair {
  const random = rng(seed);
  const int = (n: number) => Math.floor(random() * n);
  // A small alphabet now and then: equal local hashes at the same depth on different paths.
  const block = (): bigint => (random() < 0.3 ? BigInt(1 + int(4)) : (BigInt(int(2 ** 30)) << 32n) | BigInt(int(2 ** 30)));
  const systems = [Array.from({ length: 6 }, block), Array.from({ length: 3 }, block)];
  const convs: bigint[][] = [];
  const newConv = () => convs.push([...systems[int(systems.length)]!, ...Array.from({ length: 1 + int(8) }, block)]);
  for (let i = 0; i < 5; i++) newConv();
  const pair = new Pair();
  let engine = 1;
  /** Per slot: conversation index → engine hash of each position it stored (for parents and removals). */
  const held = new Map<number, Map<number, string[]>>();
  const live = new Set<number>();
  const join = (slot: number) => {
    pair.each((ix) => ix.ensureWorker(slot));
    live.add(slot);
    held.set(slot, new Map());
  };
  for (let s = 0; s < Math.min(4, slots); s++) join(s);
  const anyLive = () => [...live][int(live.size)]!;

  for (let step = 0; step < steps; step++) {
    const r = random();
    if (r < 0.3) {
      // A worker stores part of a conversation: the next blocks below what it holds, or from the root (aliases).
      const slot = anyLive();
      const c = int(convs.length);
      const conv = convs[c]!;
      const mine = held.get(slot)!.get(c) ?? [];
      const from = random() < 0.2 ? 0 : Math.min(mine.length, conv.length - 1);
      const to = Math.min(conv.length, from + 1 + int(12));
      const parent = from > 0 ? (mine[from - 1] ?? null) : null;
      if (from > 0 && parent === null) continue;
      const blocks = conv.slice(from, to).map((l) => ({ h: String(engine++), l: hex(l) }));
      pair.each((ix) => ix.applyStoredWire(slot, parent, blocks));
      const next = mine.slice(0, from);
      for (const b of blocks) next.push(b.h);
      held.get(slot)!.set(c, next);
    } else if (r < 0.42) {
      // Evictions: a conversation's tail, or blocks anywhere in it (the index prunes what it can).
      const slot = anyLive();
      const entries = [...held.get(slot)!.entries()];
      if (entries.length === 0) continue;
      const [c, mine] = entries[int(entries.length)]!;
      const gone = random() < 0.5 ? mine.slice(int(mine.length)) : mine.filter(() => random() < 0.3);
      pair.each((ix) => ix.applyRemoved(slot, gone.reverse()));
      // Only the run before the first removed block can still be a parent.
      const cut = mine.findIndex((h) => gone.includes(h));
      if (cut >= 0) held.get(slot)!.set(c, mine.slice(0, cut));
    } else if (r < 0.45) {
      // A worker restarts (cleared) or leaves; another joins, beyond 32 slots now and then (mask widening).
      const slot = anyLive();
      if (random() < 0.5) {
        pair.each((ix) => ix.clearWorker(slot));
        held.set(slot, new Map());
      } else if (live.size > 1) {
        pair.each((ix) => ix.removeWorker(slot));
        live.delete(slot);
        held.delete(slot);
      }
      const fresh = int(slots);
      if (!live.has(fresh)) join(fresh);
    } else if (r < 0.48) {
      // A dump replaces a worker's view: one conversation's prefix, parents first.
      const slot = anyLive();
      const c = int(convs.length);
      const conv = convs[c]!.slice(0, 1 + int(convs[c]!.length));
      const hashes = conv.map(() => String(engine++));
      const rows = conv.map((l, i) => ({ h: hashes[i]!, l: hex(l), p: i > 0 ? hashes[i - 1]! : null }));
      pair.each((ix) => (ix.clearWorker(slot), ix.applyDumpWire(slot, rows)));
      held.set(slot, new Map([[c, hashes]]));
    } else if (r < 0.52) {
      // A new conversation, or one forked from another's prefix (an edited or regenerated turn).
      if (random() < 0.5 || convs.length > 12) {
        const src = convs[int(convs.length)]!;
        convs.push([...src.slice(0, 1 + int(src.length)), ...Array.from({ length: 1 + int(6) }, block)]);
      } else newConv();
    } else {
      // Route a conversation: its next turn (grown), the same again, or an earlier, shorter prompt.
      const c = int(convs.length);
      const conv = convs[c]!;
      const k = random();
      if (k < 0.5) for (let i = 1 + int(10); i > 0; i--) conv.push(block());
      const q = k < 0.85 ? conv : conv.slice(0, 1 + int(conv.length));
      pair.query(q, random() < 0.8 ? "typed" : "array");
    }
  }
  // Every conversation once more, after everything above.
  for (const conv of convs) pair.query(conv, "typed");
  return pair;
}

describe("walk memo", () => {
  it("gives the overlaps and chain ends of a walk from the root on seeded traces", () => {
    for (let seed = 1; seed <= 40; seed++) expect(runTrace(seed, 600, 40).queries).toBeGreaterThan(100);
  });

  it("keeps the answers across more conversations and blocks than it keeps walks of", () => {
    const pair = new Pair();
    pair.each((ix) => (ix.ensureWorker(0), ix.ensureWorker(1)));
    const random = rng(7);
    const long = Math.ceil(WALK_MEMO_BLOCKS / 3);
    const convs = Array.from({ length: WALK_MEMO_ENTRIES + 4 }, (_, i) => Array.from({ length: i < 4 ? long : 20 }, () => BigInt(Math.floor(random() * 2 ** 52))));
    let engine = 1;
    for (const [i, conv] of convs.entries()) {
      pair.each((ix) => ix.applyStored(i % 2, null, conv.map((l, j) => ({ engineHash: String(engine + j), localHash: l }))));
      engine += conv.length;
    }
    for (let round = 0; round < 3; round++) for (const conv of convs) pair.query(conv, "typed");
  });

  it("bounds the room its walks' arrays take, also after the engine evicted their tails", () => {
    // Chats of 8192 blocks routed, then all but their first 8 blocks evicted: a kept walk holds 8
    // blocks but its arrays had room for 8192 (counted as 8, 128 such walks took 64 MiB).
    const memo = new WalkMemo(1);
    const length = 8192;
    const scores = new Int32Array(4).fill(length);
    const random = rng(11);
    for (let chat = 0; chat < WALK_MEMO_ENTRIES; chat++) {
      const words = Uint32Array.from({ length: 2 * length }, () => Math.floor(random() * 2 ** 32));
      const path = Int32Array.from({ length }, (_, d) => 1 + chat * length + d);
      expect(memo.match(words, length, 4)).toBe(0);
      memo.record(words, 0, length, path, scores, 4);
      for (let d = length - 1; d >= 8; d--) {
        memo.changed(path[d]!);
        memo.freed(path[d]!);
      }
      expect(memo.capacityBlocks).toBeLessThanOrEqual(WALK_MEMO_BLOCKS);
      // What is left is still kept: the chat's next turn resumes after its 8 blocks.
      expect(memo.match(words, length, 4)).toBe(8);
    }
  });

  it("gives a worker's overlap to a query with room for more worker slots than the kept walk's", () => {
    const memo = new RadixIndex({ walkMemoMinBlocks: 1 });
    const plain = new RadixIndex({ walkMemo: false });
    const chain = Array.from({ length: 200 }, (_, i) => BigInt(1000 + i));
    for (const ix of [memo, plain]) {
      ix.ensureWorker(0);
      ix.ensureWorker(5);
      for (const w of [0, 5]) ix.applyStored(w, null, chain.map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
      // The first query's scores cover slots 0..3 only: worker 5's overlap is not kept.
      ix.findMatches(BigUint64Array.from(chain), new Int32Array(4));
    }
    const a = new Int32Array(8);
    const b = new Int32Array(8);
    memo.findMatches(BigUint64Array.from(chain), a);
    plain.findMatches(BigUint64Array.from(chain), b);
    expect([...a]).toEqual([...b]);
    expect(a[5]).toBe(200);
  });

  it("resumes where a walk stopped and re-walks from where a worker changed a block", () => {
    const ix = new RadixIndex({ walkMemoMinBlocks: 1 });
    ix.ensureWorker(0);
    ix.ensureWorker(1);
    const chain = Array.from({ length: 40 }, (_, i) => BigInt(1000 + i));
    ix.applyStored(0, null, chain.slice(0, 30).map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
    ix.applyStored(1, null, chain.slice(0, 10).map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
    const s = new Int32Array(2);
    ix.findMatches(BigUint64Array.from(chain), s);
    expect([...s]).toEqual([30, 10]);
    // The next turn after worker 0 stored more of it, and worker 1 evicted its 6th block.
    ix.applyStored(0, "30", chain.slice(30, 35).map((l, i) => ({ engineHash: String(31 + i), localHash: l })));
    ix.applyRemoved(1, ["6"]);
    ix.findMatches(BigUint64Array.from(chain), s);
    expect([...s]).toEqual([35, 5]);
    // Worker 1 stores the 6th block again: its overlap comes back through the same kept walk.
    ix.applyStored(1, "5", [{ engineHash: "6", localHash: chain[5]! }]);
    ix.findMatches(BigUint64Array.from(chain.slice(0, 20)), s);
    expect([...s]).toEqual([20, 10]);
  });

  it("leaves chainEndOf the prefix keys a resumed walk knows, joined with another tree's walk only where they meet", () => {
    const ix = new RadixIndex({ walkMemoMinBlocks: 1 });
    ix.ensureWorker(0);
    const a = Array.from({ length: 120 }, (_, i) => BigInt(5000 + i));
    const b = Array.from({ length: 120 }, (_, i) => BigInt(9000 + i));
    ix.applyStored(0, null, a.map((l, i) => ({ engineHash: String(i + 1), localHash: l })));
    ix.applyStored(0, null, b.map((l, i) => ({ engineHash: String(1000 + i), localHash: l })));
    const s = new Int32Array(1);
    ix.findMatches(BigUint64Array.from(a.slice(0, 100)), s);
    // Another query overwrites the shared prefix keys; the next turn then resumes at block 100.
    ix.findMatches(BigUint64Array.from(b), s);
    const next = BigUint64Array.from(a);
    ix.findMatches(next, s);
    expect(s[0]).toBe(120);
    new RadixIndex().findMatches(next, s);
    for (const n of [1, 20, 40, 99, 100, 101, 120]) expect(chainEndOf(next, n)).toEqual(chainEndOf([...a], n));
  });
});
