/**
 * Per-family vision geometry (config.json vision_config + HF preprocessor configs) and the
 * vision special-token ids shared by the Qwen2/2.5/3-VL vocabulary.
 */
export type QwenFamily = "qwen2_vl" | "qwen2_5_vl" | "qwen3_vl";

export interface HfGeometry {
  patchSize: number;
  mergeSize: number;
  temporalPatchSize: number;
  imageMinPixels: number;
  imageMaxPixels: number;
  /** Qwen2/2.5: per-frame min/max pixels; Qwen3: whole-clip size.shortest_edge/longest_edge. */
  videoMinPixels: number;
  videoMaxPixels: number;
  /** HF video processor sampling defaults (used by the Qwen3 direct-resize SGLang variant). */
  videoFps: number;
  videoMinFrames: number;
  videoMaxFrames: number;
}

export const DEFAULT_GEOMETRY: Readonly<Record<QwenFamily, Readonly<HfGeometry>>> = Object.freeze({
  qwen2_vl: {
    patchSize: 14, mergeSize: 2, temporalPatchSize: 2,
    imageMinPixels: 3136, imageMaxPixels: 12845056, videoMinPixels: 3136, videoMaxPixels: 12845056,
    videoFps: 2, videoMinFrames: 4, videoMaxFrames: 768,
  },
  qwen2_5_vl: {
    patchSize: 14, mergeSize: 2, temporalPatchSize: 2,
    imageMinPixels: 3136, imageMaxPixels: 12845056, videoMinPixels: 3136, videoMaxPixels: 12845056,
    videoFps: 2, videoMinFrames: 4, videoMaxFrames: 768,
  },
  qwen3_vl: {
    patchSize: 16, mergeSize: 2, temporalPatchSize: 2,
    imageMinPixels: 65536, imageMaxPixels: 16777216, videoMinPixels: 4096, videoMaxPixels: 25165824,
    videoFps: 2, videoMinFrames: 4, videoMaxFrames: 768,
  },
});

export interface VisionTokenIds {
  visionStart: number;
  visionEnd: number;
  imagePad: number;
  videoPad: number;
}

export const QWEN_VISION_TOKEN_IDS: Readonly<VisionTokenIds> = Object.freeze({
  visionStart: 151652,
  visionEnd: 151653,
  imagePad: 151655,
  videoPad: 151656,
});

/** HF resize factor: one merged token covers factor x factor pixels. */
export function resizeFactor(g: Pick<HfGeometry, "patchSize" | "mergeSize">): number {
  return g.patchSize * g.mergeSize;
}
