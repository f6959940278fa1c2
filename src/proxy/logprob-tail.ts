/**
 * Reading a cumulative `/generate` stream frame's logprob arrays past what earlier frames carried,
 * without parsing what was already consumed. SGLang's cumulative frames repeat every output
 * position so far (tokenizer_manager.py `convert_logprob_style` extends the request's lists and
 * sends them whole), so parsing each frame whole costs the square of the answer: 1 000 tokens
 * with top_logprobs 20 is ~300 MB of JSON. Each frame extends the previous one's arrays, written
 * by the same serializer, so a consumed element ends at the same offset from its array's `[` in
 * every frame: the cursor keeps that offset, the new tail is parsed on its own, and the rest of the
 * frame is parsed with both arrays emptied. The scans that remain are native string searches.
 */
import { closingQuote } from "../util/json-scan.ts";

export const TOKEN_KEY = "output_token_logprobs";
export const TOP_KEY = "output_top_logprobs";

/** Where one array's consumed part ends. */
export interface ArrayCursor {
  /** Elements consumed. */
  seen: number;
  /** Chars from the array's `[` to the `,` or `]` after its last consumed element (1 when none). */
  offset: number;
}

export function newArrayCursor(): ArrayCursor {
  return { seen: 0, offset: 1 };
}

export interface SplitFrame {
  /** The frame's JSON text with both logprob arrays written as `[]`. */
  rest: string;
  /** New elements of each array (null: the frame has no such array, or it is null). */
  tokens: unknown[] | null;
  tops: unknown[] | null;
  /** JSON chars handed to JSON.parse for the tails (the work this module does). */
  tailChars: number;
}

/** A choice index the frame ends with (`…,"index":3}`: SGLang appends it for n > 1), else 0. */
export function trailingIndex(data: string): number {
  const m = /"index"\s*:\s*(\d{1,6})\s*\}\s*$/.exec(data.length > 64 ? data.slice(-64) : data);
  return m ? Number(m[1]) : 0;
}

interface Span {
  /** Index of the array's `[` (or of `null`). */
  open: number;
  /** Index just past the array's `]` (or `null`). */
  close: number;
  /** Parsed new elements, or null for a null value. */
  tail: unknown[] | null;
  tailChars: number;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** Index of the value of the first `"key":` in `data` (a key, not text inside a string), or -1. */
function valueOf(data: string, key: string): number {
  const needle = `"${key}"`;
  for (let i = data.indexOf(needle); i !== -1; i = data.indexOf(needle, i + 1)) {
    let j = i + needle.length;
    while (isSpace(data.charCodeAt(j))) j++;
    // Inside a JSON string a quote is escaped, so `"key"` followed by `:` is a member name.
    if (data.charCodeAt(j) !== 0x3a) continue;
    j++;
    while (isSpace(data.charCodeAt(j))) j++;
    return j;
  }
  return -1;
}

/** Index of the `]` closing the array whose elements continue at `from` (depth 0 there), or -1. */
function arrayEnd(data: string, from: number): number {
  let depth = 0;
  for (let i = from; i < data.length; i++) {
    const c = data.charCodeAt(i);
    if (c === 0x22) {
      i = closingQuote(data, i);
      if (i === -1) return -1;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (c === 0x5d || c === 0x7d) {
      if (depth === 0) return c === 0x5d ? i : -1;
      depth--;
    }
  }
  return -1;
}

/** The array under `key` past `cursor`; undefined when the key is absent; a string saying what is wrong. */
function spanOf(data: string, key: string, cursor: ArrayCursor): Span | undefined | string {
  const open = valueOf(data, key);
  if (open === -1) return undefined;
  if (data.startsWith("null", open)) return { open, close: open + 4, tail: null, tailChars: 0 };
  if (data.charCodeAt(open) !== 0x5b) return `${key} is not an array`;
  const at = open + cursor.offset;
  const c = data.charCodeAt(at);
  if (cursor.seen > 0 && c !== 0x2c && c !== 0x5d) return `${key} does not extend the previous frame's`;
  const first = cursor.seen > 0 && c === 0x2c ? at + 1 : at;
  const end = arrayEnd(data, first);
  if (end === -1) return `${key} is not a closed array`;
  const text = `[${data.slice(first, end)}]`;
  let tail: unknown;
  try {
    tail = JSON.parse(text);
  } catch {
    return `${key} is not valid JSON`;
  }
  if (!Array.isArray(tail)) return `${key} is not an array`;
  return { open, close: end + 1, tail, tailChars: text.length };
}

/**
 * Splits a cumulative frame: its logprob arrays past `tokens`/`tops` and the rest of it. Advances
 * the cursors only on success; a string says what is wrong with the frame.
 */
export function splitCumulativeFrame(data: string, tokens: ArrayCursor, tops: ArrayCursor): SplitFrame | string {
  const t = spanOf(data, TOKEN_KEY, tokens);
  if (typeof t === "string") return t;
  const p = spanOf(data, TOP_KEY, tops);
  if (typeof p === "string") return p;
  const spans = [t, p].filter((s): s is Span => s !== undefined).sort((a, b) => a.open - b.open);
  if (spans.length === 2 && spans[0]!.close > spans[1]!.open) return "logprob arrays overlap";
  let rest = "";
  let from = 0;
  for (const s of spans) {
    rest += data.slice(from, s.open) + (s.tail === null ? "null" : "[]");
    from = s.close;
  }
  rest += data.slice(from);
  for (const [s, cursor] of [[t, tokens], [p, tops]] as const) {
    if (!s?.tail) continue;
    cursor.seen += s.tail.length;
    cursor.offset = s.close - 1 - s.open;
  }
  return { rest, tokens: t?.tail ?? null, tops: p?.tail ?? null, tailChars: (t?.tailChars ?? 0) + (p?.tailChars ?? 0) };
}
