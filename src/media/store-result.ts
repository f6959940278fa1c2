/**
 * What the media store's `POST /v1/store` answers: the SHA-256 the bytes are stored under and
 * what the layout needs, computed from exactly those stored bytes (image size from the header,
 * video frames and fps from the probe). Bytes are stored only once verified as the kind asked
 * for: an image without a readable header, or a video the decoder cannot probe, is a 4xx and not
 * stored, so `probe` is set for every video answered. The stored item is also leased, as a held
 * call leases it: the edge remembers it for the conversation's later turns and need not ask the
 * store about it again while the lease lasts.
 */
import { z } from "zod";
import { ProbeResultSchema } from "./probe-result.ts";
import { MediaDigestSchema } from "./signed-url.ts";

export const StoreRequestSchema = z.strictObject({
  url: z.string().min(1).max(1 << 16),
  kind: z.enum(["image", "video"]),
});

/**
 * The longest a media store may be configured to reuse a URL's bytes on the origin's word alone
 * (services/decode options.ts `maxUrlFreshSec`), and so the most `freshMs` it answers: one bound
 * for both, so the store's cap and the edge's check of its answer cannot drift apart.
 */
export const MAX_URL_FRESH_SEC = 7 * 86_400;

export const StoreResultSchema = z.object({
  digest: MediaDigestSchema,
  byteLength: z.number().int().nonnegative(),
  kind: z.enum(["image", "video"]),
  image: z.object({ width: z.number().int().nonnegative(), height: z.number().int().nonnegative(), format: z.string() }).nullable(),
  probe: ProbeResultSchema.nullable(),
  /**
   * How long from its answer the store promises not to evict the stored item (a lease, as the held
   * answer's); 0 or absent: no promise (a lease bound refused it, or a store without leases).
   */
  leaseMs: z.number().int().min(0).max(86_400_000).optional(),
  /**
   * How long from its answer the store would answer this client's call for the same URL with the
   * same bytes from its own copy, without asking the origin (the origin's HTTP freshness); 0 or
   * absent: it would ask. At most MAX_URL_FRESH_SEC.
   */
  freshMs: z.number().int().min(0).max(MAX_URL_FRESH_SEC * 1000).optional(),
});
export type StoreResult = z.infer<typeof StoreResultSchema>;

const DIGEST = /^[0-9a-f]{64}$/;

function isCount(v: unknown, max = Number.MAX_SAFE_INTEGER): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0 && v <= max;
}

/**
 * A mirror of StoreResultSchema for the commonest answer, an image's, because zod never compiles
 * its fast path in workerd (no eval): exactly zod's output (same keys, same order) where the
 * answer is an image's with only the schema's keys, null otherwise (parse with the schema, which
 * stays the single source of truth: this only accepts). test/unit/media/store-result.test.ts is
 * its guard (a differential property test against the schema).
 */
export function fastStoreResult(v: unknown): StoreResult | null {
  if (typeof v !== "object" || v === null || Object.getPrototypeOf(v) !== Object.prototype) return null;
  const a = v as Record<string, unknown>;
  for (const k in a) {
    if (k !== "digest" && k !== "byteLength" && k !== "kind" && k !== "image" && k !== "probe" && k !== "leaseMs" && k !== "freshMs") return null;
  }
  const { digest, byteLength, image } = a;
  if (typeof digest !== "string" || !DIGEST.test(digest) || !isCount(byteLength) || a.kind !== "image" || a.probe !== null) return null;
  if (typeof image !== "object" || image === null || Object.getPrototypeOf(image) !== Object.prototype) return null;
  const img = image as Record<string, unknown>;
  for (const k in img) if (k !== "width" && k !== "height" && k !== "format") return null;
  const { width, height, format } = img;
  if (!isCount(width) || !isCount(height) || typeof format !== "string") return null;
  const out: StoreResult = { digest, byteLength, kind: "image", image: { width, height, format }, probe: null };
  if ("leaseMs" in a) {
    if (!isCount(a.leaseMs, 86_400_000)) return null;
    out.leaseMs = a.leaseMs;
  }
  if ("freshMs" in a) {
    if (!isCount(a.freshMs, MAX_URL_FRESH_SEC * 1000)) return null;
    out.freshMs = a.freshMs;
  }
  return out;
}

/** Most digests one `POST /v1/store/held` asks about (a request's media items are capped well below). */
export const MAX_HELD_DIGESTS = 1024;

/** `POST /v1/store/held`: which of these stored digests the store still holds (each one held is marked used). */
export const HeldRequestSchema = z.strictObject({
  digests: z.array(MediaDigestSchema).min(1).max(MAX_HELD_DIGESTS),
});

export const HeldResultSchema = z.object({
  /** One per digest asked, in order. */
  held: z.array(z.boolean()),
  /**
   * One per digest: how long from its answer the store promises not to evict it (a lease,
   * services/decode/media-store.ts); 0 or absent: no promise (a store without leases).
   */
  leaseMs: z.array(z.number().int().min(0).max(86_400_000)).optional(),
});
