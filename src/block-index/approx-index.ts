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
 * Expiry drops what expired by the time of a match, in tree removals of at most APPROX_DROP_BATCH
 * blocks, or, where that is surely cheaper, copies the alive entries' blocks into a new tree and
 * tables (a rebuild; each copy costs ~REBUILD_COST drops): the alive blocks are at most the blocks of
 * the alive entries' routes (U, a running sum over the queue), so it rebuilds when REBUILD_COST × U
 * ≤ (held − U) ≤ the blocks that expired, and at least APPROX_REBUILD_MIN could. An index idle past
 * the TTL starts afresh at once. One call then costs about min(expired, REBUILD_COST × U) block
 * steps: bounded by 2/3 of maxBlocks drops where U is near the alive blocks (routes of distinct
 * chats), still up to every held block where the alive routes share long prefixes (many turns of
 * the same chats alive). A rebuild holds a second copy of the alive blocks while it runs.
 * Pruning is spread over records: a record that finds the set past `maxBlocks` starts a prune, and
 * each record while it runs drops up to its own new blocks + APPROX_PRUNE_STEP, so the set is back
 * within `maxBlocks` after every record and no call drops more than that. The order is Dynamo's
 * (earliest expiry first) except among equal expiry times: Dynamo drops the deepest position first
 * over all of them (`BlockEntry`'s ordering), here the earlier route first, each deepest first.
 * Blocks refreshed while a prune runs stay (one prune of Dynamo's would drop and add them again).
 * An internal error (a bug here) forgets every assumed block and is counted in `resets`, so it costs
 * hit rate, never later routes.
 */
import { z } from "zod";
import { InternalError } from "../api/errors.ts";
import { RadixIndex, type ApplyResult } from "./radix-index.ts";
import { HeldTable } from "./held-table.ts";
import { ExpiryQueue } from "./expiry-queue.ts";
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

/**
 * Entries a record drops beyond its own new blocks while a prune runs. Measured at maxBlocks 2^20
 * (12 workers, routes of 2 000–6 400 blocks): ~3 ms a record, ~0.76 µs a drop.
 */
export const APPROX_PRUNE_STEP = 4096;

/** Most dropped blocks of one worker queued for one tree removal (bounds the removal's scratch). */
export const APPROX_DROP_BATCH = 4096;

/** Fewest blocks an expiry may drop for it to rebuild from the alive entries instead (it drops fewer). */
export const APPROX_REBUILD_MIN = 4096;

/** Cost of copying one alive block into a rebuild, in dropped blocks (measured ~2×: more table misses a block). */
const REBUILD_COST = 2;

function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x27d4eb2f, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b) ^ c;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/** A rebuild in progress: the alive entries' blocks copied into a new tree and tables. */
interface Rebuild {
  tree: RadixIndex;
  held: (HeldTable | undefined)[];
  count: number;
  tips: number;
}

export class ApproxIndex {
  readonly config: ApproxConfig;
  #tree = new RadixIndex();
  #held: (HeldTable | undefined)[] = [];
  #count = 0;
  /** Blocks with an entry tipping there, all workers (the queue's alive entries). */
  #tips = 0;
  #queue = new ExpiryQueue();
  #seq = 0;
  /** Latest clock reading (expiry times never go back). */
  #now = -Infinity;
  /** Entries a running prune keeps; -1: none running. */
  #pruneTarget = -1;
  #scores = new Int32Array(64);
  #ids = new Int32Array(256);
  /** Ids of dropped blocks of #dropSlot waiting for one tree removal (at most APPROX_DROP_BATCH). */
  readonly #dropped = new Int32Array(2 * APPROX_DROP_BATCH);
  #droppedCount = 0;
  #dropSlot = -1;
  /** A rebuild's path scratch: ids and local words, root first. */
  #pathIds = new Int32Array(256);
  #pathWords = new Uint32Array(256);
  /** Entries dropped by TTL and by the size bound; expiries done by a rebuild (metrics, tests). */
  expired = 0;
  pruned = 0;
  rebuilt = 0;
  /**
   * Internal errors caught (a bug here): each one forgot every assumed block (see #reset). Kept
   * visible for metrics and tests; the route that hit it goes on with overlaps 0.
   */
  resets = 0;

  /** Blocks a record drops beyond its own new ones while a prune runs. */
  readonly #pruneStep: number;
  /** Fewest blocks an expiry drops for it to rebuild instead. */
  readonly #rebuildMin: number;

  /** Told of each reset (the pool's metrics count it). */
  readonly #onReset: () => void;

  /** `pruneStep`, `rebuildMin` (tests): APPROX_PRUNE_STEP, APPROX_REBUILD_MIN unless given; `onReset`: told of each reset. */
  constructor(config: Partial<ApproxConfig> = {}, opts: { pruneStep?: number; rebuildMin?: number; onReset?: () => void } = {}) {
    this.config = ApproxConfigSchema.parse(config);
    this.#pruneStep = opts.pruneStep ?? APPROX_PRUNE_STEP;
    this.#rebuildMin = opts.rebuildMin ?? APPROX_REBUILD_MIN;
    this.#onReset = opts.onReset ?? (() => {});
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
    try {
      this.#record(slot, localHashes, now);
    } catch (e) {
      this.#reset(e);
    }
  }

  #record(slot: number, localHashes: LocalHashes, now: number): void {
    const n = localHashes.length;
    if (n === 0) return;
    this.#tree.ensureWorker(slot);
    if (this.#scores.length <= slot) this.#scores = new Int32Array(Math.max(slot + 1, this.#scores.length * 2));
    const held = (this.#held[slot] ??= new HeldTable());
    const words = localHashWords(localHashes, n);
    const ids = this.#hashPath(words, n);
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
      stored(this.#tree.applyStoredIds(slot, ids, words, known, n));
      if (known > 0) held.addKids(held.find(ids[2 * known - 2]!, ids[2 * known - 1]!), 1);
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
      this.#tips += held.setTip(held.find(ids[2 * n - 2]!, ids[2 * n - 1]!), seq);
    }
    this.#now = Math.max(this.#now, now);
    this.#push(slot, seq, ids[2 * n - 2]!, ids[2 * n - 1]!, this.#now + this.config.ttlMs, n);
    if (this.#pruneTarget < 0 && this.#count > this.config.maxBlocks)
      this.#pruneTarget = Math.floor(this.config.maxBlocks * this.config.pruneTargetRatio);
    if (this.#pruneTarget >= 0) this.#pruneSome(n - known + this.#pruneStep);
  }

  /**
   * Drops every entry that expired by `now`: drops their blocks, or copies the alive entries' blocks
   * into a new tree and tables where that is surely cheaper (see the file comment).
   */
  expire(now: number): number {
    try {
      return this.#expire(now);
    } catch (e) {
      this.#reset(e);
      return 0;
    }
  }

  #expire(now: number): number {
    const q = this.#queue;
    const end = q.firstAfter(now);
    if (end === q.head) return 0;
    const before = this.#count;
    // At most this many blocks stay: the alive entries' routes (shared prefixes counted each time).
    const alive = Math.min(q.blocksFrom(end), before);
    if (end === q.tail || (before - alive >= this.#rebuildMin && REBUILD_COST * alive <= before - alive)) {
      const rb: Rebuild = { tree: new RadixIndex(), held: [], count: 0, tips: 0 };
      for (let r = end; r < q.tail; r++) this.#copyEntry(rb, r);
      q.shiftTo(end);
      this.#adopt(rb);
      this.rebuilt++;
    } else {
      while (q.head < end) {
        this.#dropEntry(Infinity);
        q.shift();
      }
      this.#flushDrops();
    }
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

  /**
   * An internal error (a bug here) may leave the tree, tables and queue out of step, which would
   * fail every later call. Assumed blocks are only a hint: forget them all (costs hit rate until
   * routes refill them) and count it; any other error is rethrown.
   */
  #reset(e: unknown): void {
    if (!(e instanceof InternalError)) throw e;
    this.resets++;
    this.#tree = new RadixIndex();
    this.#held = [];
    this.#count = 0;
    this.#tips = 0;
    this.#queue = new ExpiryQueue();
    this.#pruneTarget = -1;
    this.#droppedCount = 0;
    this.#dropSlot = -1;
    this.#scores.fill(0);
    this.#onReset();
  }

  /** Overlap of `slot` from the last match(). */
  overlapOf(slot: number): number {
    return this.#scores[slot] ?? 0;
  }

  /** Forgets everything assumed for a worker (restart, down, removal); its queue entries go stale. */
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

  /** 64-bit ids of the path's blocks into #ids (lo at 2d, hi at 2d + 1; hi odd, never the root's 0). */
  #hashPath(words: Uint32Array, n: number): Int32Array {
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

  /** Drops queue-head entries while a prune runs, at most `budget` blocks; ends the prune at its target. */
  #pruneSome(budget: number): void {
    const before = this.#count;
    const target = this.#pruneTarget;
    const q = this.#queue;
    while (this.#count > target && budget > 0 && q.length > 0) {
      const left = this.#dropEntry(Math.min(budget, this.#count - target));
      if (left < 0) break;
      budget -= left;
      q.shift();
    }
    this.#flushDrops();
    if (this.#count <= target) this.#pruneTarget = -1;
    this.pruned += before - this.#count;
  }

  /** Held bucket of queue entry r's tip if the entry is alive (its tip still carries its seq), else -1. */
  #aliveAt(r: number): number {
    const q = this.#queue;
    const held = this.#held[q.slotAt(r)];
    if (!held) return -1;
    const i = held.find(q.tipLoAt(r), q.tipHiAt(r));
    return i >= 0 && held.tipAt(i) === q.seqAt(r) ? i : -1;
  }

  /**
   * Drops the blocks whose latest route is the queue head's entry (none if it went stale), deepest
   * first, at most `budget`; returns how many it dropped, or -1 when the budget ran out first: the
   * entry then tips at its deepest remaining block and stays at the head.
   */
  #dropEntry(budget: number): number {
    const q = this.#queue;
    const r = q.head;
    let i = this.#aliveAt(r);
    if (i < 0) return 0;
    const slot = q.slotAt(r);
    const held = this.#held[slot]!;
    this.#tips += held.setTip(i, 0);
    let n = 0;
    for (;;) {
      if (held.kidsAt(i) !== 0 || held.tipAt(i) !== 0) return n;
      if (n === budget) {
        this.#tips += held.setTip(i, q.seqAt(r));
        q.retip(r, held.idLoAt(i), held.idHiAt(i));
        return -1;
      }
      const pLo = held.parentLoAt(i);
      const pHi = held.parentHiAt(i);
      this.#queueDrop(slot, held.idLoAt(i), held.idHiAt(i));
      held.deleteAt(i);
      this.#count--;
      n++;
      if (pHi === 0) return n;
      i = held.find(pLo, pHi);
      held.addKids(i, -1);
    }
  }

  #queueDrop(slot: number, lo: number, hi: number): void {
    if (slot !== this.#dropSlot || this.#droppedCount === APPROX_DROP_BATCH) this.#flushDrops();
    this.#dropSlot = slot;
    this.#dropped[2 * this.#droppedCount] = lo;
    this.#dropped[2 * this.#droppedCount + 1] = hi;
    this.#droppedCount++;
  }

  /** One tree removal for the queued drops of one worker. */
  #flushDrops(): void {
    if (this.#droppedCount > 0 && this.#tree.applyRemovedIds(this.#dropSlot, this.#dropped, this.#droppedCount) !== this.#droppedCount)
      throw new InternalError("approximate index: a dropped block was not in the tree");
    this.#droppedCount = 0;
  }

  /**
   * Copies queue entry r's blocks not copied yet (its path up to the first one that is) into the
   * rebuild, if the entry is alive; returns how many.
   */
  #copyEntry(rb: Rebuild, r: number): number {
    let i = this.#aliveAt(r);
    if (i < 0) return 0;
    const q = this.#queue;
    const slot = q.slotAt(r);
    const seq = q.seqAt(r);
    const old = this.#held[slot]!;
    const held = (rb.held[slot] ??= new HeldTable());
    rb.tips++;
    const at = held.find(q.tipLoAt(r), q.tipHiAt(r));
    if (at >= 0) {
      held.setTip(at, seq);
      return 0;
    }
    // The path from the tip up to the first block copied already (or the root), tip first.
    let k = 0;
    let join = -1;
    for (;;) {
      this.#reservePath(k + 2);
      this.#pathIds[2 * k] = old.idLoAt(i);
      this.#pathIds[2 * k + 1] = old.idHiAt(i);
      k++;
      const pLo = old.parentLoAt(i);
      const pHi = old.parentHiAt(i);
      if (pHi === 0) break;
      join = held.find(pLo, pHi);
      if (join >= 0) {
        this.#pathIds[2 * k] = pLo;
        this.#pathIds[2 * k + 1] = pHi;
        break;
      }
      i = old.find(pLo, pHi);
    }
    // Root first: the joined block (if any) at 0, as applyStoredIds takes the parent.
    const from = join >= 0 ? 1 : 0;
    const ids = this.#pathIds;
    const len = k + from;
    for (let a = 0, b = len - 1; a < b; a++, b--) {
      const lo = ids[2 * a]!;
      const hi = ids[2 * a + 1]!;
      ids[2 * a] = ids[2 * b]!;
      ids[2 * a + 1] = ids[2 * b + 1]!;
      ids[2 * b] = lo;
      ids[2 * b + 1] = hi;
    }
    if (!this.#tree.localWordsOfIds(slot, ids, this.#pathWords, from, len))
      throw new InternalError("approximate index: an alive block was not in the tree");
    rb.tree.ensureWorker(slot);
    stored(rb.tree.applyStoredIds(slot, ids, this.#pathWords, from, len));
    if (join >= 0) held.addKids(join, 1);
    for (let d = from; d < len; d++) {
      const pLo = d > 0 ? ids[2 * d - 2]! : 0;
      const pHi = d > 0 ? ids[2 * d - 1]! : 0;
      held.insert(ids[2 * d]!, ids[2 * d + 1]!, pLo, pHi, d < len - 1 ? 1 : 0, d < len - 1 ? 0 : seq);
    }
    rb.count += k;
    return k;
  }

  #reservePath(n: number): void {
    if (this.#pathIds.length >= 2 * n) return;
    const ids = new Int32Array(Math.max(2 * n, this.#pathIds.length * 2));
    ids.set(this.#pathIds);
    this.#pathIds = ids;
    this.#pathWords = new Uint32Array(ids.length);
  }

  /** The rebuild (every alive entry copied) replaces the tree and tables; the queue keeps its alive entries. */
  #adopt(rb: Rebuild): void {
    this.#tree = rb.tree;
    this.#held = rb.held;
    this.#count = rb.count;
    this.#tips = rb.tips;
    this.#droppedCount = 0;
    this.#queue.compact((r) => this.#aliveAt(r) >= 0);
    if (this.#pathIds.length > 256) {
      this.#pathIds = new Int32Array(256);
      this.#pathWords = new Uint32Array(256);
    }
  }

  #push(slot: number, seq: number, lo: number, hi: number, at: number, blocks: number): void {
    // Stale entries (their tip re-tipped by a later route, or their worker cleared) wait for their
    // time at the head; past twice the alive ones they are filtered out (O(entries), amortized O(1)).
    const q = this.#queue;
    if (q.length > 2 * this.#tips + 1024) q.compact((r) => this.#aliveAt(r) >= 0);
    q.push(slot, seq, lo, hi, at, blocks);
  }
}

/** A store into the approximate tree always applies: a failure is a bug here. */
function stored(r: ApplyResult): void {
  if (!r.ok) throw new InternalError(`approximate index: a tree store failed (${r.error})`);
}
