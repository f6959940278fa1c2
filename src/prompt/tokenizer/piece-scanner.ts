/**
 * The Qwen2 pre-tokenizer split (pretokenize.ts states it as a regex) as a hand-written scanner over
 * the reference's exact `\p{L}`/`\p{N}` (unicode-patch.ts). V8 runs the regex at ~4 ms per 30k
 * tokens of prose, half of all tokenizing; the scanner reads each code unit once, through a table
 * for ASCII, and allocates nothing. Tests hold it to the regex over the same classes
 * (test/unit/prompt/tokenizer-unicode.test.ts) and to the Rust binding's ids.
 *
 * Alternatives of the regex, tried in order at each position (leftmost-first, as Oniguruma does):
 *   1 '(?i:s|t|re|ve|m|ll|d)      2 [^\r\n L N]?L+      3 N      4 ' '?[^\s L N]+[\r\n]*
 *   5 \s*[\r\n]+                  6 \s+(?!\S)           7 \s+
 */
import { codePointSet, hasCodePoint, type CodePointSet } from "./skew.ts";
import { L, N } from "./unicode-patch.ts";

const LETTER = 1;
const NUMBER = 2;
/** Oniguruma's `\s`: the 25 White_Space code points (ONIG_WS in pretokenize.ts). */
const SPACE = 4;
/** \r and \n (also SPACE). */
const NEWLINE = 8;
/** Neither letter, number nor space: "other" is class 0. */
const OTHER = 0;

const ASCII_CLASS = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  if ((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)) ASCII_CLASS[c] = LETTER;
  else if (c >= 0x30 && c <= 0x39) ASCII_CLASS[c] = NUMBER;
  else if (c === 0x0a || c === 0x0d) ASCII_CLASS[c] = SPACE | NEWLINE;
  else if (c === 0x09 || c === 0x0b || c === 0x0c || c === 0x20) ASCII_CLASS[c] = SPACE;
}

interface ExactClasses {
  letter: CodePointSet;
  number: CodePointSet;
}
let exact: ExactClasses | null = null;

/** The reference's letter and number sets, built on first use (2 × 139 KB). */
export function exactClasses(): ExactClasses {
  exact ??= { letter: codePointSet(L), number: codePointSet(N) };
  return exact;
}

