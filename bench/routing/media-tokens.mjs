// Media token counts for the vision trace from kvedge's own layout (src/layout: the image and video
// pipelines the edge runs to place pad spans) on the Qwen2.5-VL fixture contract, the model family
// the calibrated worker cost model stands for (bench/calibration/h200-qwen2_5-vl-7b.json).
import { fixtureContract } from "../../test/fixtures/models/load.ts";
import { layoutImageItem, layoutVideoItem } from "../../src/layout/index.ts";

/** Typical inputs: images as width × height, videos as seconds, fps, width, height. */
export const MEDIA_SHAPES = {
  family: "qwen2_5_vl",
  images: [
    [640, 480],
    [1024, 768],
    [1280, 720],
    [1920, 1080],
  ],
  videos: [
    [20, 30, 1280, 720],
    [60, 30, 1280, 720],
    [120, 25, 854, 480],
  ],
};

/**
 * Pad tokens per image shape and per video shape (same order as MEDIA_SHAPES), and per video shape the
 * tokens of one temporal slice (what the vision tower's full-attention blocks attend over; an image is
 * one slice).
 */
export function mediaTokenCounts(shapes = MEDIA_SHAPES) {
  const c = fixtureContract(shapes.family);
  const images = shapes.images.map(([width, height]) => {
    const r = layoutImageItem(c, { width, height });
    if (!r.ok) throw new Error(`image ${width}×${height}: ${r.detail}`);
    return r.geometry.padCount;
  });
  const videos = shapes.videos.map(([secs, fps, width, height]) => {
    const r = layoutVideoItem(c, { totalFrames: secs * fps, avgFps: fps, width, height });
    if (!r.ok) throw new Error(`video ${secs} s ${width}×${height}: ${r.detail}`);
    return r.geometry;
  });
  return { images, videos: videos.map((g) => g.padCount), videoSlices: videos.map((g) => g.tokensPerGroup) };
}
