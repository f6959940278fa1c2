/**
 * One worker's assumed blocks in the approximate index (approx-index.ts): per block its 64-bit id,
 * its parent's id, how many held children it has and the sequence number of the expiry entry tipping
 * there last (0: none). Open addressing on the block id with backward-shift deletion; the table
 * grows past 70 % load and halves below 12.5 %.
 */
import { InternalError } from "../api/errors.ts";

// Bucket words: id lo, hi (hi is odd: (0, 0) is empty / the root), parent id lo, hi, held children, tip seq.
const ID_LO = 0;
const ID_HI = 1;
const PARENT_LO = 2;
const PARENT_HI = 3;
const KIDS = 4;
const TIP = 5;
const WORDS = 6;

export class HeldTable {
  #t = new Int32Array(16 * WORDS);
  #mask = 15;
  #count = 0;
  #tips = 0;

  /** Blocks held. */
  get count(): number {
    return this.#count;
  }

  /** Blocks with an entry tipping there. */
  get tips(): number {
    return this.#tips;
  }

  /** Bucket of id (lo, hi), or ~(the empty bucket where it would go). */
  find(lo: number, hi: number): number {
    const t = this.#t;
    const m = this.#mask;
    let i = lo & m;
    for (;;) {
      const b = i * WORDS;
      if (t[b + ID_HI] === 0) return ~i;
      if (t[b + ID_LO] === lo && t[b + ID_HI] === hi) return i;
      i = (i + 1) & m;
    }
  }

  /** Adds a block that is not held yet (an internal error otherwise). */
  insert(lo: number, hi: number, pLo: number, pHi: number, kids: number, tip: number): void {
    if ((this.#count + 1) * 10 > (this.#mask + 1) * 7) this.#rehash((this.#mask + 1) * 2);
    const at = this.find(lo, hi);
    if (at >= 0) throw new InternalError("approximate index: a block stored twice");
    const b = ~at * WORDS;
    const t = this.#t;
    t[b + ID_LO] = lo;
    t[b + ID_HI] = hi;
    t[b + PARENT_LO] = pLo;
    t[b + PARENT_HI] = pHi;
    t[b + KIDS] = kids;
    t[b + TIP] = tip;
    this.#count++;
    if (tip !== 0) this.#tips++;
  }

  idLoAt(i: number): number {
    return this.#t[i * WORDS + ID_LO]!;
  }

  idHiAt(i: number): number {
    return this.#t[i * WORDS + ID_HI]!;
  }

  /** Parent id words of bucket i (hi 0: the root). */
  parentLoAt(i: number): number {
    return this.#t[i * WORDS + PARENT_LO]!;
  }

  parentHiAt(i: number): number {
    return this.#t[i * WORDS + PARENT_HI]!;
  }

  kidsAt(i: number): number {
    return this.#t[i * WORDS + KIDS]!;
  }

  /** Adds `delta` (±1) held children to bucket i. */
  addKids(i: number, delta: number): void {
    this.#t[i * WORDS + KIDS]! += delta;
  }

  tipAt(i: number): number {
    return this.#t[i * WORDS + TIP]!;
  }

  /** Sets bucket i's tip seq (0: none); returns the change in blocks with a tip (-1, 0 or 1). */
  setTip(i: number, seq: number): number {
    const b = i * WORDS + TIP;
    const d = (seq !== 0 ? 1 : 0) - (this.#t[b] !== 0 ? 1 : 0);
    this.#t[b] = seq;
    this.#tips += d;
    return d;
  }

  deleteAt(i: number): void {
    const t = this.#t;
    const m = this.#mask;
    if (t[i * WORDS + TIP] !== 0) this.#tips--;
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
    this.#count--;
    const cap = this.#mask + 1;
    if (cap > 16 && this.#count * 8 < cap) this.#rehash(cap / 2);
  }

  #rehash(capacity: number): void {
    const old = this.#t;
    const t = new Int32Array(capacity * WORDS);
    const m = capacity - 1;
    for (let b = 0; b < old.length; b += WORDS) {
      if (old[b + ID_HI] === 0) continue;
      let i = old[b + ID_LO]! & m;
      while (t[i * WORDS + ID_HI] !== 0) i = (i + 1) & m;
      for (let w = 0; w < WORDS; w++) t[i * WORDS + w] = old[b + w]!;
    }
    this.#t = t;
    this.#mask = m;
  }
}
