/**
 * The full geometry an SGLang worker computes for one image or video: resizes, grid_thw, token
 * counts and (Qwen3-VL) group timestamps. Throws PyError where the worker itself would raise.
 */
import { hfImageSmartResize, hfQwen3VideoSmartResize, type SmallSidePolicy, type TemporalRounding } from "./hf-resize.ts";
import { resizeFactor, type HfGeometry, type QwenFamily } from "./model-geometry.ts";
import { SGLANG_DEFAULTS, type SglangPreprocess, type SglangVideoConfig } from "./sglang-constants.ts";
import { frameIndices, sglangPreprocessVideo, sglangSmartResize, smartNframes, type Hw } from "./sglang-video.ts";
import { qwen3GroupTimestamps, timestampText } from "./timestamps.ts";

export type GridThw = [t: number, h: number, w: number];

export interface ImageGeometry {
  sglangResizedHw: Hw | null;
  hfResizedHw: Hw;
  gridThw: GridThw;
  padCount: number;
}

export interface ImagePipelineParams {
  geometry: HfGeometry;
  /** SGLang before 2025-11-12 pre-resized images with its own rule first. */
  legacyImagePreresize: boolean;
  sglang?: SglangPreprocess;
}

export function imagePipeline(p: ImagePipelineParams, height: number, width: number): ImageGeometry {
  const c = p.sglang ?? SGLANG_DEFAULTS;
  let h = height;
  let w = width;
  let sglangResizedHw: Hw | null = null;
  if (p.legacyImagePreresize) {
    sglangResizedHw = sglangSmartResize(h, w, c.imageFactor, c.minPixels, c.maxPixels, c.maxRatio);
    [h, w] = sglangResizedHw;
  }
  const g = p.geometry;
  const hfResizedHw = hfImageSmartResize(h, w, resizeFactor(g), g.imageMinPixels, g.imageMaxPixels);
  const gridThw: GridThw = [1, hfResizedHw[0] / g.patchSize, hfResizedHw[1] / g.patchSize];
  const padCount = (gridThw[1] * gridThw[2]) / (g.mergeSize * g.mergeSize);
  return { sglangResizedHw, hfResizedHw, gridThw, padCount };
}

export type SglangVariant = "main" | "qwen3_direct_resize";

/** Which transformers branch to take for a side < 32 on Qwen3-VL video; "unknown" = refuse to guess. */
export type SmallSideSetting = SmallSidePolicy | "unknown";

/** Thrown when the contract does not pin down what the worker would compute. Not a Python error. */
export class UnpredictableGeometryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnpredictableGeometryError";
  }
}

export interface VideoPipelineParams {
  family: QwenFamily;
  geometry: HfGeometry;
  sglang: SglangPreprocess;
  videoConfig: SglangVideoConfig;
  variant: SglangVariant;
  temporalRounding: TemporalRounding;
  smallSide: SmallSideSetting;
}

export interface VideoInput {
  totalFrames: number;
  videoFps: number;
  height: number;
  width: number;
}

export interface VideoGeometry {
  nframes: number;
  frameIndices: number[];
  sglangMinPixels: number | null;
  sglangMaxPixels: number | null;
  sglangResizedHw: Hw | null;
  hfResizedHw: Hw;
  gridThw: GridThw;
  tokensPerGroup: number;
  numGroups: number;
  padCount: number;
  /** Qwen3-VL only: per temporal group seconds and their `"<x.y seconds>"` text. */
  timestamps: number[] | null;
  timestampStrings: string[] | null;
}

function qwen3Resize(p: VideoPipelineParams, n: number, h: number, w: number): Hw {
  const g = p.geometry;
  const factor = resizeFactor(g);
  if (p.smallSide === "unknown" && (h < factor || w < factor)) {
    throw new UnpredictableGeometryError(`side below ${factor} (${h}x${w}) and the worker's transformers branch is unknown`);
  }
  return hfQwen3VideoSmartResize(n, h, w, {
    temporalFactor: g.temporalPatchSize,
    factor,
    minPixels: g.videoMinPixels,
    maxPixels: g.videoMaxPixels,
    smallSide: p.smallSide === "unknown" ? "raise" : p.smallSide,
    temporalRounding: p.temporalRounding,
  });
}

export function videoPipeline(p: VideoPipelineParams, input: VideoInput): VideoGeometry {
  const g = p.geometry;
  const isQwen3 = p.family === "qwen3_vl";
  let nframes: number;
  let idx: number[];
  let sglangMinPixels: number | null = null;
  let sglangMaxPixels: number | null = null;
  let sglangResizedHw: Hw | null = null;
  let hfResizedHw: Hw;
  if (p.variant === "qwen3_direct_resize") {
    if (!isQwen3) throw new UnpredictableGeometryError("qwen3_direct_resize applies to Qwen3-VL only");
    // Sampled with the HF processor's fps/min/max (frame factor = temporal patch), resized once from the source size.
    const consts = { frameFactor: g.temporalPatchSize, fps: g.videoFps, minFrames: g.videoMinFrames, maxFrames: g.videoMaxFrames };
    const n0 = smartNframes({}, input.totalFrames, input.videoFps, consts);
    idx = frameIndices(input.totalFrames, n0);
    nframes = idx.length;
    hfResizedHw = qwen3Resize(p, nframes, input.height, input.width);
  } else {
    const pre = sglangPreprocessVideo(input, p.videoConfig, p.sglang);
    nframes = pre.nframes;
    idx = pre.frameIndices;
    sglangMinPixels = pre.minPixels;
    sglangMaxPixels = pre.maxPixels;
    sglangResizedHw = pre.resizedHw;
    const [h, w] = pre.resizedHw;
    hfResizedHw = isQwen3
      ? qwen3Resize(p, nframes, h, w)
      : hfImageSmartResize(h, w, resizeFactor(g), g.videoMinPixels, g.videoMaxPixels);
  }
  const tp = g.temporalPatchSize;
  const gridThw: GridThw = [Math.ceil(nframes / tp), hfResizedHw[0] / g.patchSize, hfResizedHw[1] / g.patchSize];
  const tokensPerGroup = (gridThw[1] * gridThw[2]) / (g.mergeSize * g.mergeSize);
  const numGroups = gridThw[0];
  let timestamps: number[] | null = null;
  let timestampStrings: string[] | null = null;
  if (isQwen3) {
    timestamps = qwen3GroupTimestamps(idx, input.videoFps, tp);
    timestampStrings = timestamps.map(timestampText);
  }
  return {
    nframes,
    frameIndices: idx,
    sglangMinPixels,
    sglangMaxPixels,
    sglangResizedHw,
    hfResizedHw,
    gridThw,
    tokensPerGroup,
    numGroups,
    padCount: tokensPerGroup * numGroups,
    timestamps,
    timestampStrings,
  };
}
