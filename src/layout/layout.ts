/**
 * The token run a worker builds for one media item, as pieces (vision_start / text / pads /
 * vision_end) and rendered to token ids. Every pad token carries the item's pad value (SGLang pads
 * the whole offset range of an item, all Qwen3 groups included); vision tokens and timestamp text
 * are not padded.
 */
import type { VisionTokenIds } from "./model-geometry.ts";
import type { ImageGeometry, VideoGeometry } from "./pipeline.ts";

export type Modality = "image" | "video";

export type LayoutPiece =
  | { kind: "vision_start" }
  | { kind: "vision_end" }
  | { kind: "text"; text: string }
  | { kind: "pad"; modality: Modality; count: number };

/** Which template tokens the worker's processor replaces for a video (Qwen3-VL timestamped layout). */
export type PlaceholderTarget = "bare_video_token" | "vision_wrapped_video_token";
export type LayoutVariant = "repeated_pad" | "timestamped_groups";

const VS: LayoutPiece = Object.freeze({ kind: "vision_start" });
const VE: LayoutPiece = Object.freeze({ kind: "vision_end" });

export function imageLayout(g: Pick<ImageGeometry, "padCount">): LayoutPiece[] {
  return [VS, { kind: "pad", modality: "image", count: g.padCount }, VE];
}

/**
 * Video layout. `repeated_pad` (Qwen2/2.5): vs + pads + ve. `timestamped_groups` (Qwen3-VL): per
 * group `"<t seconds>"` + vs + pads + ve, wrapped in the template's outer vs…ve when the worker
 * replaces only the bare video token (transformers >= 5.10).
 */
export function videoLayout(
  g: Pick<VideoGeometry, "padCount" | "numGroups" | "tokensPerGroup" | "timestampStrings">,
  variant: LayoutVariant,
  target: PlaceholderTarget,
): LayoutPiece[] {
  if (variant === "repeated_pad") return [VS, { kind: "pad", modality: "video", count: g.padCount }, VE];
  const ts = g.timestampStrings;
  if (!ts || ts.length !== g.numGroups) throw new Error("timestamped layout needs one timestamp per temporal group");
  const out: LayoutPiece[] = [];
  if (target === "bare_video_token") out.push(VS);
  const pad: LayoutPiece = { kind: "pad", modality: "video", count: g.tokensPerGroup };
  for (let i = 0; i < g.numGroups; i++) out.push({ kind: "text", text: ts[i]! }, VS, pad, VE);
  if (target === "bare_video_token") out.push(VE);
  return out;
}

export type EncodeText = (text: string) => readonly number[];

interface Memo {
  map: Map<string, readonly number[]>;
  bytes: number;
}
const memoByEncoder = new WeakMap<EncodeText, Memo>();
/** Estimated bytes of every encoder's memo together, and how often one started afresh. */
const memoTotals = { bytes: 0, entries: 0, resets: 0 };
/** Estimated bytes of one encoder's memo (text, ids, entry); over it the memo starts afresh. */
export const MEMO_MAX_BYTES = 2 * 1024 * 1024;
/** Longer pieces (a user's text between two media items) are not memoised: they rarely repeat. */
const MEMO_MAX_TEXT_CHARS = 256;

/**
 * Memoised standalone tokenisation (timestamp strings repeat across groups and requests).
 * Safe because each text piece sits between special tokens, so it always tokenises on its own.
 */
export function memoEncode(encode: EncodeText, text: string): readonly number[] {
  // Checked before any lookup: V8 copies a string into its string table to use it as a Map key.
  if (text.length > MEMO_MAX_TEXT_CHARS) return Object.freeze(encode(text).slice());
  let m = memoByEncoder.get(encode);
  if (!m) {
    m = { map: new Map(), bytes: 0 };
    memoByEncoder.set(encode, m);
  }
  let ids = m.map.get(text);
  if (!ids) {
    ids = Object.freeze(encode(text).slice());
    const bytes = memoEntryBytes(text, ids.length);
    if (m.bytes + bytes > MEMO_MAX_BYTES) {
      memoTotals.bytes -= m.bytes;
      memoTotals.entries -= m.map.size;
      memoTotals.resets++;
      m.map.clear();
      m.bytes = 0;
    }
    m.map.set(text, ids);
    m.bytes += bytes;
    memoTotals.bytes += bytes;
    memoTotals.entries++;
  }
  return ids;
}

function memoEntryBytes(text: string, ids: number): number {
  return 2 * text.length + 8 * ids + 120;
}

/** Estimated bytes of all memos (live encoders; one per tokenizer in practice). */
export function layoutMemoStats(): { bytes: number; entries: number; resets: number } {
  return { ...memoTotals };
}

/** Number of tokens the pieces render to. */
export function layoutTokenCount(pieces: readonly LayoutPiece[], encode: EncodeText): number {
  let n = 0;
  for (const p of pieces) {
    if (p.kind === "pad") n += p.count;
    else if (p.kind === "text") n += memoEncode(encode, p.text).length;
    else n += 1;
  }
  return n;
}

/** What pad tokens become: the pad value (routing view) or the placeholder token id (worker's pre-pad view). */
export type PadFill = { padValue: number } | "token_id";

/** Writes the rendered pieces into `out` at `offset`; returns the new offset. */
export function writeLayout(
  out: Uint32Array,
  offset: number,
  pieces: readonly LayoutPiece[],
  ids: VisionTokenIds,
  encode: EncodeText,
  fill: PadFill,
): number {
  let o = offset;
  for (const p of pieces) {
    switch (p.kind) {
      case "vision_start":
        out[o++] = ids.visionStart;
        break;
      case "vision_end":
        out[o++] = ids.visionEnd;
        break;
      case "text":
        for (const t of memoEncode(encode, p.text)) out[o++] = t;
        break;
      case "pad": {
        const v = fill === "token_id" ? (p.modality === "image" ? ids.imagePad : ids.videoPad) : fill.padValue;
        out.fill(v, o, o + p.count);
        o += p.count;
        break;
      }
    }
  }
  return o;
}

/** The item's token run on its own. */
export function renderLayout(pieces: readonly LayoutPiece[], ids: VisionTokenIds, encode: EncodeText, fill: PadFill): Uint32Array {
  const out = new Uint32Array(layoutTokenCount(pieces, encode));
  writeLayout(out, 0, pieces, ids, encode, fill);
  return out;
}
