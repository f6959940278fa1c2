/**
 * Fail-closed eligibility (docs/layout.md, "Fail-closed reasons"): each rule returns a named reason or null, and
 * `buildRoutingView` assembles the exact routing token view only when every rule passes.
 */
import { parseWorkerContract, type WorkerContract } from "./contract.ts";
import { cohortDigest, contractDigest } from "./digest.ts";
import { ineligible, type Ineligible } from "./eligibility-reasons.ts";
import { expandPrompt, mmHashesInSglangOrder, type ExpandItem, type ItemSpan } from "./expand.ts";
import type { EncodeText, LayoutPiece, Modality } from "./layout.ts";
import { layoutImageItem, layoutVideoItem, type ImageProbe, type VideoProbe } from "./media-layout.ts";
import { mmHashHex, padValueFromMmHash } from "./pad-value.ts";

/** Dynamo's cap on an expanded routing sequence. */
export const MAX_ROUTING_TOKENS = 1_048_576;

export interface RequestShape {
  /** Content part types of all messages in prompt order ("text", "image", "video", "audio", ...). */
  partTypes: readonly string[];
  mmProcessorKwargs?: unknown;
  /** Client-supplied media uuids (any form). */
  mediaUuids?: unknown;
}

function isEmptyish(v: unknown): boolean {
  if (v === undefined || v === null) return true;
  if (Array.isArray(v)) return v.every((x) => x === null || x === undefined);
  if (typeof v === "object") return Object.values(v as object).every((x) => isEmptyish(x));
  return false;
}

/** Request-level rules: processor kwargs, client uuids, audio, adjacent videos, unknown media kinds. */
export function requestIneligibility(req: RequestShape): Ineligible | null {
  const k = req.mmProcessorKwargs;
  if (k !== undefined && k !== null && !(typeof k === "object" && !Array.isArray(k) && Object.keys(k).length === 0)) {
    return ineligible("mm_processor_kwargs", "request overrides the multimodal processor");
  }
  if (!isEmptyish(req.mediaUuids)) return ineligible("media_uuids", "client-supplied media uuids cannot be mapped to content");
  let prev = "";
  for (const t of req.partTypes) {
    if (t === "audio" || t === "input_audio" || t === "audio_url") return ineligible("audio", "audio input");
    if (t !== "text" && t !== "image" && t !== "video") return ineligible("unsupported_media", `content part ${t}`);
    if (t === "video" && prev === "video") return ineligible("adjacent_videos", "a video directly follows another video");
    prev = t;
  }
  return null;
}

export type CohortResult = { ok: true; contract: WorkerContract; digest: string } | Ineligible;

/**
 * Pool-level rule: every worker's published contract must parse and all digests must agree.
 * Requires `await initHashing()`.
 */
export function cohortEligibility(published: readonly (Readonly<Record<string, unknown>> | null | undefined)[]): CohortResult {
  if (published.length === 0) return ineligible("no_contract", "no workers");
  const contracts: WorkerContract[] = [];
  for (const p of published) {
    const r = parseWorkerContract(p);
    if (!r.ok) return ineligible(r.reason, r.detail);
    contracts.push(r.contract);
  }
  const digest = cohortDigest(contracts.map(contractDigest));
  if (digest === null) return ineligible("contract_disagreement", "workers publish different contracts");
  return { ok: true, contract: contracts[0]!, digest };
}

export type MediaItem =
  | { modality: "image"; hash: bigint | null; probe: ImageProbe | null }
  | { modality: "video"; hash: bigint | null; probe: VideoProbe | null };

export interface RoutingView {
  ok: true;
  /** Expanded template tokens, every media token replaced by its item's pad value. */
  tokens: Uint32Array;
  spans: ItemSpan[];
  /** `mm_hashes` for SGLang `/generate`: images first then videos, each in prompt order. */
  mmHashes: string[];
  /** Pad value per item, prompt order. */
  padValues: number[];
}

/** One item as the view needs it: its token run's pieces, its `mm_hashes` entry and pad value. */
export interface RoutedItem {
  ok: true;
  modality: Modality;
  pieces: readonly LayoutPiece[];
  mmHash: string;
  padValue: number;
}

/** The routed form of one resolved item under `contract`, or why it has none (a function of the two only). */
export function routedItem(contract: WorkerContract, it: MediaItem): RoutedItem | Ineligible {
  if (it.hash === null || it.probe === null) {
    return ineligible(it.modality === "video" ? "unprobeable_video" : "unresolved_media", `${it.modality} not resolved`);
  }
  const r = it.modality === "image" ? layoutImageItem(contract, it.probe) : layoutVideoItem(contract, it.probe);
  if (!r.ok) return r;
  const mmHash = mmHashHex(it.hash);
  return { ok: true, modality: it.modality, pieces: r.pieces, mmHash, padValue: padValueFromMmHash(mmHash) };
}

/** The items of a view, routed: what expansion takes (each item's pad value among it), and the request's `mm_hashes`. */
export interface ViewItems {
  ok: true;
  expandItems: readonly ExpandItem[];
  mmHashes: string[];
}

/**
 * Each resolved item's routed form for the view (prompt order), or the first reason one has none.
 * `route` gives each item's routed form (routedItem, or a memo of it).
 */
export function routeViewItems(
  contract: WorkerContract,
  items: readonly MediaItem[],
  route: (it: MediaItem, index: number) => RoutedItem | Ineligible = (it) => routedItem(contract, it),
): ViewItems | Ineligible {
  if (!contract.acceptsMmHashes) return ineligible("worker_rejects_mm_hashes", "worker cannot take caller mm_hashes");
  // A routed item is its own expand item: a remembered item's is the same object on every turn
  // (routed-items.ts), which the view cache compares by identity first (view-hashes.ts).
  const routed: RoutedItem[] = [];
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    const r = route(it, i);
    if (!r.ok) return it.hash === null || it.probe === null ? r : { ...r, item: i };
    routed.push(r);
  }
  return { ok: true, expandItems: routed, mmHashes: mmHashesInSglangOrder(routed) };
}

/**
 * Builds the routing token view for a templated prompt whose media items (prompt order) have been
 * resolved. Any failed rule returns the reason; the caller then routes on the text prefix and does
 * not forward `mm_hashes`. `route` gives each item's routed form (routedItem, or a memo of it).
 */
export function buildRoutingView(
  contract: WorkerContract,
  templateTokens: ArrayLike<number>,
  items: readonly MediaItem[],
  encode: EncodeText,
  route: (it: MediaItem, index: number) => RoutedItem | Ineligible = (it) => routedItem(contract, it),
): RoutingView | Ineligible {
  const routed = routeViewItems(contract, items, route);
  if (!routed.ok) return routed;
  const ex = expandPrompt(templateTokens, routed.expandItems, contract.tokenIds, encode);
  if (!ex.ok) return ineligible(ex.reason, ex.detail);
  if (ex.tokens.length > MAX_ROUTING_TOKENS) return ineligible("too_many_tokens", `${ex.tokens.length} routing tokens`);
  return { ok: true, tokens: ex.tokens, spans: ex.spans, mmHashes: routed.mmHashes, padValues: routed.expandItems.map((e) => e.padValue) };
}
