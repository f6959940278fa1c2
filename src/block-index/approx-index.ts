/**
 * Approximate mode (as Dynamo's, ai-dynamo/dynamo lib/kv-router/src/approx.rs @209c9e83): for
 * workers without KV events the router assumes that a worker it routed a request to now caches
 * every full block of that request. Each assumed block lives for `ttlMs` (refreshed whenever a
 * later route to the same worker covers it) and the whole set is bounded: past `maxBlocks`
 * (worker, block) entries the earliest-expiring ones are dropped until `pruneTargetRatio ×
 * maxBlocks` remain.
 *
 * The assumed blocks live in their own RadixIndex so overlap is computed exactly like for workers
 * with events (consecutive leading blocks). A block's id there (its "engine hash") is a 64-bit hash
 * of its path (every local hash from the root), which places it at one position as SGLang's chained
 * hash does.
 *
 * Cost per route follows what is new for the worker, not the request's length (why: a long chat's
 * next turn would otherwise pay a heap entry, a map entry and a tree store per block of its
 * history). A worker's assumed blocks are always prefix-closed (a block's expiry is never earlier
 * than a descendant's), so they are the union of the root paths of its routes still alive:
 * - one expiry entry per route (worker, expiry, the route's last block: its "tip") in a FIFO, which
 *   is expiry order since the TTL is one constant and the clock is taken as non-decreasing (a clock
 *   that steps back counts as standing still);
 * - per worker, a table of its assumed blocks with each one's parent, held children and the entry
 *   tipping there last. A route finds the leading blocks already assumed by binary search over its
 *   path ids (they are a prefix), stores only the rest and adds one entry: the earlier blocks are
 *   refreshed by being on its path. Hashing the path ids is the one step per block of the request.
 * - An entry that expires or is pruned drops its tip, then each parent no longer on another alive
 *   route's path (no held child, no later entry tipping there): exactly the blocks whose latest
 *   route it was, deepest first, each removed from the tree once per batch.
 * Expiry drops what expired by the time of a match; when every entry has (the index sat idle past the
 * TTL), it starts afresh instead of dropping block by block.
 * Pruning is spread over records: a record that finds the set past `maxBlocks` starts a prune, and
 * each record while it runs drops up to its own new blocks + APPROX_PRUNE_STEP, so the set is back
 * within `maxBlocks` after every record and no call drops more than that. The order is Dynamo's
 * (earliest expiry first) except among equal expiry times: Dynamo drops the deepest position first
 * over all of them (`BlockEntry`'s ordering), here the earlier route first, each deepest first.
 * Blocks refreshed while a prune runs stay (one prune of Dynamo's would drop and add them again).
 */
import { z } from "zod";
import { RadixIndex } from "./radix-index.ts";
import { localHashWords, type LocalHashes } from "../blocks/block-hash.ts";

export const ApproxConfigSchema = z.object({
  /** How long a routed block is assumed cached without being routed again (Dynamo: 120 s). */
  ttlMs: z.number().int().min(1).max(86_400_000).default(120_000),
  /** Upper bound on assumed (worker, block) entries (Dynamo: 2^20). */
  maxBlocks: z.number().int().min(1).max(2 ** 26).default(2 ** 20),
  /** Pruning keeps this fraction of maxBlocks, dropping the earliest-expiring first (Dynamo: 0.8). */
  pruneTargetRatio: z.number().gt(0).max(1).default(0.8),
});
export type ApproxConfig = z.infer<typeof ApproxConfigSchema>;

/** Entries a record drops beyond its own new blocks while a prune runs (~0.5 ms of drops). */
export const APPROX_PRUNE_STEP = 4096;

function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x27d4eb2f, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b) ^ c;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}

// Held-table bucket: block id lo, hi (hi is odd: (0, 0) is empty / the root), parent id lo, hi,
// held children, seq of the entry tipping here last (0: none).
const ID_LO = 0;
const ID_HI = 1;
const PARENT_LO = 2;
const PARENT_HI = 3;
const KIDS = 4;
const TIP = 5;
const WORDS = 6;

/** One worker's assumed blocks: open addressing on the block id, backward-shift deletion. */
class HeldTable {
  t = new Int32Array(16 * WORDS);
  mask = 15;
  count = 0;
  /** Blocks with an entry tipping here (TIP ≠ 0). */
  tips = 0;

  /** Bucket of id (lo, hi), or ~(the empty bucket where it would go). */
  find(lo: number, hi: number): number {
    const t = this.t;
    const m = this.mask;
    let i = lo & m;
    for (;;) {
      const b = i * WORDS;
      if (t[b + ID_HI] === 0) return ~i;
      if (t[b + ID_LO] === lo && t[b + ID_HI] === hi) return i;
      i = (i + 1) & m;
    }
  }

