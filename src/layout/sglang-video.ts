/**
 * SGLang's own Qwen-VL resize and frame sampling (qwen_vl.py smart_resize L80-110, smart_nframes
 * L128-173, preprocess_video L177-256). Float operation order is kept exactly as in Python.
 */
import { pythonFloatRepr } from "../util/py-float.ts";
import { ceilByFactor, floorByFactor, pyInt, roundByFactor } from "./numerics.ts";
import { PyAssertionError, PyValueError, pyDiv } from "./py-errors.ts";
import { SGLANG_DEFAULTS, type SglangPreprocess, type SglangVideoConfig } from "./sglang-constants.ts";

export type Hw = [height: number, width: number];

/** SGLang `smart_resize`: note the `max(factor, …)` guard only on the first rounding. */
export function sglangSmartResize(
  height: number,
  width: number,
  factor: number = SGLANG_DEFAULTS.imageFactor,
  minPixels: number = SGLANG_DEFAULTS.minPixels,
  maxPixels: number = SGLANG_DEFAULTS.maxPixels,
  maxRatio: number = SGLANG_DEFAULTS.maxRatio,
): Hw {
  const ratio = pyDiv(Math.max(height, width), Math.min(height, width));
  if (ratio > maxRatio) {
    throw new PyValueError(`absolute aspect ratio must be smaller than ${maxRatio}, got ${pythonFloatRepr(ratio)}`);
  }
  let hBar = Math.max(factor, roundByFactor(height, factor));
  let wBar = Math.max(factor, roundByFactor(width, factor));
  if (hBar * wBar > maxPixels) {
    const beta = Math.sqrt(pyDiv(height * width, maxPixels));
    hBar = floorByFactor(height / beta, factor);
    wBar = floorByFactor(width / beta, factor);
  } else if (hBar * wBar < minPixels) {
    const beta = Math.sqrt(pyDiv(minPixels, height * width));
    hBar = ceilByFactor(height * beta, factor);
    wBar = ceilByFactor(width * beta, factor);
  }
  return [hBar, wBar];
}

/** The sampling knobs of `smart_nframes` (`ele`): SGLang passes the server video config. */
export type NframesOptions = Pick<SglangVideoConfig, "fps" | "nframes" | "min_frames" | "max_frames">;

/** SGLang `smart_nframes(ele, total_frames, video_fps)`; always even, 2 <= n <= total. */
export function smartNframes(
  ele: NframesOptions,
  totalFrames: number,
  videoFps: number,
  consts: Pick<SglangPreprocess, "frameFactor" | "fps" | "minFrames" | "maxFrames"> = SGLANG_DEFAULTS,
): number {
  const hasFps = ele.fps !== undefined;
  const hasN = ele.nframes !== undefined;
  if (hasFps && hasN) throw new PyAssertionError("Only accept either `fps` or `nframes`");
  const ff = consts.frameFactor;
  let n: number;
  if (hasN) {
    n = roundByFactor(ele.nframes!, ff);
  } else {
    const fps = ele.fps ?? consts.fps;
    const minFrames = ceilByFactor(ele.min_frames ?? consts.minFrames, ff);
    const maxFrames = floorByFactor(ele.max_frames ?? Math.min(consts.maxFrames, totalFrames), ff);
    let x = pyDiv(totalFrames, videoFps) * fps;
    x = Math.min(Math.min(Math.max(x, minFrames), maxFrames), totalFrames);
    n = floorByFactor(x, ff);
  }
  if (!(ff <= n && n <= totalFrames)) {
    throw new PyValueError(`nframes should in interval [${ff}, ${totalFrames}], but got ${n}.`);
  }
  return n;
}

/**
 * `np.unique(np.linspace(0, total-1, n, dtype=int64))`: numpy computes `i*step` in doubles with
 * step=(total-1)/(n-1), truncates, and pins the last sample to total-1 exactly.
 */
export function frameIndices(totalFrames: number, nframes: number): number[] {
  const out: number[] = [];
  if (nframes <= 0) return out;
  if (nframes === 1) return [0];
  const last = totalFrames - 1;
  const step = last / (nframes - 1);
  let prev = -Infinity;
  for (let i = 0; i < nframes; i++) {
    const v = i === nframes - 1 ? last : Math.trunc(i * step);
    if (v !== prev) out.push(v); // linspace is non-decreasing, so unique == drop repeats
    prev = v;
  }
  return out;
}

/** Per-frame pixel budget of `preprocess_video` for `nframes` sampled frames (max may be a float). */
export function videoFramePixelBudget(
  nframes: number,
  cfg: Pick<SglangVideoConfig, "min_pixels" | "max_pixels" | "total_pixels">,
  consts: Pick<SglangPreprocess, "videoMinPixels" | "videoMaxPixels" | "videoTotalPixels" | "frameFactor"> = SGLANG_DEFAULTS,
): { minPixels: number; maxPixels: number } {
  const minPixels = cfg.min_pixels ?? consts.videoMinPixels;
  const total = cfg.total_pixels ?? consts.videoTotalPixels;
  let maxPixels = Math.max(
    Math.min(cfg.max_pixels ?? consts.videoMaxPixels, (pyDiv(total, nframes)) * consts.frameFactor),
    pyInt(minPixels * 1.05),
  );
  maxPixels = Math.min(cfg.max_pixels ?? maxPixels, maxPixels);
  return { minPixels, maxPixels };
}

export interface SglangVideoPreprocessResult {
  nframes: number;
  frameIndices: number[];
  minPixels: number;
  maxPixels: number;
  resizedHw: Hw;
}

/** The geometry half of `preprocess_video`: frames chosen and the size they are resized to. */
export function sglangPreprocessVideo(
  input: { totalFrames: number; videoFps: number; height: number; width: number },
  cfg: SglangVideoConfig = {},
  consts: SglangPreprocess = SGLANG_DEFAULTS,
): SglangVideoPreprocessResult {
  const n0 = smartNframes(cfg, input.totalFrames, input.videoFps, consts);
  const idx = frameIndices(input.totalFrames, n0);
  const nframes = idx.length;
  const { minPixels, maxPixels } = videoFramePixelBudget(nframes, cfg, consts);
  const resizedHw =
    cfg.resized_height !== undefined && cfg.resized_width !== undefined
      ? sglangSmartResize(cfg.resized_height, cfg.resized_width, consts.imageFactor, consts.minPixels, consts.maxPixels, consts.maxRatio)
      : sglangSmartResize(input.height, input.width, consts.imageFactor, minPixels, maxPixels, consts.maxRatio);
  return { nframes, frameIndices: idx, minPixels, maxPixels, resizedHw };
}
