/**
 * Stage 5, layout: the token sequence the request is routed on, hashed into blocks. A media request
 * gets the exact layout SGLang will cache (every media token = its item's pad value) when the pool's
 * cohort and the request's shape allow it, else its text prefix with the named reason.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import type { EdgeConfig, ModelConfig } from "../../config/config.ts";
import { localBlockHashes, namespaceTagHex, type NamespaceTag } from "../../blocks/block-hash.ts";
import { expandPrompt, MAX_ROUTING_TOKENS, requestIneligibility, routeViewItems, type EncodeText, type RoutingView } from "../../layout/index.ts";
import { getQwenTokenizer, type QwenTokenizer } from "../../prompt/tokenizer/index.ts";
import { mmHashesAllowed } from "../../proxy/generate-request.ts";
import type { ChatFrontDoor } from "../../routing-index/front-door.ts";
import { cachedPoolProfile } from "./pool-profile-cache.ts";
import { routeItems } from "./routed-items.ts";
import { sharedViewHashes, type ViewInput } from "./view-hashes.ts";
import { sampledCheck } from "../exactness.ts";
import { checkedRoutedItems, checkedViewHashes } from "./exactness-check.ts";
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
  /** Exact media routing: the routed sequence (pad-valued) and each item's span (admin explain, tests), built when read. */
  readonly view?: Pick<RoutingView, "tokens" | "spans" | "padValues">;
}

/** A media prompt's template tokens (placeholders not yet expanded), as the prompt-prefix cache gives them. */
export interface TemplateTokens {
  readonly length: number;
  /** In pieces kept across turns (EncodedPrompt.idPieces), or null: then tokens() only. */
  readonly idPieces: readonly (readonly number[])[] | null;
  /** All of them in one array (built on demand: O(history)). */
  tokens(): readonly number[];
}

export interface MediaLayoutInput {
  config: EdgeConfig;
  req: ChatCompletionRequest;
  model: ModelConfig;
  /** The pool object (shard 0): its profile names the cohort contract. */
  index: ChatFrontDoor;
  /** Template tokens, media placeholders not yet expanded. */
  template: TemplateTokens;
  media: PromptMedia;
  /** The request's cache namespace: item hashes (mm_hashes, pad values) move into it. */
  itemTag: NamespaceTag;
}

/**
 * One encode function per tokenizer: the layout's memo of text pieces is kept per function (layout.ts
 * memoEncode). Its texts are the pool's media contract's (timestamps), no client's: the common partition.
 */
const encoders = new WeakMap<QwenTokenizer, EncodeText>();
function encoderOf(tokenizer: QwenTokenizer): EncodeText {
  let encode = encoders.get(tokenizer);
  if (!encode) encoders.set(tokenizer, (encode = (t) => tokenizer.encode(t, "")));
  return encode;
}

/**
 * Exact media routing: the token view SGLang will cache, or the named reason it cannot be built, in
 * which case the request routes on its text prefix.
 */
