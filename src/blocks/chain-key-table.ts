/**
 * Shared block key → which workers hold it, and how many times on each (PendingRoutes' recently
 * routed chains; LoadTracker's first blocks of active requests). Keys are 53-bit numbers
 * (chainKeysOf, chain-keys.ts); every route adds and later releases tens to hundreds of them
 * (PendingRoutes: one per 64 blocks, more where chains share a prefix), so this is an open-addressing
 * table over typed arrays (linear probing, deletion by backward shift, no tombstones) rather than a
 * Map of heap numbers: the common case, a key held by one worker, is one slot of five Int32Arrays
 * (20 B). A key held by several workers keeps its per-worker counts in a small side Map. Each
 * (key, worker) also keeps the XOR of the tags its holders gave: with one holder left it names that
 * holder (PendingRoutes tags with chain ids; LoadTracker leaves them 0).
 */
const EMPTY = 0;
const MULTI = -1;

/** One worker's count and tag XOR for a key held by several workers. */
interface Held {
  count: number;
  tag: number;
}

export class ChainKeyTable {
  #lo = new Int32Array(1024);
  /** High 21 bits of the key + 1 (0 marks an empty slot). */
  #hi = new Int32Array(1024);
  /** Holding worker slot, or MULTI (counts in #multi). */
  #slot = new Int32Array(1024);
  #count = new Int32Array(1024);
  /** XOR of the holders' tags (single holder; a MULTI key's are in #multi). */
  #tag = new Int32Array(1024);
  #mask = 1023;
  #size = 0;
  readonly #multi = new Map<number, Map<number, Held>>();

  get size(): number {
    return this.#size;
  }

  #find(lo: number, hi: number): number {
    const mask = this.#mask;
    let i = (lo ^ Math.imul(hi, 0x9e3779b1)) & mask;
    for (;;) {
      const h = this.#hi[i]!;
      if (h === EMPTY) return ~i;
      if (h === hi && this.#lo[i] === lo) return i;
      i = (i + 1) & mask;
    }
  }

