/**
 * Stages 3–5 in order (prompt → media → layout): everything up to the pick. Shared by the chat
 * handler and the admin `explain` endpoint so both always agree.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import type { EdgeConfig, ModelConfig } from "../../config/config.ts";
import type { NamespaceTag } from "../../blocks/block-hash.ts";
import type { EncodedPrompt } from "../../prompt/prefix-cache.ts";
import type { ChainFind } from "../../prompt/turn-chain.ts";
import type { ChatFrontDoor } from "../../routing-index/front-door.ts";
import type { LeasedItem, VerifiedMedia } from "../media.ts";
import { planMediaRouting, type RoutingPlan } from "./layout.ts";
import type { EdgeFetch } from "./media-deps.ts";
import { limitsOf } from "./parse.ts";
import { checkContextFit, encodeMediaPrompt, encodePrompt, renderPrompt, type RenderedPrompt } from "./prompt.ts";
import { resolveModel } from "./resolve-model.ts";
import { verifyPromptMedia, type MediaRequester, type MediaSeed } from "./verify-media.ts";

export interface PrepareDeps {
  config: EdgeConfig;
  /** Shard `shard` (default 0, the pool object) of a pool's routing index. */
  index(model: string, shard?: number): ChatFrontDoor;
  fetch: EdgeFetch;
  /** Media items of earlier turns verified elsewhere (a stored response's), seeded into the media memo. */
  mediaSeeds?: readonly MediaSeed[];
}

export interface PreparedRouting {
  model: ModelConfig;
  prompt: RenderedPrompt;
  /** Template tokens before media expansion (text-only: the routed sequence itself), built when read. */
  readonly tokens: number[];
  /** The same tokens in the prompt-prefix cache's pieces, not joined (EncodedPrompt.idPieces); null where a seeded prefix holds none (read `tokens`). */
  idPieces: readonly (readonly number[])[] | null;
  plan: RoutingPlan;
  /** Media as the worker receives it (verified bytes only), prompt order. */
  media: VerifiedMedia[];
  /** Remembered media forwarded on the store's lease without asking it (media.ts recoverLeased after a failed worker answer). */
  mediaLeased: readonly LeasedItem[];
  /** Tokens the tokenizer produced for this request (the rest came from the prompt-prefix cache): a work counter. */
  encodedTokens: number;
}

export async function prepareRouting(
  req: ChatCompletionRequest,
  deps: PrepareDeps,
  /** Whose entries of the turn chain and prompt-prefix cache the request may use (cache-salt.ts edgeCachePartition; "" the common one, admin explain's). */
  partition: string,
  /** Whose request it is (the media store's fair share) and when it has gone; none for admin explain. */
  requester: MediaRequester = null,
  /** The request's cache namespace (cache-salt.ts routingNamespace): media item hashes move into it. */
  itemTag: NamespaceTag = null,
  /** The body `req` was parsed from (parseChatBody): earlier turns' rendered text is reused by its raw JSON (prompt.ts). */
  bodyText: string | null = null,
  /** The parse stage's turn-chain lookup for `bodyText` (parseChatTurn), saving a second one. */
  turn: ChainFind | null = null,
): Promise<PreparedRouting> {
  const { model } = resolveModel(deps.config, req.model);
  const prompt = renderPrompt(req, model, limitsOf(deps.config), bodyText === null ? null : { bodyText, checkRate: deps.config.turnCheckRate, found: turn, partition });
  if (prompt.mediaParts.length === 0) {
    // Text: earlier turns' tokens and block hashes come from the isolate's prompt-prefix cache (exact:
    // the same as encode + localBlockHashes).
    const encoded = encodePrompt(prompt, model, partition, deps.config.turnCheckRate);
    if (encoded.length === 0) throw new InvalidRequestError("The prompt is empty.", "messages");
    checkContextFit(encoded.length, req, model);
    const plan: RoutingPlan = {
      // Joined only when read: a namespaced request reads the pieces (cache-salt.ts namespacedHashes).
      get localHashes() {
        return encoded.localHashes;
      },
      hashPieces: encoded.hashPieces,
      isl: encoded.length,
      fallbackReason: null,
      mmHashes: null,
    };
    return prepared(model, prompt, encoded, plan, [], []);
  }
  const template = encodeMediaPrompt(prompt, model, partition, deps.config.turnCheckRate);
  const media = await verifyPromptMedia(prompt, deps, requester, { messages: req.messages, itemTag });
  const plan = await planMediaRouting({ config: deps.config, req, model, index: deps.index(model.id), template, media, itemTag });
  // The worker counts expanded media tokens: exact when the plan is, else the text tokens are a lower bound.
  checkContextFit(plan.fallbackReason === null ? plan.isl : template.length, req, model);
  return prepared(model, prompt, template, plan, media.media, media.leased);
}

/** The template's tokens (text-only: the routed sequence) are joined only when read (admin explain). */
function prepared(model: ModelConfig, prompt: RenderedPrompt, template: EncodedPrompt, plan: RoutingPlan, media: VerifiedMedia[], mediaLeased: readonly LeasedItem[]): PreparedRouting {
  let ids: number[] | null = null;
  return {
    model,
    prompt,
    get tokens() {
      return (ids ??= template.tokens());
    },
    idPieces: template.idPieces,
    plan,
    media,
    mediaLeased,
    encodedTokens: template.length - template.reusedTokens,
  };
}
