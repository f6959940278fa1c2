/**
 * What the media store's `POST /v1/store` answers: the SHA-256 the bytes are stored under and
 * what the layout needs, computed from exactly those stored bytes (image size from the header,
 * video frames and fps from the probe). A video the decoder cannot read is still stored (the
 * worker gets it and decides); `probeError` then says why the edge cannot route it exactly.
 */
import { z } from "zod";
import { ProbeResultSchema } from "./probe-result.ts";
import { MediaDigestSchema } from "./signed-url.ts";

export const StoreRequestSchema = z.strictObject({
  url: z.string().min(1).max(1 << 16),
  kind: z.enum(["image", "video"]),
});

export const StoreResultSchema = z.object({
  digest: MediaDigestSchema,
  byteLength: z.number().int().nonnegative(),
  kind: z.enum(["image", "video"]),
  image: z.object({ width: z.number().int().nonnegative(), height: z.number().int().nonnegative(), format: z.string() }).nullable(),
  probe: ProbeResultSchema.nullable(),
  probeError: z.object({ reason: z.string(), message: z.string() }).nullable(),
});
export type StoreResult = z.infer<typeof StoreResultSchema>;
