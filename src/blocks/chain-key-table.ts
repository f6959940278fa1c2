/**
 * Shared block key → which workers hold it, and how many times on each (PendingRoutes' recently
 * routed chains; LoadTracker's first blocks of active requests). Keys are 53-bit numbers
 * (chainKeysOf, chain-keys.ts); a 32k-token chain adds and
 * releases ~2 000 of them, so this is an open-addressing table over typed arrays (linear probing, deletion by
 * backward shift, no tombstones) rather than a Map of heap numbers: the common case, a key held by
 * one worker, is three array slots. A key held by several workers keeps its per-worker counts in a
 * small side Map.
 */
const EMPTY = 0;
const MULTI = -1;

export class ChainKeyTable {
  #lo = new Int32Array(1024);
  /** High 21 bits of the key + 1 (0 marks an empty slot). */
  #hi = new Int32Array(1024);
  /** Holding worker slot, or MULTI (counts in #multi). */
  #slot = new Int32Array(1024);
  #count = new Int32Array(1024);
  #mask = 1023;
  #size = 0;
  readonly #multi = new Map<number, Map<number, number>>();

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

  /** One more active request on `slot` holds key `k`. */
  inc(k: number, slot: number): void {
    const lo = k | 0;
    const hi = Math.floor(k / 4294967296) + 1;
    const at = this.#find(lo, hi);
    if (at < 0) {
      const i = ~at;
      this.#lo[i] = lo;
      this.#hi[i] = hi;
      this.#slot[i] = slot;
      this.#count[i] = 1;
      if (++this.#size * 2 > this.#mask) this.#grow();
      return;
    }
    const s = this.#slot[at]!;
    if (s === slot) {
      this.#count[at]!++;
      return;
    }
    if (s !== MULTI) {
      this.#multi.set(k, new Map([[s, this.#count[at]!], [slot, 1]]));
      this.#slot[at] = MULTI;
      return;
    }
    const m = this.#multi.get(k)!;
    m.set(slot, (m.get(slot) ?? 0) + 1);
  }

  /** One active request on `slot` no longer holds `k` (a key or slot not held: nothing changes). */
  dec(k: number, slot: number): void {
    const lo = k | 0;
    const hi = Math.floor(k / 4294967296) + 1;
    const at = this.#find(lo, hi);
    if (at < 0) return;
    const s = this.#slot[at]!;
    if (s !== MULTI) {
      if (s !== slot) return;
      if (--this.#count[at]! === 0) this.#delete(at);
      return;
    }
    const m = this.#multi.get(k)!;
    const c = (m.get(slot) ?? 0) - 1;
    if (c > 0) {
      m.set(slot, c);
      return;
    }
    m.delete(slot);
    if (m.size === 1) {
      for (const [holder, count] of m) {
        this.#slot[at] = holder;
        this.#count[at] = count;
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
    const cap = lo.length * 2;
    this.#lo = new Int32Array(cap);
    this.#hi = new Int32Array(cap);
    this.#slot = new Int32Array(cap);
    this.#count = new Int32Array(cap);
    this.#mask = cap - 1;
    for (let j = 0; j < lo.length; j++) {
      if (hi[j] === EMPTY) continue;
      const i = ~this.#find(lo[j]!, hi[j]!);
      this.#lo[i] = lo[j]!;
      this.#hi[i] = hi[j]!;
      this.#slot[i] = slot[j]!;
      this.#count[i] = count[j]!;
    }
  }
}