  insert(lo: number, hi: number, pLo: number, pHi: number, kids: number, tip: number): void {
    if ((this.count + 1) * 10 > (this.mask + 1) * 7) this.#rehash((this.mask + 1) * 2);
    const b = ~this.find(lo, hi) * WORDS;
    const t = this.t;
    t[b + ID_LO] = lo;
    t[b + ID_HI] = hi;
    t[b + PARENT_LO] = pLo;
    t[b + PARENT_HI] = pHi;
    t[b + KIDS] = kids;
    t[b + TIP] = tip;
    this.count++;
    if (tip !== 0) this.tips++;
  }

  deleteAt(i: number): void {
    const t = this.t;
    const m = this.mask;
    let j = i;
    for (;;) {
      j = (j + 1) & m;
      const bj = j * WORDS;
      if (t[bj + ID_HI] === 0) break;
      const home = t[bj + ID_LO]! & m;
      const stays = i <= j ? home > i && home <= j : home > i || home <= j;
      if (!stays) {
        t.copyWithin(i * WORDS, bj, bj + WORDS);
        i = j;
      }
    }
    t.fill(0, i * WORDS, i * WORDS + WORDS);
    this.count--;
    const cap = this.mask + 1;
    if (cap > 16 && this.count * 8 < cap) this.#rehash(cap / 2);
  }

  #rehash(capacity: number): void {
    const old = this.t;
    const t = new Int32Array(capacity * WORDS);
    const m = capacity - 1;
    for (let b = 0; b < old.length; b += WORDS) {
      if (old[b + ID_HI] === 0) continue;
      let i = old[b + ID_LO]! & m;
      while (t[i * WORDS + ID_HI] !== 0) i = (i + 1) & m;
      for (let w = 0; w < WORDS; w++) t[i * WORDS + w] = old[b + w]!;
    }
    this.t = t;
    this.mask = m;
  }
}

// Expiry FIFO entry words: worker slot, seq, tip id lo, hi (its time in #fifoAt).
const E_SLOT = 0;
const E_SEQ = 1;
const E_LO = 2;
const E_HI = 3;
const E_WORDS = 4;

export class ApproxIndex {
  readonly config: ApproxConfig;
  #tree = new RadixIndex();
  readonly #held: (HeldTable | undefined)[] = [];
  #count = 0;
  /** Blocks with an entry tipping there, all workers (the FIFO's alive entries). */
  #tips = 0;
  #fifo = new Int32Array(256 * E_WORDS);
  #fifoAt = new Float64Array(256);
  #head = 0;
  #tail = 0;
  #seq = 0;
  /** Latest clock reading (expiry times never go back). */
  #now = -Infinity;
  /** Entries a running prune keeps; -1: none running. */
  #pruneTarget = -1;
  #scores = new Int32Array(64);
  #ids = new Int32Array(256);
  /** Ids of dropped blocks of #dropSlot waiting for one tree removal. */
  #dropped = new Int32Array(256);
  #droppedCount = 0;
  #dropSlot = -1;
  /** Entries dropped by TTL and by the size bound (metrics, tests). */
  expired = 0;
  pruned = 0;

  /** Blocks a record drops beyond its own new ones while a prune runs. */
  readonly #pruneStep: number;

  /** `pruneStep` (tests): APPROX_PRUNE_STEP unless given. */
  constructor(config: Partial<ApproxConfig> = {}, opts: { pruneStep?: number } = {}) {
    this.config = ApproxConfigSchema.parse(config);
    this.#pruneStep = opts.pruneStep ?? APPROX_PRUNE_STEP;
  }

  /** Assumed (worker, block) entries currently held. */
  get size(): number {
    return this.#count;
  }

  workerBlockCount(slot: number): number {
    return this.#held[slot]?.count ?? 0;
  }

