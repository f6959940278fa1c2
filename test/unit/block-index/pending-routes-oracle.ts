/**
 * Overlap predicted from recent routes: recently routed block chains, per worker, count as blocks
 * the worker holds until its own KV events can have arrived (src/routing-index/block-views.ts adds
 * this overlap to the block index's). A request's blocks reach the index only after the worker has
 * prefilled it and the relay has forwarded the events; a repeat (or the next turn of a chat)
 * arriving before that would otherwise see no overlap and could land elsewhere. Entries live for
 * `ttlMs` (a few seconds, well above the event path's latency) and are bounded per worker and in
 * total; the index stays the source of truth after that.
 *
 * Each chain is stored as the chain keys of its blocks (chainKeysOf: key i identifies blocks [0, i],
 * as a radix-tree path does), counted per worker slot in one typed-array table. A worker holding
 * key i shares at least i + 1 leading blocks with one of its chains (a chain that has a prefix has
 * all shorter ones), so a lookup binary-searches each worker holding the first key: O(workers ×
 * log length), whatever the number of chains. Comparing chains block by block instead cost
 * O(chains × length) per route and per add: a few ms at 60 turns of one 32k-token chat. A false
 * match needs a 53-bit key collision and would only credit a worker with pending blocks for a few
 * seconds.
 */
import type { LocalHashes } from "../../../src/blocks/block-hash.ts";
import { ChainKeyTable } from "../../../src/blocks/chain-key-table.ts";
import { chainKeysOf } from "../../../src/blocks/chain-keys.ts";

interface PendingChain {
  slot: number;
  /** Chain keys of the chain's blocks. */
  keys: readonly number[];
  expiresAt: number;
  /** Dropped already (it may still sit in the other list, which skips it). */
  dropped: boolean;
}

/** Block references held by all chains together (8 B in its chain's key array and a 20-byte table slot each when no prefix is shared). */
export const DEFAULT_MAX_PENDING_BLOCKS = 1 << 18;

const NO_KEYS: readonly number[] = [];

/** Whether `a` is a prefix of `b` (chain keys: the last ones equal already, the rest checked so a 53-bit collision cannot hand over wrong counts). */
function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class PendingRoutes {
  /** Chain key → worker slots holding it, with counts. */
  readonly #refs = new ChainKeyTable();
  /** All chains in insertion order from #head on: with one TTL, the order they expire in. */
  #all: PendingChain[] = [];
  #head = 0;
  /** Per slot, its chains in insertion order (for the per-worker bound), and how many are live. */
  readonly #order: (PendingChain[] | undefined)[] = [];
  readonly #live: number[] = [];
  #chains = 0;
  #blocks = 0;
  /** The last query's keys: a route asks overlaps() and then add() with the same hashes. */
  #lastHashes: LocalHashes | null = null;
  #lastKeys: number[] = [];
  readonly ttlMs: number;
  readonly maxPerWorker: number;
  readonly maxBlocks: number;

  constructor(ttlMs = 5_000, maxPerWorker = 256, maxBlocks = DEFAULT_MAX_PENDING_BLOCKS) {
    this.ttlMs = ttlMs;
    this.maxPerWorker = maxPerWorker;
    this.maxBlocks = maxBlocks;
  }

  add(slot: number, hashes: LocalHashes, now: number): void {
    this.#expire(now);
    const n = Math.min(hashes.length, this.maxBlocks);
    if (n === 0) return;
    const all = this.keysOf(hashes);
    const keys = n === all.length ? all : all.slice(0, n);
    const order = (this.#order[slot] ??= []);
    // A chain of this worker that the new one repeats or extends adds nothing: the longest such
    // chain hands its counted keys over (the next turn of a chat counts only its new blocks), the
    // others are dropped, so repeats and the turns of one chat stay one chain.
    let heir: PendingChain | null = null;
    for (const c of order) {
      if (c.dropped || c.keys.length > n || c.keys[c.keys.length - 1] !== keys[c.keys.length - 1]) continue;
      if (heir === null && isPrefix(c.keys, keys)) heir = c;
      else if (heir !== null && c.keys.length > heir.keys.length && isPrefix(c.keys, keys)) (this.#drop(heir), (heir = c));
      else this.#drop(c);
    }
    const chain: PendingChain = { slot, keys, expiresAt: now + this.ttlMs, dropped: false };
    const from = heir === null ? 0 : heir.keys.length;
    if (heir !== null) this.#retire(heir);
    for (let d = from; d < n; d++) this.#refs.inc(keys[d]!, slot);
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
   * Per worker slot: the longest common leading run between `hashes` and its live chains. A slot
   * that holds key i holds every key before it (key i names blocks [0, i]), so each slot's run is
   * found by binary search: O(workers × log length) lookups, not a walk down the chain.
   */
  overlaps(hashes: LocalHashes, now: number): Map<number, number> {
    this.#expire(now);
    const out = new Map<number, number>();
    if (hashes.length === 0 || this.#chains === 0) return out;
    const keys = this.keysOf(hashes);
    this.#refs.eachHolder(keys[0]!, (slot) => {
      let lo = 1;
      let hi = keys.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (this.#refs.holds(keys[mid - 1]!, slot)) lo = mid;
        else hi = mid - 1;
      }
      out.set(slot, lo);
    });
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

  /** Distinct chain keys in the table (0 once every chain is gone). */
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

  /** Ends a chain without touching its counted keys (the chain extending it took them over, or #drop gave them back). */
  #retire(c: PendingChain): void {
    c.dropped = true;
    this.#chains--;
    this.#blocks -= c.keys.length;
    this.#live[c.slot]!--;
    // The lists may hold the chain a while longer; its keys are not needed any more.
    c.keys = NO_KEYS;
  }

  /** Ends a chain and gives back its counted keys. */
  #drop(c: PendingChain): void {
    for (let d = 0; d < c.keys.length; d++) this.#refs.dec(c.keys[d]!, c.slot);
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
