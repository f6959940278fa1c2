/**
 * Contract-driven layout of one media item: runs the pipeline the worker would run and returns its
 * token-run pieces, or a named reason to fall back (never throws for media the worker would reject).
 */
import type { WorkerContract } from "./contract.ts";
import { ineligible, type Ineligible } from "./eligibility-reasons.ts";
import { imageLayout, videoLayout, type LayoutPiece } from "./layout.ts";
import { imagePipeline, UnpredictableGeometryError, videoPipeline, type ImageGeometry, type VideoGeometry, type VideoPipelineParams } from "./pipeline.ts";
import { isPyError } from "./py-errors.ts";

export function contractVideoParams(c: WorkerContract): VideoPipelineParams {
  return {
    family: c.family,
    geometry: c.hf,
    sglang: c.sglangPreprocess,
    videoConfig: c.sglangVideoConfig,
    variant: c.sglangVariant,
    temporalRounding: c.resizeMode === "legacy_ceil" ? "ceil" : "half_even",
    smallSide: c.smallSidePolicy,
  };
}

export interface ImageProbe {
  width: number;
  height: number;
}

/** What the decode service reports for a video: the decoder's frame count and average fps. */
export interface VideoProbe {
  totalFrames: number;
  avgFps: number;
  width: number;
  height: number;
}

export type ItemLayoutResult<G> = { ok: true; pieces: LayoutPiece[]; geometry: G } | Ineligible;

const validDim = (v: number): boolean => Number.isSafeInteger(v) && v > 0;

function fromError(e: unknown, what: string): Ineligible {
  if (e instanceof UnpredictableGeometryError) return ineligible("unpredictable_geometry", `${what}: ${e.message}`);
  if (isPyError(e)) return ineligible("worker_would_reject", `${what}: worker raises ${e.pyType}: ${e.message}`);
  throw e;
}

export function layoutImageItem(c: WorkerContract, probe: ImageProbe): ItemLayoutResult<ImageGeometry> {
  if (!validDim(probe.width) || !validDim(probe.height)) return ineligible("unresolved_media", "image size unknown");
  try {
    const g = imagePipeline(
      { geometry: c.hf, legacyImagePreresize: c.imagePreresize === "sglang_legacy", sglang: c.sglangPreprocess },
      probe.height,
      probe.width,
    );
    return { ok: true, pieces: imageLayout(g), geometry: g };
  } catch (e) {
    return fromError(e, "image");
  }
}

export function layoutVideoItem(c: WorkerContract, probe: VideoProbe): ItemLayoutResult<VideoGeometry> {
  if (!validDim(probe.width) || !validDim(probe.height) || !Number.isSafeInteger(probe.totalFrames) || probe.totalFrames < 0) {
    return ineligible("unprobeable_video", "video probe incomplete");
  }
  if (!(Number.isFinite(probe.avgFps) && probe.avgFps > 0)) return ineligible("unprobeable_video", "video fps unknown");
  // SGLang raises for 0-1 frame clips (nframes can't reach the frame factor); say so by name.
  if (probe.totalFrames < c.sglangPreprocess.frameFactor) return ineligible("single_frame_video", `${probe.totalFrames} frame(s)`);
  try {
    const g = videoPipeline(contractVideoParams(c), {
      totalFrames: probe.totalFrames,
      videoFps: probe.avgFps,
      height: probe.height,
      width: probe.width,
    });
    return { ok: true, pieces: videoLayout(g, c.layoutVariant, c.placeholderTarget), geometry: g };
  } catch (e) {
    return fromError(e, "video");
  }
}
