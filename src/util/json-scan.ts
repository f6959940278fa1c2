/**
 * Scanning JSON text without parsing it: native indexOf jumps over strings, a character loop over
 * the rest. Used before JSON.parse (depth bounds), to find one member's text in a large body, and
 * to keep long strings' source text while parsing (parseRecordingLiterals).
 */

/** Whether the character at `j` is escaped: preceded by an odd run of backslashes. */
function isEscaped(text: string, j: number): boolean {
  let k = j - 1;
  while (k >= 0 && text.charCodeAt(k) === 0x5c) k--;
  return (j - 1 - k) % 2 === 1;
}

/** Index of the quote that closes the string opened at `open` (a `"`), or -1 when unterminated. */
export function closingQuote(text: string, open: number): number {
  for (let j = text.indexOf('"', open + 1); j !== -1; j = text.indexOf('"', j + 1)) if (!isEscaped(text, j)) return j;
  return -1;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * [start, end) of the value of member `key` of the top-level object in valid JSON `text` (the last
 * one when the key repeats, as JSON.parse keeps), or null when there is none. Keys written with
 * escapes are compared decoded.
 */
export function topLevelMemberSpan(text: string, key: string): [number, number] | null {
  let depth = 0;
  let found: [number, number] | null = null;
  let start = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const close = closingQuote(text, i);
      if (close === -1) return null;
      if (depth === 1) {
        let j = close + 1;
        while (j < text.length && isSpace(text.charCodeAt(j))) j++;
        if (text.charCodeAt(j) === 0x3a) {
          const raw = text.slice(i + 1, close);
          if ((raw.includes("\\") ? (JSON.parse(text.slice(i, close + 1)) as string) : raw) === key) start = j + 1;
          i = j;
          continue;
        }
      }
      i = close;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (c === 0x5d || c === 0x7d) {
      if (--depth === 0 && start !== -1) return [start, i];
    } else if (c === 0x2c && depth === 1 && start !== -1) {
      found = [start, i];
      start = -1;
    }
  }
  return found;
}

/** `\u` or `\/` anywhere, whether or not its backslash opens an escape. */
const U_OR_SLASH_AFTER_BACKSLASH = /\\[u/]/;

/**
 * Whether the text between a valid JSON string's quotes is exactly what JSON.stringify writes for
 * its value: no `\u` and no `\/` escape (the other escapes are JSON.stringify's own, and valid JSON
 * has no raw control character). Most text holds neither pair at all: one regex scan (Node 22: ~5 µs
 * for 12.5k characters of prose, half a walk's time, a third of two indexOf passes). Where one
 * occurs, the text is walked escape by escape from the start: a backslash reached so opens an
 * escape and the next character is what it escapes (a `\\` pair is skipped whole), which tells
 * an escape from a pair whose backslash is itself escaped, in any text.
 */
export function isCanonicalEscaping(inner: string): boolean {
  if (!U_OR_SLASH_AFTER_BACKSLASH.test(inner)) return true;
  for (let j = inner.indexOf("\\"); j !== -1; j = inner.indexOf("\\", j + 2)) {
    const c = inner.charCodeAt(j + 1);
    if (c === 0x75 || c === 0x2f) return false;
  }
  return true;
}

/** A parsed string and its source text, which is exactly JSON.stringify's escaping of it. */
export interface JsonLiteral {
  value: string;
  escaped: string;
}

/** Shortest string whose source text parseRecordingLiterals keeps (shorter ones cost little to escape again). */
export const LITERAL_MIN_CHARS = 2048;

/**
 * JSON.parse that also keeps, for long string values under a key in `keys`, their source text
 * (between the quotes) when it is exactly what JSON.stringify would write for them: it has no
 * `\u` and no `\/` escape. The other escapes (`\" \\ \b \f \n \r \t`) are the ones JSON.stringify
 * uses, and valid JSON has no raw control character, so such text is the canonical escaping and
 * can be sent on without escaping the string again. Uses the reviver's source text (V8 ≥ 11.4;
 * where the runtime has none, nothing is kept). Appended to `into` in document order. (A list, not a
 * Map keyed by the text: V8 copies a string into its string table to use it as a Map key, and these
 * are the longest strings of the request.)
 */
export function parseRecordingLiterals(text: string, keys: ReadonlySet<string>, into: JsonLiteral[]): unknown {
  // A text this short holds no such string: no reviver walk for it.
  if (text.length < LITERAL_MIN_CHARS + 2) return JSON.parse(text);
  return JSON.parse(text, (key: string, value: unknown, context?: { source?: string }) => {
    if (typeof value === "string" && value.length >= LITERAL_MIN_CHARS && keys.has(key) && context?.source !== undefined) {
      const inner = context.source.slice(1, -1);
      if (isCanonicalEscaping(inner)) into.push({ value, escaped: inner });
    }
    return value;
  });
}
