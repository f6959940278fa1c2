/**
 * The approximate index's expiry entries (approx-index.ts) in a FIFO: one per route (worker slot,
 * seq, the id of the block it tips at, its expiry time, its route's length). Times are non-decreasing
 * from head to tail, so the expired entries are a prefix; the lengths are kept as running sums, so
 * the blocks a stretch of entries routed (an upper bound on those it keeps assumed) is one
 * subtraction. The arrays grow by doubling and shrink to fit when kept entries fall below an eighth
 * of them.
 */
// Entry words: worker slot, seq, tip id lo, hi (its time in #at).
const E_SLOT = 0;
const E_SEQ = 1;
const E_LO = 2;
const E_HI = 3;
const E_WORDS = 4;
const MIN_ENTRIES = 256;

export class ExpiryQueue {
  #e = new Int32Array(MIN_ENTRIES * E_WORDS);
  #at = new Float64Array(MIN_ENTRIES);
  /** Route blocks pushed before each entry (a running sum; #pushed after the last). */
  #before = new Float64Array(MIN_ENTRIES);
  #pushed = 0;
  #head = 0;
  #tail = 0;

  get head(): number {
    return this.#head;
  }

  get tail(): number {
    return this.#tail;
  }

  /** Entries from head to tail (alive and stale). */
  get length(): number {
    return this.#tail - this.#head;
  }

  slotAt(r: number): number {
    return this.#e[r * E_WORDS + E_SLOT]!;
  }

  seqAt(r: number): number {
    return this.#e[r * E_WORDS + E_SEQ]!;
  }

  tipLoAt(r: number): number {
    return this.#e[r * E_WORDS + E_LO]!;
  }

  tipHiAt(r: number): number {
    return this.#e[r * E_WORDS + E_HI]!;
  }

  /** Moves entry r's tip (a prune that ran out of budget inside it). */
  retip(r: number, lo: number, hi: number): void {
    this.#e[r * E_WORDS + E_LO] = lo;
    this.#e[r * E_WORDS + E_HI] = hi;
  }

  /** First position from the head whose time is past `now` (tail if none): binary search. */
  firstAfter(now: number): number {
    let lo = this.#head;
    let hi = this.#tail;
    const at = this.#at;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (at[mid]! <= now) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Blocks of the routes of entries [from, tail). */
  blocksFrom(from: number): number {
    return from === this.#tail ? 0 : this.#pushed - this.#before[from]!;
  }

  /** Drops the head entry. */
  shift(): void {
    this.#head++;
  }

  /** Drops entries before position r. */
  shiftTo(r: number): void {
    this.#head = r;
  }

  push(slot: number, seq: number, lo: number, hi: number, at: number, blocks: number): void {
    if (this.#tail === this.#at.length) this.#resize(this.length * 2 > this.#at.length ? this.#at.length * 2 : this.#at.length);
    const e = this.#tail * E_WORDS;
    this.#e[e + E_SLOT] = slot;
    this.#e[e + E_SEQ] = seq;
    this.#e[e + E_LO] = lo;
    this.#e[e + E_HI] = hi;
    this.#at[this.#tail] = at;
    this.#before[this.#tail++] = this.#pushed;
    this.#pushed += blocks;
  }

  /** Keeps only the entries `alive(r)` accepts, in order, from index 0; then shrinks to fit. */
  compact(alive: (r: number) => boolean): void {
    const e = this.#e;
    const at = this.#at;
    const before = this.#before;
    let w = 0;
    for (let r = this.#head; r < this.#tail; r++) {
      if (!alive(r)) continue;
      e.copyWithin(w * E_WORDS, r * E_WORDS, r * E_WORDS + E_WORDS);
      at[w] = at[r]!;
      before[w++] = before[r]!;
    }
    this.#head = 0;
    this.#tail = w;
    this.#resize(this.#at.length);
  }

  /** Slides the entries to index 0 in arrays of `size` entries, or of a fitting size when they fill under an eighth. */
  #resize(size: number): void {
    const live = this.length;
    if (live * 8 < size && size > MIN_ENTRIES) size = Math.max(MIN_ENTRIES, 2 ** Math.ceil(Math.log2(live * 2 + 1)));
    if (size === this.#at.length) {
      if (this.#head === 0) return;
      this.#e.copyWithin(0, this.#head * E_WORDS, this.#tail * E_WORDS);
      this.#at.copyWithin(0, this.#head, this.#tail);
      this.#before.copyWithin(0, this.#head, this.#tail);
    } else {
      const e = new Int32Array(size * E_WORDS);
      const at = new Float64Array(size);
      e.set(this.#e.subarray(this.#head * E_WORDS, this.#tail * E_WORDS));
      const before = new Float64Array(size);
      at.set(this.#at.subarray(this.#head, this.#tail));
      before.set(this.#before.subarray(this.#head, this.#tail));
      this.#e = e;
      this.#at = at;
      this.#before = before;
    }
    this.#head = 0;
    this.#tail = live;
  }
}
