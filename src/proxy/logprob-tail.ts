/**
 * Reading a cumulative `/generate` stream frame's logprob arrays past what earlier frames carried,
 * without parsing what was already consumed. SGLang's cumulative frames repeat every output
 * position so far (tokenizer_manager.py `convert_logprob_style` extends the request's lists and
 * sends them whole), so parsing each frame whole costs the square of the answer: 1 000 tokens
 * with top_logprobs 20 is ~300 MB of JSON. Each frame extends the previous one's arrays, written
 * by the same serializer, so a consumed element ends at the same offset from its array's `[` in
 * every frame: the cursor keeps that offset, the new tail is parsed on its own, and the rest of the
 * frame is parsed with both arrays emptied. The scans that remain are native string searches.
 * A frame where JSON.parse could read other arrays than the ones found (a key written twice, plain
 * or with a \u escape) is read whole instead, and so is every later frame of its choice.
 */
import { closingQuote } from "../util/json-scan.ts";

export const TOKEN_KEY = "output_token_logprobs";
export const TOP_KEY = "output_top_logprobs";

/** Where one array's consumed part ends. */
export interface ArrayCursor {
  /** Elements consumed. */
  seen: number;
  /**
   * Chars from the array's `[` to the `,` or `]` after its last consumed element (1 when none);
   * WHOLE once a frame was read whole (where that frame's consumed part ends is not known).
   */
  offset: number;
}

/** The offset of a cursor whose frames are read whole. */
export const WHOLE = -1;

export function newArrayCursor(): ArrayCursor {
  return { seen: 0, offset: 1 };
}

export interface SplitFrame {
  /** The frame's JSON text with both logprob arrays written as `[]`. */
  rest: string;
  /** Whether each array was found (the parsed rest's meta_info must hold it, else read the frame whole). */
  hasTokens: boolean;
  hasTops: boolean;
  /** New elements of each array (null: the frame has no such array, or it is null). */
  tokens: unknown[] | null;
  tops: unknown[] | null;
  /** JSON chars handed to JSON.parse for the tails (the work this module does). */
  tailChars: number;
  /** The token and top cursors after this frame. */
  next: [ArrayCursor, ArrayCursor];
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

const HEAD = '{"text":"';

/**
 * Whether JSON.parse could give a logprob key another value than the spans' (or one where none was
 * found): either key written once more plain, or a \u escape, which alone can spell a key's letters
 * otherwise. The text's value and the arrays hold no member of meta_info, so their escapes don't count.
 */
function mayRepeat(data: string, rest: string, spans: Span[]): boolean {
  for (const key of [TOKEN_KEY, TOP_KEY]) {
    const at = rest.indexOf(`"${key}"`);
    if (at !== -1 && rest.indexOf(`"${key}"`, at + 1) !== -1) return true;
  }
  let from = data.startsWith(HEAD) ? closingQuote(data, HEAD.length - 1) + 1 : 0;
  for (const s of spans) {
    if (data.slice(from, s.open).includes("\\u")) return true;
    from = Math.max(from, s.close);
  }
  return data.slice(from).includes("\\u");
}

/**
 * Splits a cumulative frame: its logprob arrays past `tokens`/`tops` and the rest of it. A string
 * says what is wrong with the frame; null: read it whole (readWholeFrame). Leaves the cursors as
 * they are: the caller sets them to `next` once it accepts the split.
 */
export function splitCumulativeFrame(data: string, tokens: ArrayCursor, tops: ArrayCursor): SplitFrame | string | null {
  if (tokens.offset === WHOLE || tops.offset === WHOLE) return null;
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
  if (mayRepeat(data, rest, spans)) return null;
  const next = (s: Span | undefined, cursor: ArrayCursor): ArrayCursor => (s?.tail ? { seen: cursor.seen + s.tail.length, offset: s.close - 1 - s.open } : cursor);
  return {
    rest,
    hasTokens: t !== undefined,
    hasTops: p !== undefined,
    tokens: t?.tail ?? null,
    tops: p?.tail ?? null,
    tailChars: (t?.tailChars ?? 0) + (p?.tailChars ?? 0),
    next: [next(t, tokens), next(p, tops)],
  };
}

/**
 * The logprob arrays of a frame read whole (its parsed meta_info) past what the cursors consumed,
 * as JSON.parse gives them; a string says what is wrong. The cursors advance and turn WHOLE.
 */
export function readWholeFrame(meta: Record<string, unknown>, tokens: ArrayCursor, tops: ArrayCursor): Pick<SplitFrame, "tokens" | "tops"> | string {
  const tails: (unknown[] | null)[] = [];
  for (const [key, cursor] of [[TOKEN_KEY, tokens], [TOP_KEY, tops]] as const) {
    const value = meta[key];
    if (value === undefined || value === null) tails.push(null);
    else if (!Array.isArray(value)) return `${key} is not an array`;
    else if (value.length < cursor.seen) return `${key} does not extend the previous frame's`;
    else tails.push(value.slice(cursor.seen));
  }
  for (const [tail, cursor] of [[tails[0], tokens], [tails[1], tops]] as const) {
    cursor.seen += tail?.length ?? 0;
    cursor.offset = WHOLE;
  }
  return { tokens: tails[0] ?? null, tops: tails[1] ?? null };
}
