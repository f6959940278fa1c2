/**
 * The generated Unicode patch at run time (docs/tokenizer.md, "Unicode patch"; made by
 * scripts/gen-unicode-patch.mjs).
 * Text holding a `skew` code point is encoded on a slow path whose NFC leaves the reference's inert
 * code points alone (both paths split with the reference's exact `\p{L}`/`\p{N}`: piece-scanner.ts).
 */
import { nfcBarrier, skew } from "./unicode-patch.ts";

/** Bit set over all code points (139 KB). */
export type CodePointSet = Uint8Array;

export function hasCodePoint(set: CodePointSet, c: number): boolean {
  return (set[c >>> 3]! & (1 << (c & 7))) !== 0;
}

const CLASS_ATOM = /\\u\{([0-9a-f]+)\}|\\u([0-9a-f]{4})|([0-9A-Za-z])/y;

/** Parses a class body as scripts/gen-unicode-patch.mjs writes it (escapes, literal alphanumerics, ranges). */
export function codePointSet(body: string): CodePointSet {
  const set = new Uint8Array(0x110000 >>> 3);
  const atom = (at: number): [number, number] => {
    CLASS_ATOM.lastIndex = at;
    const m = CLASS_ATOM.exec(body);
    if (!m) throw new Error(`unicode patch: bad class body at ${at}`);
    return [m[3] !== undefined ? m[3].charCodeAt(0) : parseInt(m[1] ?? m[2]!, 16), CLASS_ATOM.lastIndex];
  };
  for (let i = 0; i < body.length; ) {
    const [lo, next] = atom(i);
    let hi = lo;
    i = next;
    if (body[i] === "-") [hi, i] = atom(i + 1);
    addRange(set, lo, hi);
  }
  return set;
}

function addRange(set: CodePointSet, lo: number, hi: number): void {
  while (lo <= hi && (lo & 7) !== 0) set[lo >>> 3]! |= 1 << (lo++ & 7);
  while (hi >= lo && (hi & 7) !== 7) set[hi >>> 3]! |= 1 << (hi-- & 7);
  if (lo < hi) set.fill(0xff, lo >>> 3, (hi >>> 3) + 1);
}

let skewSet: CodePointSet | null = null;

/** Code points where a runtime's NFC or `\p{L}`/`\p{N}` may disagree with the reference. */
export function skewCodePoints(): CodePointSet {
  return (skewSet ??= codePointSet(skew));
}

/** True when s holds a skew code point (lone surrogates never are). */
export function hasSkew(s: string): boolean {
  const set = skewCodePoints();
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x300) continue;
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (hasCodePoint(set, c)) return true;
  }
  return false;
}

let barrierSet: CodePointSet | null = null;

function barrierCodePoints(): CodePointSet {
  // The generator writes `skew = nfcBarrier` when the two sets coincide: share the bit set then.
  barrierSet ??= nfcBarrier === skew ? skewCodePoints() : codePointSet(nfcBarrier);
  return barrierSet;
}

/**
 * NFC as the reference computes it: barrier code points are inert starters there, so each run
 * between them is normalized on its own and the barriers are copied verbatim.
 */
export function referenceNfc(s: string): string {
  const barrier = barrierCodePoints();
  let out = "";
  let run = 0;
  for (let i = 0; i < s.length; ) {
    const c = s.codePointAt(i)!;
    const w = c > 0xffff ? 2 : 1;
    if (c >= 0x300 && hasCodePoint(barrier, c)) {
      out += s.slice(run, i).normalize("NFC") + s.slice(i, i + w);
      run = i + w;
    }
    i += w;
  }
  return run === 0 ? s.normalize("NFC") : out + s.slice(run).normalize("NFC");
}