export async function planMediaRouting(input: MediaLayoutInput): Promise<RoutingPlan> {
  const { config, req, model, template } = input;
  const tokenizer = getQwenTokenizer(model.family);
  const fallback = (reason: string) => textPrefixPlan(template.tokens(), model.blockSize, tokenizer.specialIds.visionStart, reason);
  if (!config.exactMedia) return fallback("exact_media_disabled");
  const { partTypes, uuids } = requestShape(req);
  const shape = requestIneligibility({
    partTypes,
    mmProcessorKwargs: req.mm_processor_kwargs,
    mediaUuids: uuids,
  });
  if (shape) return fallback(shape.reason);
  if (!mmHashesAllowed(req)) return fallback("n_greater_than_one");
  const { cohort } = await cachedPoolProfile(input.index, model.id, config.routing.profileTtlMs);
  if (!cohort.ok) return fallback(cohort.reason);
  // Items laid out for earlier turns (this pool's contract, this namespace) are taken as they were;
  // a sampled share also identifies and lays out every item again (exactness-check.ts).
  const keptItems = routeItems(input.media.media, cohort, input.itemTag);
  const resolved = sampledCheck(config.turnCheckRate) ? checkedRoutedItems(keptItems, input.media.media, cohort, input.itemTag) : keptItems;
  if (resolved.unresolved) return fallback(resolved.unresolved.reason);
  const routed = routeViewItems(cohort.contract, resolved.items, (_, i) => resolved.routed[i]!);
  if (!routed.ok) return unroutable(routed, fallback, input.media.parts);
  // Earlier turns' pieces keep their view's block hashes (and their namespaced forms, per piece):
  // only the new template tokens are expanded and only the new blocks hashed.
  const encode = encoderOf(tokenizer);
  const views = sharedViewHashes();
  const viewInput: ViewInput = {
    pieces: template.idPieces ?? [template.tokens()],
    items: routed.expandItems,
    ids: cohort.contract.tokenIds,
    encode,
    blockSize: model.blockSize,
    scope: `${model.family}\u0000${model.blockSize}\u0000${cohort.digest}\u0000${namespaceTagHex(input.itemTag)}`,
    maxTokens: MAX_ROUTING_TOKENS,
  };
  const kept = views.hashes(viewInput);
  // A sampled share is also expanded and hashed whole (exactness-check.ts).
  const hashed = sampledCheck(config.turnCheckRate) ? checkedViewHashes(kept, viewInput, template.tokens(), views) : kept;
  if (!hashed.ok) return fallback(hashed.reason);
  let view: Pick<RoutingView, "tokens" | "spans" | "padValues"> | null = null;
  return {
    // Joined only when read: a namespaced request reads the pieces (cache-salt.ts namespacedHashes).
    get localHashes() {
      return hashed.localHashes;
    },
    hashPieces: hashed.hashPieces,
    isl: hashed.length,
    fallbackReason: null,
    mmHashes: routed.mmHashes,
    get view() {
      if (view) return view;
      const ex = expandPrompt(template.tokens(), routed.expandItems, cohort.contract.tokenIds, encode);
      if (!ex.ok) throw new Error(`view expansion disagrees with its hashes: ${ex.detail}`);
      return (view = { tokens: ex.tokens, spans: ex.spans, padValues: routed.expandItems.map((e) => e.padValue) });
    },
  };
}

/**
 * An item the view cannot take. The pool's own processor raises for it (the transformers resize
 * rules under its contract, e.g. an aspect ratio above 200): the client's 400 here, naming the part,
 * instead of an opaque rejection from the worker. Otherwise the text-prefix fallback.
 */
function unroutable(why: { reason: string; detail: string; item?: number }, fallback: (reason: string) => RoutingPlan, parts: PromptMedia["parts"]): RoutingPlan {
  if (why.reason === "worker_would_reject" && why.item !== undefined) {
    const part = parts[why.item];
    throw new InvalidRequestError(`The model's processor cannot take this ${part?.kind ?? "media item"}: ${why.detail.replace(/^\w+: worker raises /, "")}.`, part?.param ?? null, "media_unprocessable");
  }
  return fallback(why.reason);
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
  const messages = req.messages;
  for (let i = 0; i < messages.length; i++) {
    const c = (messages[i] as { content?: unknown }).content;
    partTypes.push("text");
    if (!Array.isArray(c)) continue;
    for (let j = 0; j < c.length; j++) {
      const part = c[j] as { type?: string; uuid?: unknown };
      const t = part.type;
      partTypes.push(t === "image_url" || t === "input_image" ? "image" : t === "video_url" ? "video" : t === "input_audio" || t === "audio_url" ? "audio" : "text");
      if (typeof part.uuid === "string") uuids.push(part.uuid);
    }
  }
  return { partTypes, uuids };
}