  /** One more active request on `slot` holds key `k` (`tag`: see the class comment). */
  inc(k: number, slot: number, tag = 0): void {
    const lo = k | 0;
    const hi = Math.floor(k / 4294967296) + 1;
    const at = this.#find(lo, hi);
    if (at < 0) {
      const i = ~at;
      this.#lo[i] = lo;
      this.#hi[i] = hi;
      this.#slot[i] = slot;
      this.#count[i] = 1;
      this.#tag[i] = tag;
      if (++this.#size * 2 > this.#mask) this.#grow();
      return;
    }
    const s = this.#slot[at]!;
    if (s === slot) {
      this.#count[at]!++;
      this.#tag[at]! ^= tag;
      return;
    }
    if (s !== MULTI) {
      this.#multi.set(k, new Map([[s, { count: this.#count[at]!, tag: this.#tag[at]! }], [slot, { count: 1, tag }]]));
      this.#slot[at] = MULTI;
      return;
    }
    const m = this.#multi.get(k)!;
    const h = m.get(slot);
    if (h === undefined) m.set(slot, { count: 1, tag });
    else (h.count++, (h.tag ^= tag));
  }

  /** One active request on `slot` no longer holds `k` (a key or slot not held: nothing changes); `tag` as given to inc. */
  dec(k: number, slot: number, tag = 0): void {
    const lo = k | 0;
    const hi = Math.floor(k / 4294967296) + 1;
    const at = this.#find(lo, hi);
    if (at < 0) return;
    const s = this.#slot[at]!;
    if (s !== MULTI) {
      if (s !== slot) return;
      this.#tag[at]! ^= tag;
      if (--this.#count[at]! === 0) this.#delete(at);
      return;
    }
    const m = this.#multi.get(k)!;
    const h = m.get(slot);
    if (h === undefined) return;
    h.tag ^= tag;
    if (--h.count > 0) return;
    m.delete(slot);
    if (m.size === 1) {
      for (const [holder, left] of m) {
        this.#slot[at] = holder;
        this.#count[at] = left.count;
        this.#tag[at] = left.tag;
      }
      this.#multi.delete(k);
    } else if (m.size === 0) {
      this.#multi.delete(k);
      this.#delete(at);
    }
  }

  /** Calls `visit` with each slot holding `k`, without allocating; false when no slot holds it. */
  eachHolder(k: number, visit: (slot: number) => void): boolean {
    const at = this.#find(k | 0, Math.floor(k / 4294967296) + 1);
    if (at < 0) return false;
    const s = this.#slot[at]!;
    if (s !== MULTI) visit(s);
    else for (const slot of this.#multi.get(k)!.keys()) visit(slot);
    return true;
  }

  /** Whether `slot` holds `k`. */
  holds(k: number, slot: number): boolean {
    const at = this.#find(k | 0, Math.floor(k / 4294967296) + 1);
    if (at < 0) return false;
    const s = this.#slot[at]!;
    return s === MULTI ? this.#multi.get(k)!.has(slot) : s === slot;
  }

  /** How many times `slot` holds `k` (0: not held). */
  countOf(k: number, slot: number): number {
    const at = this.#find(k | 0, Math.floor(k / 4294967296) + 1);
    if (at < 0) return 0;
    const s = this.#slot[at]!;
    return s === MULTI ? (this.#multi.get(k)!.get(slot)?.count ?? 0) : s === slot ? this.#count[at]! : 0;
  }

  /** The tag of `slot`'s one hold of `k`; -1 when it holds `k` more than once or not at all (tags given must be ≥ 0). */
  soleTag(k: number, slot: number): number {
    const at = this.#find(k | 0, Math.floor(k / 4294967296) + 1);
    if (at < 0) return -1;
    const s = this.#slot[at]!;
    if (s === slot) return this.#count[at] === 1 ? this.#tag[at]! : -1;
    if (s !== MULTI) return -1;
    const h = this.#multi.get(k)!.get(slot);
    return h !== undefined && h.count === 1 ? h.tag : -1;
  }

  /** Backward-shift deletion: later entries of the probe run move into the hole. */
  #delete(at: number): void {
    const mask = this.#mask;
    let hole = at;
    let i = (at + 1) & mask;
    for (;;) {
      const h = this.#hi[i]!;
      if (h === EMPTY) break;
      const home = (this.#lo[i]! ^ Math.imul(h, 0x9e3779b1)) & mask;
      // Move i into the hole unless its home lies cyclically in (hole, i].
      if (hole <= i ? home <= hole || home > i : home <= hole && home > i) {
        this.#lo[hole] = this.#lo[i]!;
        this.#hi[hole] = h;
        this.#slot[hole] = this.#slot[i]!;
        this.#count[hole] = this.#count[i]!;
        this.#tag[hole] = this.#tag[i]!;
        hole = i;
      }
      i = (i + 1) & mask;
    }
    this.#hi[hole] = EMPTY;
    this.#size--;
  }

  #grow(): void {
    const lo = this.#lo;
    const hi = this.#hi;
    const slot = this.#slot;
    const count = this.#count;
    const tag = this.#tag;
    const cap = lo.length * 2;
    this.#lo = new Int32Array(cap);
    this.#hi = new Int32Array(cap);
    this.#slot = new Int32Array(cap);
    this.#count = new Int32Array(cap);
    this.#tag = new Int32Array(cap);
    this.#mask = cap - 1;
    for (let j = 0; j < lo.length; j++) {
      if (hi[j] === EMPTY) continue;
      const i = ~this.#find(lo[j]!, hi[j]!);
      this.#lo[i] = lo[j]!;
      this.#hi[i] = hi[j]!;
      this.#slot[i] = slot[j]!;
      this.#count[i] = count[j]!;
      this.#tag[i] = tag[j]!;
    }
  }
}
