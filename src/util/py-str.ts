/**
 * Python's notion of whitespace, where SGLang's Python code strips or splits text the edge must
 * read the same way. Not JS `\s`: Python's `str.isspace()` (Py_UNICODE_ISSPACE: bidirectional
 * class WS, B or S, or category Zs) includes U+001C–U+001F and U+0085 and excludes U+FEFF. Every
 * such code point is in the BMP and none is a surrogate, so scanning UTF-16 code units is exact.
 *
 * Strips scan from the ends in O(n): a `/\s+$/` regex backtracks quadratically over a long run of
 * whitespace that does not reach the end (40 k spaces: ~1 s), and the text stripped here can be a
 * model's output, which a client can steer.
 */

/** Python `chr(c).isspace()` for a UTF-16 code unit. */
export function isPyWhitespace(c: number): boolean {
  return (
    (c >= 0x09 && c <= 0x0d) ||
    (c >= 0x1c && c <= 0x20) ||
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

/** Python `s.strip()` (no argument). */
export function pyStrip(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && isPyWhitespace(s.charCodeAt(start))) start++;
  while (end > start && isPyWhitespace(s.charCodeAt(end - 1))) end--;
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

/** Python `s.rstrip()` (no argument). */
export function pyRstrip(s: string): string {
  let end = s.length;
  while (end > 0 && isPyWhitespace(s.charCodeAt(end - 1))) end--;
  return end === s.length ? s : s.slice(0, end);
}
