/**
 * Recently routed block chains, per worker, until the worker's own KV events can have arrived.
 * A request's blocks reach the index only after the worker has prefilled it and the relay has
 * forwarded the events; a repeat (or the next turn of a chat) arriving before that would otherwise
 * see no overlap and could land elsewhere. Entries live for `ttlMs` (a few seconds, well above the
 * event path's latency) and are bounded per worker and in total; the index stays the source of
 * truth after that.
 *
 * Lookup costs O(overlap), whatever the number of chains: each chain is stored as the rolling
 * prefix keys of its blocks (key(d) identifies blocks [0, d], as a radix-tree path does), counted
 * per worker slot in one table. A query walks its own prefix keys while the table has them; each
 * worker present at depth d shares at least d + 1 leading blocks with one of its chains (a chain
 * that has a prefix has all shorter ones). Comparing chains block by block instead cost
 * O(chains × length) per route and per add: a few ms at 60 turns of one 32k-token chat.
 * Keys are 52 bits from two independent 32-bit rolling mixes: a false match needs a 52-bit
 * collision, and would only credit a worker with a few pending blocks for a few seconds.
 */
import type { LocalHashes } from "../blocks/block-hash.ts";
import { mix32 } from "../util/mix32.ts";

interface PendingChain {
  slot: number;
  /** Prefix keys of the chain's blocks. */
  keys: Float64Array;
  expiresAt: number;
  /** Dropped already (it may still sit in the other list, which skips it). */
  dropped: boolean;
}

/** Block references held by all chains together (≈ 80 B each at worst, when no two chains share a prefix). */
export const DEFAULT_MAX_PENDING_BLOCKS = 1 << 18;

const ROOT_A = 0x2545f491;
const ROOT_B = 0x6c8e9cf5;
const SALT_B = 0x9e3779b9;
const TWO_20 = 1 << 20;
const NO_KEYS = new Float64Array(0);

let scratch = new BigUint64Array(64);

/** Little-endian u32 pairs (lo, hi) of the hashes, without allocating a BigInt per block. */
function wordsOf(hashes: LocalHashes): Uint32Array {
  if (hashes instanceof BigUint64Array) return new Uint32Array(hashes.buffer, hashes.byteOffset, 2 * hashes.length);
  if (scratch.length < hashes.length) scratch = new BigUint64Array(Math.max(hashes.length, 2 * scratch.length));
  for (let i = 0; i < hashes.length; i++) scratch[i] = hashes[i]!;
  return new Uint32Array(scratch.buffer, 0, 2 * hashes.length);
}

/** Rolling prefix keys of the first `count` blocks (52-bit integers, exact in a double). */
function prefixKeys(words: Uint32Array, count: number): Float64Array {
  const keys = new Float64Array(count);
  let a = ROOT_A;
  let b = ROOT_B;
  for (let d = 0; d < count; d++) {
    const lo = words[2 * d]! | 0;
    const hi = words[2 * d + 1]! | 0;
    a = mix32(a, lo, hi);
    b = mix32(b, hi ^ SALT_B, lo);
    keys[d] = (a >>> 0) * TWO_20 + (b >>> 12);
  }
  return keys;
}

export class PendingRoutes {
  /** Prefix key → [slot, references, slot, references, …] (usually one slot). */
  readonly #refs = new Map<number, number[]>();
  /** All chains in insertion order from #head on: with one TTL, the order they expire in. */
  #all: PendingChain[] = [];
  #head = 0;
  /** Per slot, its chains in insertion order (for the per-worker bound). */
  readonly #order: (PendingChain[] | undefined)[] = [];
  #chains = 0;
  #blocks = 0;
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
    const keys = prefixKeys(wordsOf(hashes), n);
    const order = (this.#order[slot] ??= []);
    // A chain of this worker that the new one repeats or extends adds nothing: drop it, so repeats
    // and the turns of one chat stay one chain instead of piling up.
    for (const c of order) if (!c.dropped && c.keys.length <= n && c.keys[c.keys.length - 1] === keys[c.keys.length - 1]) this.#drop(c);
    const chain: PendingChain = { slot, keys, expiresAt: now + this.ttlMs, dropped: false };
    for (let d = 0; d < n; d++) this.#ref(keys[d]!, slot, 1);
    this.#chains++;
    this.#blocks += n;
    this.#all.push(chain);
    order.push(chain);
    const mine = this.#compact(slot);
    for (let i = 0, live = this.#live(mine); live > this.maxPerWorker; i++) if (!mine[i]!.dropped) (this.#drop(mine[i]!), live--);
    for (let i = this.#head; this.#blocks > this.maxBlocks; i++) if (!this.#all[i]!.dropped) this.#drop(this.#all[i]!);
  }

  /** Per worker slot: the longest common leading run between `hashes` and its live chains. */
  overlaps(hashes: LocalHashes, now: number): Map<number, number> {
    this.#expire(now);
    const out = new Map<number, number>();
    if (hashes.length === 0 || this.#chains === 0) return out;
    const words = wordsOf(hashes);
    let a = ROOT_A;
    let b = ROOT_B;
    for (let d = 0; d < hashes.length; d++) {
      const lo = words[2 * d]! | 0;
      const hi = words[2 * d + 1]! | 0;
      a = mix32(a, lo, hi);
      b = mix32(b, hi ^ SALT_B, lo);
      const refs = this.#refs.get((a >>> 0) * TWO_20 + (b >>> 12));
      if (refs === undefined) break;
      for (let i = 0; i < refs.length; i += 2) out.set(refs[i]!, d + 1);
    }
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

  clear(slot: number): void {
    for (const c of this.#order[slot] ?? []) if (!c.dropped) this.#drop(c);
    this.#order[slot] = undefined;
  }

  #ref(key: number, slot: number, delta: number): void {
    const refs = this.#refs.get(key);
    if (refs === undefined) {
      this.#refs.set(key, [slot, delta]);
      return;
    }
    for (let i = 0; i < refs.length; i += 2) {
      if (refs[i] !== slot) continue;
      refs[i + 1]! += delta;
      if (refs[i + 1] === 0) {
        if (refs.length === 2) this.#refs.delete(key);
        else refs.splice(i, 2);
      }
      return;
    }
    refs.push(slot, delta);
  }

  #drop(c: PendingChain): void {
    c.dropped = true;
    for (let d = 0; d < c.keys.length; d++) this.#ref(c.keys[d]!, c.slot, -1);
    this.#chains--;
    this.#blocks -= c.keys.length;
    // The lists may hold the chain a while longer; its keys are not needed any more.
    c.keys = NO_KEYS;
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
    if (2 * this.#live(order) >= order.length) return order;
    const live = order.filter((c) => !c.dropped);
    this.#order[slot] = live;
    return live;
  }

  #live(order: PendingChain[]): number {
    let n = 0;
    for (const c of order) if (!c.dropped) n++;
    return n;
  }
}
