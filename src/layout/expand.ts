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
  // With no tokens outside, a triplet cannot cross an edge: the first or last token as a placeholder is a mismatch.
  const r = expandPiece(templateTokens, items, 0, ids, encode, { base: 0, prev: undefined, next: undefined }, opts);
  if (!r.ok) return { ok: false, reason: "placeholder_mismatch", detail: r.detail };
  const count = itemCountMismatch(r.items, items.length);
  return count ?? { ok: true, tokens: r.tokens, spans: r.spans };
}

/** Where a piece of the template tokens sits: its first token's position, and the tokens just before and after it. */
export interface PieceEdges {
  base: number;
  prev: number | undefined;
  next: number | undefined;
}

export type PieceExpansion =
  | { ok: true; tokens: Uint32Array; spans: ItemSpan[]; /** Items its placeholders took. */ items: number }
  | { ok: false; reason: "placeholder_mismatch"; detail: string }
  /** A triplet lies across the piece's edge: expand the pieces joined instead. */
  | { ok: false; reason: "piece_edge"; detail: string };

/**
 * expandPrompt for one piece of the template tokens, its placeholders taking items from `firstItem`
 * on (spans: positions within the piece's output, item indices into `items`). The pieces of a
 * template expanded in order, then itemCountMismatch on the items they took, give expandPrompt's
 * tokens or its first mismatch (a placeholder's neighbours across a piece's edge are `edges`), unless
 * a triplet crosses an edge ("piece_edge").
 */
export function expandPiece(
  piece: ArrayLike<number>,
  items: readonly ExpandItem[],
  firstItem: number,
  ids: VisionTokenIds,
  encode: EncodeText,
  edges: PieceEdges,
  opts: ExpandOptions = {},
): PieceExpansion {
  const n = piece.length;
  const at = (i: number): number | undefined => (i < 0 ? edges.prev : i >= n ? edges.next : piece[i]);
  const placeholders: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = piece[i]!;
    if (t !== ids.imagePad && t !== ids.videoPad) continue;
    const k = firstItem + placeholders.length;
    const modality: Modality = t === ids.imagePad ? "image" : "video";
    if (at(i - 1) !== ids.visionStart || at(i + 1) !== ids.visionEnd) {
      return { ok: false, reason: "placeholder_mismatch", detail: `${modality} placeholder at ${edges.base + i} is not inside vision_start/vision_end` };
    }
    const item = items[k];
    if (!item) return { ok: false, reason: "placeholder_mismatch", detail: `more placeholders than media items (${k + 1} > ${items.length})` };
    if (item.modality !== modality) {
      return { ok: false, reason: "placeholder_mismatch", detail: `placeholder ${k} is ${modality} but item ${k} is ${item.modality}` };
    }
    placeholders.push(i);
  }
  // A triplet across the piece's edge (its vision_start or vision_end outside): its tokens are not all here.
  if (placeholders.length > 0 && (placeholders[0]! === 0 || placeholders.at(-1)! === n - 1)) {
    return { ok: false, reason: "piece_edge", detail: `placeholder at ${edges.base + (placeholders[0] === 0 ? 0 : n - 1)}` };
  }
  let total = n - 3 * placeholders.length;
  for (let j = 0; j < placeholders.length; j++) total += layoutTokenCount(items[firstItem + j]!.pieces, encode);
  const out = new Uint32Array(total);
  const spans: ItemSpan[] = [];
  let src = 0;
  let o = 0;
  for (let j = 0; j < placeholders.length; j++) {
    const start3 = placeholders[j]! - 1; // the triplet's vision_start
    for (; src < start3; src++) out[o++] = piece[src]!;
    const k = firstItem + j;
    const item = items[k]!;
    const start = o;
    o = writeLayout(out, o, item.pieces, ids, encode, opts.fill === "token_id" ? "token_id" : { padValue: item.padValue });
    spans.push({ item: k, start, end: o });
    src = start3 + 3;
  }
  for (; src < n; src++) out[o++] = piece[src]!;
  return { ok: true, tokens: out, spans, items: placeholders.length };
}

/** After the last piece: every item taken by a placeholder, or expandPrompt's count mismatch. */
export function itemCountMismatch(placeholders: number, items: number): { ok: false; reason: "placeholder_mismatch"; detail: string } | null {
  return placeholders === items ? null : { ok: false, reason: "placeholder_mismatch", detail: `${placeholders} placeholders for ${items} media items` };
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
