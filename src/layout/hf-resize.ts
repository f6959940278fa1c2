/**
 * transformers' Qwen-VL resize rules that run after SGLang:
 * - qwen2_vl image_processing `smart_resize` (all Qwen-VL images; Qwen2/2.5 video frames),
 * - qwen3_vl video_processing `smart_resize` with a whole-clip pixel budget.
 */
import { pythonFloatRepr } from "../util/py-float.ts";
import { pyInt, roundHalfEven } from "./numerics.ts";
import { PyValueError, pyDiv } from "./py-errors.ts";
import type { Hw } from "./sglang-video.ts";

/** HF Qwen2-VL image `smart_resize`: no guard on the first rounding, guard in the downscale branch. */
export function hfImageSmartResize(
  height: number,
  width: number,
  factor: number,
  minPixels: number,
  maxPixels: number,
): Hw {
  const ratio = pyDiv(Math.max(height, width), Math.min(height, width));
  if (ratio > 200) throw new PyValueError(`absolute aspect ratio must be smaller than 200, got ${pythonFloatRepr(ratio)}`);
  let hBar = roundHalfEven(pyDiv(height, factor)) * factor;
  let wBar = roundHalfEven(pyDiv(width, factor)) * factor;
  if (hBar * wBar > maxPixels) {
    const beta = Math.sqrt(pyDiv(height * width, maxPixels));
    hBar = Math.max(factor, Math.floor(height / beta / factor) * factor);
    wBar = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (hBar * wBar < minPixels) {
    const beta = Math.sqrt(pyDiv(minPixels, height * width));
    hBar = Math.ceil((height * beta) / factor) * factor;
    wBar = Math.ceil((width * beta) / factor) * factor;
  }
  return [hBar, wBar];
}

/**
 * What transformers does when a side is below `factor`: the 4.57-era code raises ("raise"); the
 * newest upscales both sides first ("scale"). Which one a given release has is in the contract.
 */
export type SmallSidePolicy = "raise" | "scale";
/** Temporal rounding of the clip budget: `ceil` before transformers 5.15, half-even from 5.15. */
export type TemporalRounding = "ceil" | "half_even";

export interface Qwen3VideoResizeOptions {
  temporalFactor: number;
  factor: number;
  minPixels: number;
  maxPixels: number;
  smallSide: SmallSidePolicy;
  temporalRounding: TemporalRounding;
}

/** HF Qwen3-VL video `smart_resize(num_frames, height, width, …)`: the budget covers the whole clip. */
export function hfQwen3VideoSmartResize(numFrames: number, height: number, width: number, o: Qwen3VideoResizeOptions): Hw {
  const { factor, temporalFactor } = o;
  if (numFrames < temporalFactor) {
    throw new PyValueError(`t:${numFrames} must be larger than temporal_factor:${temporalFactor}`);
  }
  if (height < factor || width < factor) {
    if (o.smallSide === "raise") {
      throw new PyValueError(`height:${height} or width:${width} must be larger than factor:${factor}`);
    }
    const scale = Math.max(factor / height, factor / width);
    height = pyInt(height * scale);
    width = pyInt(width * scale);
  }
  const ratio = pyDiv(Math.max(height, width), Math.min(height, width));
  if (ratio > 200) throw new PyValueError(`absolute aspect ratio must be smaller than 200, got ${pythonFloatRepr(ratio)}`);
  let hBar = roundHalfEven(height / factor) * factor;
  let wBar = roundHalfEven(width / factor) * factor;
  const tq = numFrames / temporalFactor;
  const tBar = (o.temporalRounding === "ceil" ? Math.ceil(tq) : roundHalfEven(tq)) * temporalFactor;
  if (tBar * hBar * wBar > o.maxPixels) {
    const beta = Math.sqrt(pyDiv(numFrames * height * width, o.maxPixels));
    hBar = Math.max(factor, Math.floor(height / beta / factor) * factor);
    wBar = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (tBar * hBar * wBar < o.minPixels) {
    const beta = Math.sqrt(pyDiv(o.minPixels, numFrames * height * width));
    hBar = Math.ceil((height * beta) / factor) * factor;
    wBar = Math.ceil((width * beta) / factor) * factor;
  }
  return [hBar, wBar];
}