  /** The request was routed to `slot`: assume its blocks cached there, refreshing their TTL. */
  record(slot: number, localHashes: LocalHashes, now: number): void {
    const n = localHashes.length;
    if (n === 0) return;
    this.#tree.ensureWorker(slot);
    if (this.#scores.length <= slot) this.#scores = new Int32Array(Math.max(slot + 1, this.#scores.length * 2));
    const held = (this.#held[slot] ??= new HeldTable());
    const words = localHashWords(localHashes, n);
    const ids = this.#pathIds(words, n);
    // The blocks already assumed are a prefix of the path: find its end by binary search.
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (held.find(ids[2 * mid]!, ids[2 * mid + 1]!) >= 0) lo = mid + 1;
      else hi = mid;
    }
    const known = lo;
    // Wraps after 2^31 records; a stale entry would need to outlive that many within one TTL to be taken for alive.
    if (this.#seq === 0x7fffffff) this.#seq = 0;
    const seq = ++this.#seq;
    if (known < n) {
      this.#tree.applyStoredIds(slot, ids, words, known, n);
      if (known > 0) held.t[held.find(ids[2 * known - 2]!, ids[2 * known - 1]!) * WORDS + KIDS]!++;
      for (let d = known; d < n; d++) {
        const pLo = d > 0 ? ids[2 * d - 2]! : 0;
        const pHi = d > 0 ? ids[2 * d - 1]! : 0;
        held.insert(ids[2 * d]!, ids[2 * d + 1]!, pLo, pHi, d < n - 1 ? 1 : 0, d < n - 1 ? 0 : seq);
      }
      this.#count += n - known;
      this.#tips++;
    } else {
      // The whole request is assumed already: its last block tips this entry (an earlier entry
      // tipping there goes stale: this one covers all it did, later).
      const b = held.find(ids[2 * n - 2]!, ids[2 * n - 1]!) * WORDS;
      if (held.t[b + TIP] === 0) {
        held.tips++;
        this.#tips++;
      }
      held.t[b + TIP] = seq;
    }
    this.#now = Math.max(this.#now, now);
    this.#push(slot, seq, ids[2 * n - 2]!, ids[2 * n - 1]!, this.#now + this.config.ttlMs);
    if (this.#pruneTarget < 0 && this.#count > this.config.maxBlocks)
      this.#pruneTarget = Math.floor(this.config.maxBlocks * this.config.pruneTargetRatio);
    if (this.#pruneTarget >= 0) this.#pruneSome(n - known + this.#pruneStep);
  }

  /** Drops every entry that expired by `now`. */
  expire(now: number): number {
    const before = this.#count;
    // All expired (the index sat idle past the TTL): start afresh instead of dropping each block.
    if (this.#tail > this.#head && this.#fifoAt[this.#tail - 1]! <= now) this.#reset();
    while (this.#head < this.#tail && this.#fifoAt[this.#head]! <= now) {
      this.#dropEntry(Infinity);
      this.#head++;
    }
    this.#flushDrops();
    const n = before - this.#count;
    this.expired += n;
    return n;
  }

  /** Expires, then computes overlaps for `localHashes`; read them with overlapOf(slot). */
  match(localHashes: LocalHashes, now: number): void {
    this.expire(now);
    // Nothing assumed: every overlap is 0 without walking the request's blocks.
    if (this.#count === 0) this.#scores.fill(0);
    else this.#tree.findMatches(localHashes, this.#scores);
  }

  /** Overlap of `slot` from the last match(). */
  overlapOf(slot: number): number {
    return this.#scores[slot] ?? 0;
  }

  /** Forgets everything assumed for a worker (restart, down, removal); its FIFO entries go stale. */
  clear(slot: number): void {
    const held = this.#held[slot];
    if (held) {
      this.#count -= held.count;
      this.#tips -= held.tips;
    }
    this.#held[slot] = undefined;
    if (this.#tree.hasWorker(slot)) this.#tree.clearWorker(slot);
    if (slot < this.#scores.length) this.#scores[slot] = 0;
  }

  /** Forgets every assumed block: a new tree and tables, the FIFO emptied (the clock and seq go on). */
  #reset(): void {
    this.#tree = new RadixIndex();
    this.#held.length = 0;
    this.#count = 0;
    this.#tips = 0;
    this.#head = 0;
    this.#tail = 0;
  }

  /** 64-bit ids of the path's blocks into #ids (lo at 2d, hi at 2d + 1; hi odd, never the root's 0). */
  #pathIds(words: Uint32Array, n: number): Int32Array {
    if (this.#ids.length < 2 * n) this.#ids = new Int32Array(Math.max(2 * n, this.#ids.length * 2));
    const ids = this.#ids;
    let a = 0x3c6ef372;
    let b = 0x1b873593;
    for (let d = 0; d < n; d++) {
      const lo = words[2 * d]! | 0;
      const hi = words[2 * d + 1]! | 0;
      a = mix(a, lo, hi);
      b = mix(b ^ 0x5bd1e995, hi, lo);
      ids[2 * d] = a;
      ids[2 * d + 1] = b | 1;
    }
    return ids;
  }

  /** Drops FIFO-head entries while a prune runs, at most `budget` blocks; ends the prune at its target. */
  #pruneSome(budget: number): void {
    const before = this.#count;
    const target = this.#pruneTarget;
    while (this.#count > target && budget > 0 && this.#head < this.#tail) {
      const left = this.#dropEntry(Math.min(budget, this.#count - target));
      if (left < 0) break;
      budget -= left;
      this.#head++;
    }
    this.#flushDrops();
    if (this.#count <= target) this.#pruneTarget = -1;
    this.pruned += before - this.#count;
  }

  /**
   * Drops the blocks whose latest route is the FIFO head's entry (none if it went stale), deepest
   * first, at most `budget`; returns how many it dropped, or -1 when the budget ran out first: the
   * entry then tips at its deepest remaining block and stays at the head.
   */
  #dropEntry(budget: number): number {
    const e = this.#head * E_WORDS;
    const fifo = this.#fifo;
    const slot = fifo[e + E_SLOT]!;
    const held = this.#held[slot];
    if (!held) return 0;
    let i = held.find(fifo[e + E_LO]!, fifo[e + E_HI]!);
    if (i < 0 || held.t[i * WORDS + TIP] !== fifo[e + E_SEQ]) return 0;
    held.t[i * WORDS + TIP] = 0;
    held.tips--;
    this.#tips--;
    let n = 0;
    for (;;) {
      const t = held.t;
      const b = i * WORDS;
      if (t[b + KIDS] !== 0 || t[b + TIP] !== 0) return n;
      if (n === budget) {
        t[b + TIP] = fifo[e + E_SEQ]!;
        held.tips++;
        this.#tips++;
        fifo[e + E_LO] = t[b + ID_LO]!;
        fifo[e + E_HI] = t[b + ID_HI]!;
        return -1;
      }
      const pLo = t[b + PARENT_LO]!;
      const pHi = t[b + PARENT_HI]!;
      this.#queueDrop(slot, t[b + ID_LO]!, t[b + ID_HI]!);
      held.deleteAt(i);
      this.#count--;
      n++;
      if (pHi === 0) return n;
      i = held.find(pLo, pHi);
      held.t[i * WORDS + KIDS]!--;
    }
  }

  #queueDrop(slot: number, lo: number, hi: number): void {
    if (slot !== this.#dropSlot) this.#flushDrops();
    this.#dropSlot = slot;
    if (this.#dropped.length < 2 * this.#droppedCount + 2) {
      const grown = new Int32Array(this.#dropped.length * 2);
      grown.set(this.#dropped);
      this.#dropped = grown;
    }
    this.#dropped[2 * this.#droppedCount] = lo;
    this.#dropped[2 * this.#droppedCount + 1] = hi;
    this.#droppedCount++;
  }

  /** One tree removal for the queued drops of one worker. */
  #flushDrops(): void {
    if (this.#droppedCount > 0) this.#tree.applyRemovedIds(this.#dropSlot, this.#dropped, this.#droppedCount);
    this.#droppedCount = 0;
  }

  #push(slot: number, seq: number, lo: number, hi: number, at: number): void {
    // Stale entries (their tip re-tipped by a later route, or their worker cleared) wait for their
    // time at the head; past twice the alive ones they are filtered out (O(entries), amortized O(1)).
    if (this.#tail - this.#head > 2 * this.#tips + 1024) this.#compact();
    if (this.#tail === this.#fifoAt.length) this.#makeRoom();
    const e = this.#tail * E_WORDS;
    this.#fifo[e + E_SLOT] = slot;
    this.#fifo[e + E_SEQ] = seq;
    this.#fifo[e + E_LO] = lo;
    this.#fifo[e + E_HI] = hi;
    this.#fifoAt[this.#tail++] = at;
  }

  /** Keeps only alive entries, in order, from index 0. */
  #compact(): void {
    const fifo = this.#fifo;
    const at = this.#fifoAt;
    let w = 0;
    for (let r = this.#head; r < this.#tail; r++) {
      const e = r * E_WORDS;
      const held = this.#held[fifo[e + E_SLOT]!];
      const i = held ? held.find(fifo[e + E_LO]!, fifo[e + E_HI]!) : -1;
      if (i < 0 || held!.t[i * WORDS + TIP] !== fifo[e + E_SEQ]) continue;
      fifo.copyWithin(w * E_WORDS, e, e + E_WORDS);
      at[w++] = at[r]!;
    }
    this.#head = 0;
    this.#tail = w;
  }

  /** Room for one more entry at the tail: slides the entries to index 0, growing or shrinking the arrays. */
  #makeRoom(): void {
    const live = this.#tail - this.#head;
    const cap = this.#fifoAt.length;
    const size = live * 2 > cap ? cap * 2 : live * 8 < cap && cap > 256 ? cap / 2 : cap;
    if (size === cap) {
      this.#fifo.copyWithin(0, this.#head * E_WORDS, this.#tail * E_WORDS);
      this.#fifoAt.copyWithin(0, this.#head, this.#tail);
    } else {
      const fifo = new Int32Array(size * E_WORDS);
      const at = new Float64Array(size);
      fifo.set(this.#fifo.subarray(this.#head * E_WORDS, this.#tail * E_WORDS));
      at.set(this.#fifoAt.subarray(this.#head, this.#tail));
      this.#fifo = fifo;
      this.#fifoAt = at;
    }
    this.#head = 0;
    this.#tail = live;
  }
}
