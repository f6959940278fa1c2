/**
 * Overlap predicted from recent routes: recently routed block chains, per worker, count as blocks
 * the worker holds until its own KV events can have arrived (src/routing-index/block-views.ts adds
 * this overlap to the block index's). A request's blocks reach the index only after the worker has
 * prefilled it and the relay has forwarded the events; a repeat (or the next turn of a chat)
 * arriving before that would otherwise see no overlap and could land elsewhere. Entries live for
 * `ttlMs` (a few seconds, well above the event path's latency) and are bounded per worker and in
 * total; the index stays the source of truth after that.
 *
 * Each chain keeps the chain keys of its blocks (chainKeysOf: key i identifies blocks [0, i], as a
 * radix-tree path does), but only some of them are counted per worker slot in the shared table:
 * every `keyStride`-th key (the grid: positions S-1, 2S-1, ...), and the keys between two grid
 * positions (a segment's inner keys) only where they are needed. Counting every key made a route's
 * add and its expiry cost one cache-missing table operation per block (~370 ns in a 2^18-key
 * table: 2-5 ms a route for chats of thousands of blocks); the grid alone costs 1/S of that.
 *
 * A lookup binary-searches each worker's deepest held grid key (a chain through grid position i
 * holds every grid key before it), then finds the answer inside the next segment exactly:
 * - one chain of the worker passes through that grid key (its count is 1): the table's tag for it
 *   (the XOR of its holders' chain ids) names the chain, and its own keys are compared, ≤ S of them;
 * - several do: then every one of them holds that segment's inner keys (invariant below), so a
 *   binary search over them finds the answer, as over a full chain.
 * The invariant is kept on add: a chain whose grid key at i was already held by its worker holds
 * the inner keys of the segment after i, and so does the one earlier holder when it was alone (its
 * tag names it). Every chain holds the first segment's inner keys (short chains, and the lookup's
 * entry: each worker holding the first key). Shared segments thus cost their inner keys (at worst
 * every segment of chains sharing a long prefix on one worker: about what counting every key
 * cost), distinct tails 1/S. A false match needs a 53-bit key collision and would only credit a
 * worker with pending blocks for a few seconds.
 */
import type { LocalHashes } from "../blocks/block-hash.ts";
import { ChainKeyTable } from "../blocks/chain-key-table.ts";
import { chainKeysOf } from "../blocks/chain-keys.ts";

interface PendingChain {
  slot: number;
  /** Tag of its holds in the table; a chain that takes over an earlier one's holds takes its id. */
  id: number;
  /** Chain keys of the chain's blocks. */
  keys: readonly number[];
  /** Starts of the segments past the first whose inner keys it holds. */
  inner: Set<number>;
  expiresAt: number;
  /** Dropped already (it may still sit in the other list, which skips it). */
  dropped: boolean;
}

/**
 * Block references held by all chains together. A block costs 8 B in its chain's key array plus, on
 * a distinct tail, 1/64 of a 20-byte table slot (every chain also counts its first segment's 63 keys).
 */
export const DEFAULT_MAX_PENDING_BLOCKS = 1 << 18;

/** Keys apart on the grid: a distinct chain counts one key in this many (see the file comment). */
export const DEFAULT_PENDING_KEY_STRIDE = 64;

const NO_KEYS: readonly number[] = [];

