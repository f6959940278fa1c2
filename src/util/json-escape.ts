/**
 * JSON string escaping of long texts without one large allocation: the text is escaped a slice at
 * a time onto a list of chunks, and where a string whose canonical escaping is already at hand (a
 * client's JSON literal, a stored message's raw text) occurs in it, that escaping is the chunk.
 * JSON escapes one UTF-16 unit at a time except surrogate pairs, and no chunk boundary splits a
 * pair, so the chunks concatenate to JSON.stringify(text) without its quotes. Used by the
 * `/generate` body (proxy/generate-body.ts) and by the turn chain's stored pieces (prompt/turn-chain.ts).
 */
import type { JsonLiteral } from "./json-scan.ts";

/** UTF-16 units per escaped slice (well below V8's large-object size even when escaped 6×). */
const SLICE_UNITS = 8192;

/** Literals looked for in vain before the rest of the text is escaped slice by slice (each miss is a scan). */
const MAX_LITERAL_MISSES = 4;

/** Characters an escaping call escaped itself (tests read it: a turn's work follows its new text). */
export interface EscapeWork {
  escapedChars: number;
}

/** Where escaped chunks go: a list of strings, or of body parts that also holds bytes (generate-body.ts). */
export type ChunkSink = Pick<string[], "push">;

/** Escapes text[start, end) in slices onto `chunks`; neither end splits a surrogate pair. */
function escapeJsonSlices(chunks: ChunkSink, text: string, start: number, end: number, work: EscapeWork | null = null): void {
  if (work) work.escapedChars += end - start;
  while (start < end) {
    let stop = Math.min(end, start + SLICE_UNITS);
    // A high surrogate stays with its low surrogate (the text is well-formed: validated upstream).
    if (stop < end && (text.charCodeAt(stop - 1) & 0xfc00) === 0xd800) stop--;
    chunks.push(JSON.stringify(text.slice(start, stop)).slice(1, -1));
    start = stop;
  }
}

/**
 * Escapes `text` onto `chunks`, taking each of `literals` (in order) where it next occurs in the
 * text as its given escaping instead of escaping it again; the rest is escaped in slices. Returns
 * the characters of the literals' escaping it took (chunks that are the literals' own strings).
 * `found`, when given, gets where in `text` each literal taken occurs.
 */
export function escapeJsonReusing(chunks: ChunkSink, text: string, literals: readonly JsonLiteral[], work: EscapeWork | null = null, found: Map<JsonLiteral, number> | null = null): number {
  let cursor = 0;
  let misses = 0;
  let reused = 0;
  for (const literal of literals) {
    const { value, escaped } = literal;
    // A literal that begins with a low or ends with a high surrogate could split a pair: not reused.
    if ((value.charCodeAt(0) & 0xfc00) === 0xdc00 || (value.charCodeAt(value.length - 1) & 0xfc00) === 0xd800) continue;
    const at = text.indexOf(value, cursor);
    if (at === -1) {
      if (++misses === MAX_LITERAL_MISSES) break;
      continue;
    }
    escapeJsonSlices(chunks, text, cursor, at, work);
    chunks.push(escaped);
    found?.set(literal, at);
    reused += escaped.length;
    cursor = at + value.length;
  }
  escapeJsonSlices(chunks, text, cursor, text.length, work);
  return reused;
}
