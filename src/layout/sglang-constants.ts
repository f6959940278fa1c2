/**
 * SGLang `multimodal/processors/qwen_vl.py` module constants (main @ 9d147fd) and the shape of the
 * server-wide `--mm-process-config '{"video": {...}}'` overrides that `preprocess_video` reads.
 */
import { z } from "zod";

export interface SglangPreprocess {
  imageFactor: number;
  minPixels: number;
  maxPixels: number;
  maxRatio: number;
  videoMinPixels: number;
  videoMaxPixels: number;
  videoTotalPixels: number;
  frameFactor: number;
  fps: number;
  minFrames: number;
  maxFrames: number;
}

export const SGLANG_DEFAULTS: Readonly<SglangPreprocess> = Object.freeze({
  imageFactor: 28,
  minPixels: 4 * 28 * 28, // 3136
  maxPixels: 16384 * 28 * 28, // 12845056, env SGLANG_IMAGE_MAX_PIXELS
  maxRatio: 200,
  videoMinPixels: 128 * 28 * 28, // 100352
  videoMaxPixels: 768 * 28 * 28, // 602112: the per-frame cap
  videoTotalPixels: Math.trunc(128000 * 28 * 28 * 0.9), // 90316800, env VIDEO_MAX_PIXELS (the total budget)
  frameFactor: 2,
  fps: 2.0,
  minFrames: 4,
  maxFrames: 768,
});

/** `MM_PAD_SHIFT_VALUE` (schedule_batch.py): pad value = shift + hash % 2^30. */
export const MM_PAD_SHIFT_VALUE = 1_000_000;

const finiteNumber = z.number().refine(Number.isFinite, "must be finite");

/** Keys `smart_nframes` / `preprocess_video` read from the video config (Python names). */
export const SglangVideoConfigSchema = z.strictObject({
  fps: finiteNumber.optional(),
  nframes: finiteNumber.optional(),
  min_frames: finiteNumber.optional(),
  max_frames: finiteNumber.optional(),
  min_pixels: finiteNumber.optional(),
  max_pixels: finiteNumber.optional(),
  total_pixels: finiteNumber.optional(),
  resized_height: finiteNumber.optional(),
  resized_width: finiteNumber.optional(),
});
export type SglangVideoConfig = z.infer<typeof SglangVideoConfigSchema>;