function isOnigSpace(c: number): boolean {
  return c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

/** Splits text into pieces: pieceEnd(text, i) is where the piece starting at i ends (the next one starts). */
export class PieceScanner {
  private readonly letter: CodePointSet;
  private readonly number: CodePointSet;

  constructor() {
    ({ letter: this.letter, number: this.number } = exactClasses());
  }

  /** Class of the code point at i (i < text.length); a lone surrogate is OTHER, as the `u` regex sees it. */
  private classAt(text: string, i: number): number {
    const c = text.charCodeAt(i);
    if (c < 0x80) return ASCII_CLASS[c]!;
    const cp = c >= 0xd800 && c <= 0xdbff ? text.codePointAt(i)! : c;
    if (hasCodePoint(this.letter, cp)) return LETTER;
    if (hasCodePoint(this.number, cp)) return NUMBER;
    return isOnigSpace(cp) ? SPACE : OTHER;
  }

  /** End of the piece that starts at i (i < text.length). */
  pieceEnd(text: string, i: number): number {
    const len = text.length;
    const c = text.charCodeAt(i);
    if (c === 0x27) {
      const contraction = this.contractionEnd(text, i);
      if (contraction !== 0) return contraction;
    }
    const cls = this.classAt(text, i);
    const width = widthAt(text, i);
    if (cls === LETTER) return this.letterRunEnd(text, i + width);
    if (cls === NUMBER) return i + width;
    // 2: one character that is not \r, \n, a letter or a number, then letters.
    if ((cls & NEWLINE) === 0 && i + width < len && this.classAt(text, i + width) === LETTER) return this.letterRunEnd(text, i + width);
    // 4: an optional ' ', then "other" characters, then newlines.
    let j = -1;
    if (cls === OTHER) j = i;
    else if (c === 0x20 && i + 1 < len && this.classAt(text, i + 1) === OTHER) j = i + 1;
    if (j >= 0) {
      while (j < len && this.classAt(text, j) === OTHER) j += widthAt(text, j);
      while (j < len && (text.charCodeAt(j) === 0x0a || text.charCodeAt(j) === 0x0d)) j++;
      return j;
    }
    // A run of spaces (every Oniguruma space is one code unit). 5: up to its last newline;
    // 6: all but its last space unless it ends the text; 7: all of it.
    let end = i;
    let lastNewline = -1;
    while (end < len) {
      const k = this.classAt(text, end);
      if ((k & SPACE) === 0) break;
      if ((k & NEWLINE) !== 0) lastNewline = end;
      end++;
    }
    if (lastNewline >= 0) return lastNewline + 1;
    if (end < len && end - i >= 2) return end - 1;
    return end;
  }

  /** 1: `'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d` in any case (and `'ſ`, which case-folds to s); 0 if none. */
  private contractionEnd(text: string, i: number): number {
    const d = text.charCodeAt(i + 1);
    // | 0x20 lower-cases an ASCII letter and maps nothing else onto one.
    const lower = d | 0x20;
    if (lower === 0x73 || lower === 0x74 || lower === 0x6d || lower === 0x64 || d === 0x17f) return i + 2;
    const e = text.charCodeAt(i + 2) | 0x20;
    if ((lower === 0x72 || lower === 0x76) && e === 0x65) return i + 3;
    if (lower === 0x6c && e === 0x6c) return i + 3;
    return 0;
  }

  private letterRunEnd(text: string, j: number): number {
    const len = text.length;
    while (j < len) {
      const c = text.charCodeAt(j);
      if (c < 0x80) {
        if (ASCII_CLASS[c] !== LETTER) break;
        j++;
      } else {
        if (this.classAt(text, j) !== LETTER) break;
        j += widthAt(text, j);
      }
    }
    return j;
  }
}

/**
 * pieceEnd over a text's UTF-8 bytes[0, len), at byte i, where the piece there, and every character
 * the regex reads to decide it, is ASCII (an ASCII character's byte is its code unit): the class
 * table alone decides it, with no call per character. -1 where a non-ASCII character would take
 * part (é is \p{L}, U+00A0 is \s, ſ ends `'s`, — is "other"): the caller asks pieceEnd. Prose and code are mostly such pieces (words, spaces, punctuation, digits), so the
 * encoder's memo probe for them (engine.ts) runs without the general scan.
 */
export function asciiPieceEnd(text: Uint8Array, i: number, len: number): number {
  const c = text[i]!;
  if (c >= 0x80) return -1;
  const cls = ASCII_CLASS[c]!;
  if (cls === LETTER) return asciiLetterRunEnd(text, i + 1, len);
  if (cls === NUMBER) return i + 1;
  const next = i + 1 < len ? text[i + 1]! : -1;
  if (next >= 0x80) return -1;
  if (c === 0x27 && next >= 0) {
    // 1: contractionEnd's test; an ASCII `next` leaves out ſ, and | 0x20 maps no non-ASCII onto e or l.
    const lower = next | 0x20;
    if (lower === 0x73 || lower === 0x74 || lower === 0x6d || lower === 0x64) return i + 2;
    const e = (i + 2 < len ? text[i + 2]! : 0) | 0x20;
    if ((lower === 0x72 || lower === 0x76) && e === 0x65) return i + 3;
    if (lower === 0x6c && e === 0x6c) return i + 3;
  }
  const nextCls = next >= 0 ? ASCII_CLASS[next]! : -1;
  // 2: one character that is not \r, \n, a letter or a number, then letters.
  if ((cls & NEWLINE) === 0 && nextCls === LETTER) return asciiLetterRunEnd(text, i + 2, len);
  // 4: an optional ' ', then "other" characters, then newlines.
  let j = -1;
  if (cls === OTHER) j = i + 1;
  else if (c === 0x20 && nextCls === OTHER) j = i + 2;
  if (j >= 0) {
    for (; j < len; j++) {
      const d = text[j]!;
      if (d >= 0x80) return -1;
      if (ASCII_CLASS[d] !== OTHER) break;
    }
    while (j < len && (text[j]! === 0x0a || text[j]! === 0x0d)) j++;
    return j;
  }
  // 5, 6, 7: a run of spaces, as in pieceEnd.
  let end = i;
  let lastNewline = -1;
  for (; end < len; end++) {
    const d = text[end]!;
    if (d >= 0x80) return -1;
    const k = ASCII_CLASS[d]!;
    if ((k & SPACE) === 0) break;
    if ((k & NEWLINE) !== 0) lastNewline = end;
  }
  if (lastNewline >= 0) return lastNewline + 1;
  if (end < len && end - i >= 2) return end - 1;
  return end;
}

/** End of the run of ASCII letters from j; -1 when a non-ASCII code unit stops it (it may be \p{L}). */
function asciiLetterRunEnd(text: Uint8Array, j: number, len: number): number {
  for (; j < len; j++) {
    const c = text[j]!;
    if (!isAsciiLetter(c)) return c < 0x80 ? j : -1;
  }
  return j;
}

function isAsciiLetter(c: number): boolean {
  // | 0x20 lower-cases an ASCII letter and maps no other code unit onto a..z.
  return ((c | 0x20) - 0x61) >>> 0 < 26;
}

/** Code units of the code point at i: 2 for a surrogate pair, else 1. */
function widthAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c < 0xd800 || c > 0xdbff) return 1;
  const d = text.charCodeAt(i + 1);
  return d >= 0xdc00 && d <= 0xdfff ? 2 : 1;
}