/** Whether `a` is a prefix of `b` (chain keys: the last ones equal already, the rest checked so a 53-bit collision cannot hand over wrong counts). */
function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class PendingRoutes {
  /** Held chain key → worker slots holding it, with counts and the XOR of the holding chains' ids. */
  readonly #refs = new ChainKeyTable();
  /** All chains in insertion order from #head on: with one TTL, the order they expire in. */
  #all: PendingChain[] = [];
  #head = 0;
  /** Per slot, its chains in insertion order (for the per-worker bound), and how many are live. */
  readonly #order: (PendingChain[] | undefined)[] = [];
  readonly #live: number[] = [];
  /** Live chains by id; ids of dropped chains are reused, so ids stay below the chains ever live at once. */
  readonly #byId: (PendingChain | undefined)[] = [];
  readonly #freeIds: number[] = [];
  #chains = 0;
  #blocks = 0;
  /** The last query's keys: a route asks overlaps() and then add() with the same hashes. */
  #lastHashes: LocalHashes | null = null;
  #lastKeys: number[] = [];
  readonly ttlMs: number;
  readonly maxPerWorker: number;
  readonly maxBlocks: number;
  readonly keyStride: number;

  constructor(ttlMs = 5_000, maxPerWorker = 256, maxBlocks = DEFAULT_MAX_PENDING_BLOCKS, keyStride = DEFAULT_PENDING_KEY_STRIDE) {
    this.ttlMs = ttlMs;
    this.maxPerWorker = maxPerWorker;
    this.maxBlocks = maxBlocks;
    if (!Number.isInteger(keyStride) || keyStride < 2) throw new RangeError(`PendingRoutes keyStride must be an integer ≥ 2, got ${keyStride}`);
    this.keyStride = keyStride;
  }

  add(slot: number, hashes: LocalHashes, now: number): void {
    this.#expire(now);
    const n = Math.min(hashes.length, this.maxBlocks);
    if (n === 0) return;
    const all = this.keysOf(hashes);
    const keys = n === all.length ? all : all.slice(0, n);
    const order = (this.#order[slot] ??= []);
    // A chain of this worker that the new one repeats or extends adds nothing: the longest such
    // chain hands its holds over (the next turn of a chat counts only its new blocks), the others
    // are dropped, so repeats and the turns of one chat stay one chain.
    let heir: PendingChain | null = null;
    for (const c of order) {
      if (c.dropped || c.keys.length > n || c.keys[c.keys.length - 1] !== keys[c.keys.length - 1]) continue;
      if (heir === null && isPrefix(c.keys, keys)) heir = c;
      else if (heir !== null && c.keys.length > heir.keys.length && isPrefix(c.keys, keys)) (this.#drop(heir), (heir = c));
      else this.#drop(c);
    }
    let chain: PendingChain;
    let from = 0;
    if (heir !== null) {
      chain = { slot, id: heir.id, keys, inner: heir.inner, expiresAt: now + this.ttlMs, dropped: false };
      from = heir.keys.length;
      this.#retire(heir);
    } else {
      const id = this.#freeIds.pop() ?? this.#byId.length;
      chain = { slot, id, keys, inner: new Set(), expiresAt: now + this.ttlMs, dropped: false };
    }
    this.#byId[chain.id] = chain;
    this.#hold(chain, from);
    this.#chains++;
    this.#blocks += n;
    this.#live[slot] = (this.#live[slot] ?? 0) + 1;
    this.#all.push(chain);
    order.push(chain);
    const mine = this.#compact(slot);
    for (let i = 0; this.#live[slot]! > this.maxPerWorker; i++) if (!mine[i]!.dropped) this.#drop(mine[i]!);
    for (let i = this.#head; this.#blocks > this.maxBlocks; i++) if (!this.#all[i]!.dropped) this.#drop(this.#all[i]!);
  }

  /**
   * Per worker slot: the longest common leading run between `hashes` and its live chains. Each
   * slot's deepest held grid key is found by binary search, then the run inside the next segment
   * (the file comment says how): O(workers × log length) lookups, not a walk down the chain.
   */
  overlaps(hashes: LocalHashes, now: number): Map<number, number> {
    this.#expire(now);
    const out = new Map<number, number>();
    if (hashes.length === 0 || this.#chains === 0) return out;
    const keys = this.keysOf(hashes);
    this.#refs.eachHolder(keys[0]!, (slot) => out.set(slot, this.#overlapOn(slot, keys)));
    return out;
  }

  /** Longest common leading run between `hashes` and any live chain routed to `slot`. */
  overlap(slot: number, hashes: LocalHashes, now: number): number {
    return this.overlaps(hashes, now).get(slot) ?? 0;
  }

  /** Chains held. */
  get size(): number {
    return this.#chains;
  }

  /** Block references held by all chains. */
  get blocks(): number {
    return this.#blocks;
  }

  /** Distinct chain keys counted in the table: grid keys and the inner keys of shared segments (0 once every chain is gone). */
  get keys(): number {
    return this.#refs.size;
  }

  clear(slot: number): void {
    for (const c of this.#order[slot] ?? []) if (!c.dropped) this.#drop(c);
    this.#order[slot] = undefined;
  }

  /**
   * Chain keys of `hashes`, kept for the last array asked about: a route computes them once for
   * the overlap, the load tracker and add(). Shared: callers must not modify the array.
   */
  keysOf(hashes: LocalHashes): number[] {
    if (hashes !== this.#lastHashes) {
      this.#lastKeys = chainKeysOf(hashes);
      this.#lastHashes = hashes;
    }
    return this.#lastKeys;
  }

  /** `slot`'s overlap with `keys`, given that it holds keys[0]. */
  #overlapOn(slot: number, keys: readonly number[]): number {
    const refs = this.#refs;
    const s = this.keyStride;
    // Deepest grid position held: a chain through grid key j·S - 1 holds every grid key before it.
    let lo = 0;
    let hi = Math.floor(keys.length / s);
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (refs.holds(keys[mid * s - 1]!, slot)) lo = mid;
      else hi = mid - 1;
    }
    const start = lo * s;
    // The run ends in [start, end]: were it longer, the next grid key would be held.
    const end = Math.min(start + s - 1, keys.length);
    const sole = start > 0 ? refs.soleTag(keys[start - 1]!, slot) : -1;
    if (sole >= 0) {
      const only = this.#byId[sole];
      // Always true unless a 53-bit key collision or a stale tag points at another chain: then the
      // exact search below answers instead of comparing against the wrong chain's keys.
      if (only !== undefined && only.slot === slot && only.keys[start - 1] === keys[start - 1]) {
        const mine = only.keys;
        const stop = Math.min(end, mine.length);
        let d = start;
        while (d < stop && mine[d] === keys[d]) d++;
        return d;
      }
    }
    // Every chain through the grid key holds this segment's inner keys.
    lo = start;
    hi = end;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (refs.holds(keys[mid - 1]!, slot)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /**
   * Counts the chain's keys from position `from` on (those before are held already, taken over
   * from the chain it extends): grid keys, and inner keys of the first segment and of each segment
   * whose grid key before it another chain of the slot holds too, which then holds them as well.
   */
  #hold(c: PendingChain, from: number): void {
    const refs = this.#refs;
    const s = this.keyStride;
    const keys = c.keys;
    const n = keys.length;
    for (let seg = from - (from % s); seg < n; seg += s) {
      const grid = seg + s - 1;
      if (seg === 0 || c.inner.has(seg)) for (let d = Math.max(from, seg); d < grid && d < n; d++) refs.inc(keys[d]!, c.slot, c.id);
      if (grid < from || grid >= n) continue;
      const k = keys[grid]!;
      const before = refs.countOf(k, c.slot);
      if (before > 0) {
        c.inner.add(grid + 1);
        if (before === 1) this.#holdInner(this.#byId[refs.soleTag(k, c.slot)], c.slot, k, grid);
      }
      refs.inc(k, c.slot, c.id);
    }
  }

  /** The one earlier chain through grid key `k` (at `grid`) holds the inner keys of the segment after it, if it does not yet. */
  #holdInner(c: PendingChain | undefined, slot: number, k: number, grid: number): void {
    if (c === undefined || c.slot !== slot || c.keys[grid] !== k || c.inner.has(grid + 1)) return;
    c.inner.add(grid + 1);
    const stop = Math.min(grid + this.keyStride, c.keys.length);
    for (let d = grid + 1; d < stop; d++) this.#refs.inc(c.keys[d]!, slot, c.id);
  }

  /** Ends a chain without touching its holds (the chain extending it took them over, or #drop gave them back). */
  #retire(c: PendingChain): void {
    c.dropped = true;
    this.#chains--;
    this.#blocks -= c.keys.length;
    this.#live[c.slot]!--;
    // The lists may hold the chain a while longer; its keys are not needed any more.
    c.keys = NO_KEYS;
  }

  /** Ends a chain and gives back its holds and its id. */
  #drop(c: PendingChain): void {
    const refs = this.#refs;
    const s = this.keyStride;
    const keys = c.keys;
    const n = keys.length;
    for (let d = s - 1; d < n; d += s) refs.dec(keys[d]!, c.slot, c.id);
    for (let d = 0; d < s - 1 && d < n; d++) refs.dec(keys[d]!, c.slot, c.id);
    for (const seg of c.inner) for (let d = seg; d < seg + s - 1 && d < n; d++) refs.dec(keys[d]!, c.slot, c.id);
    this.#byId[c.id] = undefined;
    this.#freeIds.push(c.id);
    this.#retire(c);
  }

  /** Drops chains whose time is up (the oldest first) and forgets dropped ones at the list head. */
  #expire(now: number): void {
    const all = this.#all;
    let i = this.#head;
    for (; i < all.length; i++) {
      const c = all[i]!;
      if (!c.dropped && c.expiresAt > now) break;
      if (!c.dropped) this.#drop(c);
    }
    this.#head = i;
    if (i === all.length) {
      this.#all = [];
      this.#head = 0;
    } else if (2 * i > all.length) {
      this.#all = all.slice(i);
      this.#head = 0;
    }
  }

  /** The slot's list, without its dropped chains once they make up half of it. */
  #compact(slot: number): PendingChain[] {
    const order = this.#order[slot]!;
    if (2 * this.#live[slot]! >= order.length) return order;
    const live = order.filter((c) => !c.dropped);
    this.#order[slot] = live;
    return live;
  }
}
