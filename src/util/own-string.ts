/**
 * A copy of s that keeps nothing else alive. V8 makes `t.slice(a, b)` (13 characters and longer) a
 * view that holds all of t; a cache that stores such a slice of a request's prompt would hold the
 * whole prompt. `(" " + s)` is a rope that slicing flattens into one new string, of which the result
 * is a view: s's characters once, plus one.
 */
export function ownString(s: string): string {
  return (" " + s).slice(1);
}

const NOT_LATIN1 = /[^\u0000-\u00ff]/;
const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** Bytes a character of s can be held in: 1 when every character is Latin-1 (V8's one-byte strings), else 2. */
export function charWidth(s: string): 1 | 2 {
  return NOT_LATIN1.test(s) ? 2 : 1;
}

/**
 * ownString(s), held at one byte a character when every character is Latin-1. V8 keeps a slice or
 * copy of a two-byte string two bytes a character whatever its characters (a body with one emoji
 * makes every piece of it two-byte); decoding UTF-8 makes a one-byte string where it can.
 * `bytesPerChar` is what the copy holds per character (cache budgets count it).
 */
export function ownCompactString(s: string): { text: string; bytesPerChar: 1 | 2 } {
  if (charWidth(s) === 2) return { text: ownString(s), bytesPerChar: 2 };
  return { text: utf8Decoder.decode(utf8Encoder.encode(s)), bytesPerChar: 1 };
}
