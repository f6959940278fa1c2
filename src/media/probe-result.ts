/**
 * What the decode service's `POST /v1/probe` returns. `totalFrames` and `avgFps` are torchcodec's
 * exact-mode `len(decoder)` and `metadata.average_fps` (meta-pytorch/torchcodec v0.11.1
 * src/torchcodec/_core/SingleStreamDecoder.cpp `scanFileAndUpdateMetadataAndIndex`): the
 * number of non-discarded packets of the best video stream, and that count divided by the pts
 * span (max(pts + duration) − min pts) in seconds; `avgFps` falls back to r_frame_rate only when
 * the span is zero, and is null when that is 0/0 too. `decord` holds what the decord backend
 * (Linux-aarch64 workers) would report instead.
 */
import { z } from "zod";

export const ProbeResultSchema = z.object({
  /** SHA-256 of the raw media bytes, 64 lower-case hex digits. */
  contentDigest: z.string().regex(/^[0-9a-f]{64}$/),
  byteLength: z.number().int().nonnegative(),
  totalFrames: z.number().int().nonnegative(),
  avgFps: z.number().positive().nullable(),
  width: z.number().int().nonnegative(),
  height: z.number().int().nonnegative(),
  /** torchcodec `duration_seconds` = end − begin of the packet span. */
  durationSec: z.number().nonnegative(),
  beginSec: z.number(),
  codec: z.string(),
  decoder: z.enum(["native", "wasm"]),
  decord: z.object({
    totalFrames: z.number().int().nonnegative(),
    avgFps: z.number().nullable(),
  }),
});
export type ProbeResult = z.infer<typeof ProbeResultSchema>;

export const ProbeRequestSchema = z.strictObject({ url: z.string().min(1).max(1 << 20) });
