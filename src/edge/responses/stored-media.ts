/**
 * The media items a stored response's turn brought, as the edge verified them (content digest,
 * metadata, whether the media store holds the bytes), so that a continuation in another isolate
 * seeds its media memo (src/edge/media-memo.ts) with them instead of fetching, decoding and storing
 * the conversation's earlier items again. Each record keeps its own turn's items by position (message
 * of the conversation, part); the URL is read back from the stored message, so a data: URL is kept once.
 *
 * Seeds are used exactly as the memo's own entries (media.ts reuseEarlier): only in the request's
 * client and namespace scope, a data: URL wherever its text appears (its digest is a function of the
 * text), an http(s) URL only for an earlier item and only once the store confirms it still holds the
 * bytes. Only items the memo would keep are stored (media.ts memoizable).
 */
import { z } from "zod";
import type { ChatMessage } from "../../api/responses-schema.ts";
import type { MediaMetadata } from "../../media/identity-record.ts";
import type { MediaSeed } from "../chat/verify-media.ts";
import type { VerifiedMedia } from "../media.ts";
import type { MediaPart } from "../../prompt/messages.ts";

const count = z.number().int().min(0);
const MetadataSchema = z.union([
  z.object({ modality: z.literal("image"), width: count, height: count }),
  z.object({ modality: z.literal("video"), width: count, height: count, totalFrames: count, avgFps: z.number().min(0) }),
]);

export const StoredMediaSchema = z.object({
  kind: z.enum(["image", "video"]),
  /** The message's index in the conversation (without the instructions' system message) and the part's in its content. */
  message: count,
  part: count,
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  metadata: MetadataSchema,
  stored: z.boolean(),
});
export type StoredMedia = z.infer<typeof StoredMediaSchema>;

/** The URL object of content part `part` of `message` (as preprocessChat reads it: an image may be a bare URL string). */
export function mediaOptionsAt(message: ChatMessage | undefined, part: number, kind: string): Record<string, unknown> | null {
  const content = message?.content;
  const value: unknown = Array.isArray(content) ? (content[part] as Record<string, unknown> | undefined)?.[`${kind}_url`] : undefined;
  const options = typeof value === "string" && kind === "image" ? { url: value } : value !== null && typeof value === "object" ? (value as Record<string, unknown>) : null;
  return options !== null && typeof options["url"] === "string" ? options : null;
}

/**
 * This turn's items to keep: the request's media parts from message `from` on (its new input; `lead`
 * messages before the conversation), with the chat path's verified items (prompt order).
 */
export function turnMedia(parts: readonly MediaPart[], verified: readonly VerifiedMedia[], from: number, lead: number): StoredMedia[] {
  const out: StoredMedia[] = [];
  for (const p of parts) {
    const m = verified[p.index];
    if (p.messageIndex < from || !m || p.kind === "audio" || m.kind !== p.kind || m.digest === null || m.metadata === null) continue;
    // As the memo keeps items: bytes the store holds, or a data: URL forwarded as it is.
    if (m.stored ? m.forward !== null : m.forward !== p.url || !p.url.startsWith("data:")) continue;
    out.push({ kind: p.kind, message: p.messageIndex - lead, part: p.partIndex, digest: m.digest, metadata: m.metadata, stored: m.stored });
  }
  return out;
}

/** The seeds of a conversation's stored items (`history`: its messages, without instructions). */
export function mediaSeeds(items: readonly StoredMedia[], history: readonly ChatMessage[]): MediaSeed[] {
  const seeds: MediaSeed[] = [];
  for (const it of items) {
    const url = mediaOptionsAt(history[it.message], it.part, it.kind)?.["url"];
    if (typeof url !== "string") continue;
    seeds.push({ kind: it.kind, url, media: { kind: it.kind, forward: it.stored ? null : url, stored: it.stored, digest: it.digest, metadata: it.metadata as MediaMetadata, unresolved: null } });
  }
  return seeds;
}
