/**
 * Media pad values (schedule_batch.py `_compute_pad_value`): every token of a media item is
 * overwritten with `MM_PAD_SHIFT_VALUE + hash % 2^30`. Caller `mm_hashes` strings are parsed by
 * SGLang with Python `int(s, 16)`, reproduced here including its sign/whitespace/`0x`/`_` rules.
 */
import { PyValueError } from "./py-errors.ts";
import { MM_PAD_SHIFT_VALUE } from "./sglang-constants.ts";
import { isPyWhitespace } from "../util/py-str.ts";

const PAD_MODULUS = 1n << 30n;

/** `1_000_000 + hash % 2^30` with Python's non-negative modulo. */
export function padValueFromHash(hash: bigint): number {
  const m = ((hash % PAD_MODULUS) + PAD_MODULUS) % PAD_MODULUS;
  return MM_PAD_SHIFT_VALUE + Number(m);
}

const DECIMAL_DIGIT = /^\p{Nd}$/u;

/** Value of a Unicode decimal digit: Nd characters come in contiguous runs of 0..9. */
function unicodeDigitValue(cp: number): number {
  let start = cp;
  while (start > 0 && DECIMAL_DIGIT.test(String.fromCodePoint(start - 1))) start--;
  return (cp - start) % 10;
}

function hexDigitValue(cp: number): number {
  if (cp >= 0x30 && cp <= 0x39) return cp - 0x30;
  if (cp >= 0x61 && cp <= 0x66) return cp - 0x61 + 10;
  if (cp >= 0x41 && cp <= 0x46) return cp - 0x41 + 10;
  if (cp > 0x7f && DECIMAL_DIGIT.test(String.fromCodePoint(cp))) return unicodeDigitValue(cp);
  return -1;
}

/** Python `int(s, 16)`; throws PyValueError for anything Python rejects. */
export function parsePythonHexInt(s: string): bigint {
  const bad = (): PyValueError => new PyValueError(`invalid literal for int() with base 16: ${JSON.stringify(s)}`);
  const cps = Array.from(s, (ch) => ch.codePointAt(0)!);
  let a = 0;
  let b = cps.length;
  while (a < b && isPyWhitespace(cps[a]!)) a++;
  while (b > a && isPyWhitespace(cps[b - 1]!)) b--;
  let negative = false;
  if (a < b && (cps[a] === 0x2b || cps[a] === 0x2d)) {
    negative = cps[a] === 0x2d;
    a++;
  }
  // Optional 0x/0X prefix; an underscore may directly follow it ("0x_1f").
  let underscoreOk = false;
  if (b - a >= 2 && cps[a] === 0x30 && (cps[a + 1] === 0x78 || cps[a + 1] === 0x58)) {
    a += 2;
    underscoreOk = true;
  }
  let value = 0n;
  let digits = 0;
  let lastWasUnderscore = false;
  for (let i = a; i < b; i++) {
    const cp = cps[i]!;
    if (cp === 0x5f) {
      if (lastWasUnderscore || (digits === 0 && !underscoreOk)) throw bad();
      lastWasUnderscore = true;
      continue;
    }
    const d = hexDigitValue(cp);
    if (d < 0) throw bad();
    value = value * 16n + BigInt(d);
    digits++;
    lastWasUnderscore = false;
  }
  if (digits === 0 || lastWasUnderscore) throw bad();
  return negative ? -value : value;
}

/** SGLang: caller mm_hash string → item hash → pad value. */
export function padValueFromMmHash(mmHash: string): number {
  return padValueFromHash(parsePythonHexInt(mmHash));
}

/** The 16-hex lower-case form the router sends for a 64-bit identity hash. */
export function mmHashHex(hash: bigint): string {
  return BigInt.asUintN(64, hash).toString(16).padStart(16, "0");
}
