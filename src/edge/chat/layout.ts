/**
 * Stage 5, layout: the token sequence the request is routed on, hashed into blocks. A media request
 * gets the exact layout SGLang will cache (every media token = its item's pad value) when the pool's
 * cohort and the request's shape allow it, else its text prefix with the named reason.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import type { EdgeConfig, ModelConfig } from "../../config/config.ts";
import { localBlockHashes, type NamespaceTag } from "../../blocks/block-hash.ts";
import { buildRoutingView, requestIneligibility, type RoutingView } from "../../layout/index.ts";
import { getQwenTokenizer } from "../../prompt/tokenizer/index.ts";
import { bytesToHex } from "../../util/hex.ts";
import { mmHashesAllowed } from "../../proxy/generate-request.ts";
import type { ChatFrontDoor } from "../../routing-index/front-door.ts";
import { cachedPoolProfile } from "./pool-profile-cache.ts";
import { routeItems } from "./routed-items.ts";
import { sharedViewHashes } from "./view-hashes.ts";
import type { PromptMedia } from "./verify-media.ts";

/** Why the request was not routed on its exact token sequence (null = exact). */
export type FallbackReason = string | null;

export interface RoutingPlan {
  localHashes: bigint[];
  /** localHashes in pieces kept across turns (the prompt-prefix cache's, or the media view's), for work kept per piece. */
  hashPieces?: readonly (readonly bigint[])[];
  isl: number;
  fallbackReason: FallbackReason;
  /** Forwarded to SGLang only when the exact layout was built (images first, then videos). */
  mmHashes: string[] | null;
  /** Exact media routing: the routed sequence (pad-valued) and each item's span (admin explain, tests). */
  view?: Pick<RoutingView, "tokens" | "spans" | "padValues">;
}

export interface MediaLayoutInput {
  config: EdgeConfig;
  req: ChatCompletionRequest;
  model: ModelConfig;
  /** The pool object (shard 0): its profile names the cohort contract. */
  index: ChatFrontDoor;
  /** Template tokens, media placeholders not yet expanded. */
  tokens: readonly number[];
  media: PromptMedia;
  /** The request's cache namespace: item hashes (mm_hashes, pad values) move into it. */
  itemTag: NamespaceTag;
}

/**
 * Exact media routing: the token view SGLang will cache, or the named reason it cannot be built, in
 * which case the request routes on its text prefix.
 */
export async function planMediaRouting(input: MediaLayoutInput): Promise<RoutingPlan> {
  const { config, req, model, tokens } = input;
  const tokenizer = getQwenTokenizer(model.family);
  const fallback = (reason: string) => textPrefixPlan(tokens, model.blockSize, tokenizer.specialIds.visionStart, reason);
  if (!config.exactMedia) return fallback("exact_media_disabled");
  const { partTypes, uuids } = requestShape(req);
  const shape = requestIneligibility({
    partTypes,
    mmProcessorKwargs: (req as { mm_processor_kwargs?: unknown }).mm_processor_kwargs,
    mediaUuids: uuids,
  });
  if (shape) return fallback(shape.reason);
  if (!mmHashesAllowed(req)) return fallback("n_greater_than_one");
  const { cohort } = await cachedPoolProfile(input.index, model.id, config.routing.profileTtlMs);
  if (!cohort.ok) return fallback(cohort.reason);
  // Items laid out for earlier turns (this pool's contract, this namespace) are taken as they were.
  const resolved = routeItems(input.media.media, cohort, input.itemTag);
  if (resolved.unresolved) return fallback(resolved.unresolved.reason);
  const view = buildRoutingView(cohort.contract, tokens, resolved.items, (t) => tokenizer.encode(t), (_, i) => resolved.routed[i]!);
  if (!view.ok) {
    // The pool's own processor raises for this item (the transformers resize rules under its
    // contract, e.g. an aspect ratio above 200): the client's 400 here, naming the part, instead of
    // an opaque rejection from the worker.
    if (view.reason === "worker_would_reject" && view.item !== undefined) {
      const part = input.media.parts[view.item];
      throw new InvalidRequestError(`The model's processor cannot take this ${part?.kind ?? "media item"}: ${view.detail.replace(/^\w+: worker raises /, "")}.`, part?.param ?? null, "media_unprocessable");
    }
    return fallback(view.reason);
  }
  // Earlier turns' blocks keep their hashes (and their namespaced forms, per piece): only the new blocks are hashed.
  const hashed = sharedViewHashes().hashes(view.tokens, model.blockSize, tokenizer.specialIds.imStart, input.itemTag === null ? "" : bytesToHex(input.itemTag));
  return {
    localHashes: hashed.localHashes,
    hashPieces: hashed.hashPieces,
    isl: view.tokens.length,
    fallbackReason: null,
    mmHashes: view.mmHashes,
    view: { tokens: view.tokens, spans: view.spans, padValues: view.padValues },
  };
}

/**
 * A media request routed without its exact layout (`fallbackReason` says why): only the text
 * before the first media placeholder can be predicted. (Text-only requests hash their own tokens
 * through the prompt-prefix cache; exact media requests hash the layout's view.)
 */
function textPrefixPlan(tokens: readonly number[], blockSize: number, visionStartId: number, fallbackReason: string): RoutingPlan {
  const cut = tokens.indexOf(visionStartId);
  const prefix = cut < 0 ? tokens : tokens.slice(0, cut);
  return { localHashes: localBlockHashes(prefix, blockSize), isl: tokens.length, fallbackReason, mmHashes: null };
}

/**
 * Content part kinds in prompt order (messages are separated, so only parts within one message can
 * be adjacent) and any client-supplied media uuids.
 */
function requestShape(req: ChatCompletionRequest): { partTypes: string[]; uuids: string[] } {
  const partTypes: string[] = [];
  const uuids: string[] = [];
  for (const m of req.messages) {
    const c = (m as { content?: unknown }).content;
    partTypes.push("text");
    if (!Array.isArray(c)) continue;
    for (const part of c as { type?: string; uuid?: unknown }[]) {
      const t = part.type;
      partTypes.push(t === "image_url" || t === "input_image" ? "image" : t === "video_url" ? "video" : t === "input_audio" || t === "audio_url" ? "audio" : "text");
      if (typeof part.uuid === "string") uuids.push(part.uuid);
    }
  }
  return { partTypes, uuids };
}
