/**
 * Stage 4, media: every media part of the prompt becomes verified bytes (fetched or decoded, then
 * stored) before anything else, whatever the routing outcome.
 */
import { namespaceTagHex, type NamespaceTag } from "../../blocks/block-hash.ts";
import type { EdgeConfig } from "../../config/config.ts";
import { clientLabel, type ClientRef } from "../client-label.ts";
import { recoverLeased, verifyMedia, type LeasedItem, type MediaPartRef, type MediaReuse, type VerifiedMedia } from "../media.ts";
import { mediaDeps, mediaMemo, type EdgeFetch } from "./media-deps.ts";
import type { MediaPart } from "../../prompt/index.ts";
import type { RenderedPrompt } from "./prompt.ts";

/** Whose request it is (the media store's fair share) and when it has gone; null for admin explain. */
export type MediaRequester = { client: ClientRef | null; signal: AbortSignal | null; traceparent?: string | null } | null;

export interface PromptMedia {
  /** The media parts as the request names them (prompt order), for errors about one item. */
  parts: MediaPartRef[];
  /** Media as the worker receives it (verified bytes only), prompt order. */
  media: VerifiedMedia[];
  /** Remembered items forwarded on the store's lease, without asking it (media.ts recoverLeased when the worker's answer fails). */
  leased: readonly LeasedItem[];
}

/** A media item verified for an earlier turn in another isolate (a stored response's, src/edge/responses/stored-media.ts). */
export interface MediaSeed {
  kind: "image" | "video";
  url: string;
  media: VerifiedMedia;
}

/**
 * The request's conversation, for reusing its earlier items (media.ts MediaReuse): its messages'
 * roles and the cache namespace its item hashes move into.
 */
export interface MediaConversation {
  messages: readonly { role?: unknown }[];
  itemTag: NamespaceTag;
}

/** A media part of the prompt; `param`, which only an error about the item names, is built when read (a conversation re-sends every earlier item). */
class PromptMediaPart implements MediaPartRef {
  readonly kind: MediaPart["kind"];
  readonly url: string;
  private readonly at: MediaPart;

  constructor(part: MediaPart) {
    this.kind = part.kind;
    this.url = part.url;
    this.at = part;
  }

  get param(): string {
    return `messages[${this.at.messageIndex}].content[${this.at.partIndex}]`;
  }
}

export async function verifyPromptMedia(prompt: RenderedPrompt, deps: { config: EdgeConfig; fetch: EdgeFetch; mediaSeeds?: readonly MediaSeed[] }, requester: MediaRequester, conversation: MediaConversation | null = null): Promise<PromptMedia> {
  const parts: MediaPartRef[] = prompt.mediaParts.map((p) => new PromptMediaPart(p));
  const client = requester?.client ? clientLabel(requester.client) : null;
  let reuse: MediaReuse | null = null;
  if (conversation) {
    // Items before the last assistant message have been answered: they are the conversation's earlier items.
    let answered = conversation.messages.length - 1;
    while (answered >= 0 && conversation.messages[answered]!.role !== "assistant") answered--;
    const scope = `${client ?? ""}\u0000${namespaceTagHex(conversation.itemTag)}`;
    reuse = { memo: mediaMemo(deps), scope, earlier: prompt.mediaParts.map((p) => p.messageIndex < answered), leased: [] };
    // Seeded into this scope only: used as any memo entry (a stored item after the store confirms it holds the bytes).
    for (const seed of deps.mediaSeeds ?? []) reuse.memo.seed(scope, seed.kind, seed.url, seed.media);
  }
  const media = await verifyMedia(parts, mediaDeps(deps), { client, signal: requester?.signal ?? null, traceparent: requester?.traceparent ?? null }, reuse);
  return { parts, media, leased: reuse?.leased ?? [] };
}

/**
 * The worker failed the request before any output: asks the store about the items forwarded on
 * their lease and stores the lost ones again (media.ts recoverLeased); true when the request is
 * worth sending once more.
 */
export function recoverLeasedMedia(leased: readonly LeasedItem[], deps: { config: EdgeConfig; fetch: EdgeFetch }, requester: MediaRequester, lost: () => void): Promise<boolean> {
  const client = requester?.client ? clientLabel(requester.client) : null;
  return recoverLeased(leased, mediaDeps(deps), { client, signal: requester?.signal ?? null, traceparent: requester?.traceparent ?? null }, lost);
}
