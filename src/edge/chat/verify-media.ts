/**
 * Stage 4, media: every media part of the prompt becomes verified bytes (fetched or decoded, then
 * stored) before anything else, whatever the routing outcome.
 */
import type { EdgeConfig } from "../../config/config.ts";
import { clientLabel, type ClientRef } from "../client-label.ts";
import { verifyMedia, type MediaPartRef, type VerifiedMedia } from "../media.ts";
import { mediaDeps, type EdgeFetch } from "./media-deps.ts";
import type { RenderedPrompt } from "./prompt.ts";

/** Whose request it is (the media store's fair share) and when it has gone; null for admin explain. */
export type MediaRequester = { client: ClientRef | null; signal: AbortSignal | null; traceparent?: string | null } | null;

export interface PromptMedia {
  /** The media parts as the request names them (prompt order), for errors about one item. */
  parts: MediaPartRef[];
  /** Media as the worker receives it (verified bytes only), prompt order. */
  media: VerifiedMedia[];
}

export async function verifyPromptMedia(prompt: RenderedPrompt, deps: { config: EdgeConfig; fetch: EdgeFetch }, requester: MediaRequester): Promise<PromptMedia> {
  const parts: MediaPartRef[] = prompt.mediaParts.map((p) => ({
    kind: p.kind,
    url: p.url,
    param: `messages[${p.messageIndex}].content[${p.partIndex}]`,
  }));
  const media = await verifyMedia(parts, mediaDeps(deps), {
    client: requester?.client ? clientLabel(requester.client) : null,
    signal: requester?.signal ?? null,
    traceparent: requester?.traceparent ?? null,
  });
  return { parts, media };
}
