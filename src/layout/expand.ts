/**
 * Expansion of a templated prompt into the routing token view: each template media triplet
 * `vision_start, image_pad|video_pad, vision_end` is replaced by that item's layout, with every
 * media token set to the item's pad value. The worker does the same (HF processor expansion, then
 * SGLang pad_input_ids), so the result equals the worker's `origin_input_ids`.
 */
import { layoutTokenCount, writeLayout, type EncodeText, type LayoutPiece, type Modality } from "./layout.ts";
import type { VisionTokenIds } from "./model-geometry.ts";

export interface ExpandItem {
  modality: Modality;
  pieces: readonly LayoutPiece[];
  padValue: number;
}

export interface ItemSpan {
  /** Index into the items array (prompt order). */
  item: number;
  start: number;
  end: number;
}

export type ExpandResult =
  | { ok: true; tokens: Uint32Array; spans: ItemSpan[] }
  | { ok: false; reason: "placeholder_mismatch"; detail: string };

export interface ExpandOptions {
  /** "pad_value" (default): the routing view. "token_id": the worker's expanded ids before padding. */
  fill?: "pad_value" | "token_id";
}

/** Items in prompt order (images and videos interleaved as they appear in the messages). */
export function expandPrompt(
  templateTokens: ArrayLike<number>,
  items: readonly ExpandItem[],
  ids: VisionTokenIds,
  encode: EncodeText,
  opts: ExpandOptions = {},
): ExpandResult {
  const n = templateTokens.length;
  const placeholders: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = templateTokens[i]!;
    if (t !== ids.imagePad && t !== ids.videoPad) continue;
    const k = placeholders.length;
    const modality: Modality = t === ids.imagePad ? "image" : "video";
    if (templateTokens[i - 1] !== ids.visionStart || templateTokens[i + 1] !== ids.visionEnd) {
      return { ok: false, reason: "placeholder_mismatch", detail: `${modality} placeholder at ${i} is not inside vision_start/vision_end` };
    }
    const item = items[k];
    if (!item) return { ok: false, reason: "placeholder_mismatch", detail: `more placeholders than media items (${k + 1} > ${items.length})` };
    if (item.modality !== modality) {
      return { ok: false, reason: "placeholder_mismatch", detail: `placeholder ${k} is ${modality} but item ${k} is ${item.modality}` };
    }
    placeholders.push(i);
  }
  if (placeholders.length !== items.length) {
    return { ok: false, reason: "placeholder_mismatch", detail: `${placeholders.length} placeholders for ${items.length} media items` };
  }
  let total = n - 3 * items.length;
  const counts = items.map((it) => layoutTokenCount(it.pieces, encode));
  for (const c of counts) total += c;
  const out = new Uint32Array(total);
  const spans: ItemSpan[] = [];
  let src = 0;
  let o = 0;
  for (let k = 0; k < items.length; k++) {
    const at = placeholders[k]! - 1; // the triplet's vision_start
    for (; src < at; src++) out[o++] = templateTokens[src]!;
    const item = items[k]!;
    const start = o;
    o = writeLayout(out, o, item.pieces, ids, encode, opts.fill === "token_id" ? "token_id" : { padValue: item.padValue });
    spans.push({ item: k, start, end: o });
    src = at + 3;
  }
  for (; src < n; src++) out[o++] = templateTokens[src]!;
  return { ok: true, tokens: out, spans };
}

/**
 * SGLang's item order for `mm_hashes` (and for its pad values): all images in prompt order, then
 * all videos in prompt order (HF output dict order, `collect_mm_items_from_processor_output`).
 * Returns indices into `items`.
 */
export function sglangItemOrder(items: readonly { modality: Modality }[]): number[] {
  const images: number[] = [];
  const videos: number[] = [];
  items.forEach((it, i) => (it.modality === "image" ? images : videos).push(i));
  return images.concat(videos);
}

/** The `mm_hashes` list for SGLang `/generate` from items given in prompt order. */
export function mmHashesInSglangOrder(items: readonly { modality: Modality; mmHash: string }[]): string[] {
  return sglangItemOrder(items).map((i) => items[i]!.mmHash);
}
