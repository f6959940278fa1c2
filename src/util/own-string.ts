/**
 * A copy of s that keeps nothing else alive. V8 makes `t.slice(a, b)` (13 characters and longer) a
 * view that holds all of t; a cache that stores such a slice of a request's prompt would hold the
 * whole prompt. `(" " + s)` is a rope that slicing flattens into one new string, of which the result
 * is a view: s's characters once, plus one.
 */
export function ownString(s: string): string {
  return (" " + s).slice(1);
}

const NOT_ASCII = /[^\u0000-\u007f]/;
const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * ownString(s), held at one byte a character when s is ASCII. V8 keeps a slice or copy of a two-byte
 * string at two bytes a character whatever its characters (a body with one emoji makes every piece
 * of it two-byte); decoding ASCII bytes makes a one-byte string, in Node (V8's UTF-8 decoder) and in
 * workerd, whose TextDecoder reads ASCII input as Latin-1 (src/workerd/api/encoding.c++,
 * IcuDecoder::decode, commit 022e1a2cc8168ceb751b5da99afe1d11cd953211) but decodes other input into
 * UTF-16. Any other text is copied as it is and counted at two bytes a character. `bytesPerChar` is
 * what the copy holds per character (cache budgets count it).
 */
export function ownCompactString(s: string): { text: string; bytesPerChar: 1 | 2 } {
  if (NOT_ASCII.test(s)) return { text: ownString(s), bytesPerChar: 2 };
  return { text: utf8Decoder.decode(utf8Encoder.encode(s)), bytesPerChar: 1 };
}
