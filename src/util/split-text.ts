import { lastAtOrBefore } from "./sorted-search.ts";

/**
 * A request body's text as three parts that are never joined on the warm path: `head`, the `gap`'s
 * pieces (text known from elsewhere: the turn chain's held messages) and `rest` (the bytes decoded
 * for this request). V8 keeps `head + gap + rest` as a rope and copies all of it into one string on
 * its first read (~0.2–0.4 ms for a 100k-token history); reads through this class touch only the
 * pieces they need. A body decoded whole is one piece (`of`), read as the string it is.
 */
export class SplitText {
  readonly head: string;
  readonly gap: readonly string[];
  readonly rest: string;
  readonly length: number;
  /** Where the gap starts and ends. */
  readonly gapStart: number;
  readonly gapEnd: number;
  /** The text as one string: a rope of the parts, never read here (reading it copies the whole text). */
  readonly joined: string;
  /** Where each gap piece starts. */
  private readonly starts: number[];
  private around: string | null = null;

  constructor(head: string, gap: readonly string[], rest: string) {
    this.head = head;
    this.gap = gap;
    this.rest = rest;
    let at = head.length;
    const starts: number[] = [];
    let joined = head;
    for (const p of gap) {
      starts.push(at);
      at += p.length;
      joined += p;
    }
    this.starts = starts;
    this.gapStart = head.length;
    this.gapEnd = at;
    this.length = at + rest.length;
    this.joined = rest.length > 0 ? joined + rest : joined;
  }

  /** A text read whole: one piece. */
  static of(text: string): SplitText {
    return new SplitText(text, [], "");
  }

  /** Whether part of the text is held apart (reads of it stay in its pieces). */
  get split(): boolean {
    return this.gap.length > 0;
  }

  /** The text without the gap: `head + rest`, one string (copied once, when first asked; small). */
  outside(): string {
    return (this.around ??= this.head + this.rest);
  }

  /** The gap piece holding position `i` (gapStart ≤ i < gapEnd). */
  private gapPiece(i: number): number {
    return lastAtOrBefore(this.starts, i);
  }

  charCodeAt(i: number): number {
    if (i < this.gapStart) return this.head.charCodeAt(i);
    if (i >= this.gapEnd) return this.rest.charCodeAt(i - this.gapEnd);
    const k = this.gapPiece(i);
    return this.gap[k]!.charCodeAt(i - this.starts[k]!);
  }

  /**
   * A string holding [start, end) and where it starts in the text: the piece the range lies in
   * (a read may look past the range inside it, where it equals the text), else the range's own slice.
   */
  region(start: number, end: number): { text: string; at: number } {
    if (end <= this.gapStart) return { text: this.head, at: 0 };
    if (start >= this.gapEnd) return { text: this.rest, at: this.gapEnd };
    if (start >= this.gapStart && end <= this.gapEnd) {
      const k = this.gapPiece(start);
      const s = this.starts[k]!;
      const p = this.gap[k]!;
      if (end <= s + p.length) return { text: p, at: s };
    }
    return { text: this.slice(start, end), at: start };
  }

  /** text.slice(start, end) for 0 ≤ start ≤ end (clamped to the length), made of the pieces it covers only. */
  slice(start: number, end: number = this.length): string {
    end = Math.min(end, this.length);
    if (start >= end) return "";
    if (this.rest.length === 0 && !this.split) return this.head.slice(start, end);
    let out = "";
    if (start < this.gapStart) out += this.head.slice(start, Math.min(end, this.gapStart));
    if (end > this.gapStart && start < this.gapEnd) {
      for (let k = this.gapPiece(Math.max(start, this.gapStart)); k < this.gap.length && this.starts[k]! < end; k++) {
        const s = this.starts[k]!;
        out += this.gap[k]!.slice(Math.max(start, s) - s, Math.min(end, s + this.gap[k]!.length) - s);
      }
    }
    if (end > this.gapEnd) out += this.rest.slice(Math.max(start, this.gapEnd) - this.gapEnd, end - this.gapEnd);
    return out;
  }

  /** text.substring(at, at + s.length) === s (util/text-at.ts textAt), read in the piece holding it. */
  matches(at: number, s: string): boolean {
    if (at + s.length > this.length) return at >= this.length && s.length === 0;
    // The gap's own piece there (a held entry's raw text compared with the body it gave): no read.
    if (at >= this.gapStart && at < this.gapEnd) {
      const k = this.gapPiece(at);
      if (this.starts[k] === at && this.gap[k] === s) return true;
    }
    const r = this.region(at, at + s.length);
    return r.text.substring(at - r.at, at - r.at + s.length) === s;
  }

  /** text.trim() === "": every piece is blank. */
  blank(): boolean {
    return this.head.trim() === "" && this.gap.every((p) => p.trim() === "") && this.rest.trim() === "";
  }
}
