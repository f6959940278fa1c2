import { lastAtOrBefore } from "./sorted-search.ts";

/**
 * A text held as consecutive pieces (the turn chain's stored prompt pieces, then the request's own
 * part), read without joining them. V8 flattens a concatenated string on its first search, slice
 * or compare: a copy of the whole prompt on every turn (~0.4 ms at 100k tokens in Node), where
 * the prefix cache needs only the prompt's last part and a compare that can go piece by piece.
 */
export class PieceText {
  readonly length: number;
  private readonly pieces: readonly string[];
  /** Where each piece starts in the text. */
  private readonly starts: readonly number[];
  /** Each piece's identity (null: none); see the constructor. */
  private readonly ids: readonly (object | null)[];
  /** Each piece's identity of the text from the start through it (null: none); see the constructor. */
  private readonly heads: readonly (object | null)[];
  /** Whether some piece has an identity (matches can skip a compare). */
  readonly identified: boolean;
  private joined: string | null;

  /**
   * `ids[k]`: an identity of `pieces[k]` (the same object stands for the same text, always: the
   * turn chain's entries' rendered texts), so a compare made once need not be made again
   * (matches with a record); null or absent where a piece has none. `heads[k]`: likewise an
   * identity of pieces[0..k] joined (the turn chain's entries' whole chains: headThrough).
   */
  constructor(pieces: readonly string[], ids: readonly (object | null)[] = [], heads: readonly (object | null)[] = []) {
    // One slot a piece, filled in place and cut to the pieces kept (a long conversation has a piece or two a turn).
    const n = pieces.length;
    const kept = new Array<string>(n);
    const keptIds = new Array<object | null>(n);
    const keptHeads = new Array<object | null>(n);
    const starts = new Array<number>(n);
    let at = 0;
    let m = 0;
    let identified = false;
    for (let k = 0; k < n; k++) {
      const p = pieces[k]!;
      if (p.length === 0) continue;
      const id = ids[k] ?? null;
      kept[m] = p;
      keptIds[m] = id;
      keptHeads[m] = heads[k] ?? null;
      starts[m++] = at;
      at += p.length;
      identified ||= id !== null;
    }
    kept.length = keptIds.length = keptHeads.length = starts.length = m;
    this.pieces = kept;
    this.ids = keptIds;
    this.heads = keptHeads;
    this.identified = identified;
    this.starts = starts;
    this.length = at;
    this.joined = kept.length === 1 ? kept[0]! : kept.length === 0 ? "" : null;
  }

  static of(text: string): PieceText {
    return new PieceText([text]);
  }

  /** Held as one string (slices of it are views of that string). */
  get single(): boolean {
    return this.pieces.length <= 1;
  }

  /** The whole text as one string (joined once, when first asked). */
  toString(): string {
    return (this.joined ??= this.pieces.join(""));
  }

  /** Index of the piece holding position `i` (0 ≤ i < length). */
  private pieceAt(i: number): number {
    return lastAtOrBefore(this.starts, i);
  }

  /** text.slice(start, end) for 0 ≤ start ≤ end ≤ length, made of the pieces it covers only. */
  slice(start: number, end: number): string {
    if (this.joined !== null) return this.joined.slice(start, end);
    if (start >= end) return "";
    let k = this.pieceAt(start);
    let out = "";
    for (let at = start; at < end; k++) {
      const s = this.starts[k]!;
      const p = this.pieces[k]!;
      const stop = Math.min(end, s + p.length);
      out += p.slice(at - s, stop - s);
      at = stop;
    }
    return out;
  }

  /**
   * text.slice(start, start + s.length) === s, compared piece by piece. With `seen` (s's own record
   * of pieces found equal: an identity and where that piece starts relative to `s`), a listed part
   * is not compared again (the same identity at the same offset is the same text over the same
   * characters of `s`) and each identified part found equal is added to it.
   */
  matches(start: number, s: string, seen: SeenPieces | null = null): boolean {
    if (start < 0 || start + s.length > this.length) return false;
    if (this.joined !== null) return this.joined.slice(start, start + s.length) === s;
    let k = this.pieceAt(start);
    for (let at = start, done = 0; done < s.length; k++) {
      const base = this.starts[k]!;
      const p = this.pieces[k]!;
      const id = seen === null ? null : (this.ids[k] ?? null);
      const n = Math.min(s.length - done, base + p.length - at);
      if (id === null || !seen!.has(id, base - start)) {
        if (p.slice(at - base, at - base + n) !== s.slice(done, done + n)) return false;
        if (id !== null) seen!.add(id, base - start);
      }
      at += n;
      done += n;
    }
    return true;
  }

  /**
   * An identity of a text that this one starts with, at least `end` characters long (the head of
   * the piece holding position end - 1): the same object stands for the same text, so a prefix
   * found equal to it once is this text's [0, end) again. Null where that piece has none.
   */
  headThrough(end: number): object | null {
    if (end <= 0 || end > this.length) return null;
    return this.heads[this.pieceAt(end - 1)] ?? null;
  }

  /** text.lastIndexOf(needle, from): searched from the last pieces back, occurrences across a boundary included. */
  lastIndexOf(needle: string, from: number = this.length): number {
    if (this.joined !== null) return this.joined.lastIndexOf(needle, from);
    const n = needle.length;
    if (n === 0) return Math.max(0, Math.min(from, this.length));
    // As String.prototype.lastIndexOf: a negative start is 0.
    const limit = Math.min(Math.max(from, 0), this.length - n);
    if (limit < 0) return -1;
    // Piece by piece from the last: an occurrence that starts in a piece and runs past its end
    // starts after any that fits inside it, so it is looked for first.
    for (let k = this.pieceAt(limit); k >= 0; k--) {
      const base = this.starts[k]!;
      const end = base + this.pieces[k]!.length;
      const lo = Math.max(base, end - n + 1);
      if (end < this.length && limit >= lo) {
        const across = this.slice(lo, Math.min(this.length, end + n - 1)).lastIndexOf(needle, Math.min(limit, end - 1) - lo);
        if (across !== -1) return lo + across;
      }
      const inside = this.pieces[k]!.lastIndexOf(needle, limit - base);
      if (inside !== -1) return base + inside;
    }
    return -1;
  }
}

/**
 * The pieces (identity, offset) a text was found equal to over their overlap (PieceText.matches):
 * the latest `capacity`, oldest forgotten first.
 */
export class SeenPieces {
  private readonly ids: object[] = [];
  private readonly offsets: number[] = [];
  private next = 0;
  readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  has(id: object, offset: number): boolean {
    for (let i = 0; i < this.ids.length; i++) if (this.ids[i] === id && this.offsets[i] === offset) return true;
    return false;
  }

  add(id: object, offset: number): void {
    if (this.ids.length < this.capacity) {
      this.ids.push(id);
      this.offsets.push(offset);
      return;
    }
    this.ids[this.next] = id;
    this.offsets[this.next] = offset;
    this.next = (this.next + 1) % this.capacity;
  }
}
