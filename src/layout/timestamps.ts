/**
 * Qwen3-VL per-temporal-group timestamps (HF processing_qwen3_vl `_calculate_timestamps`) and the
 * `"<x.y seconds>"` text that precedes each group.
 */
import { formatFixed1 } from "./format.ts";
import { pyDiv } from "./py-errors.ts";

/** Indices padded with the last one to a multiple of `temporalPatchSize`; per group (first+last)/2 seconds. */
export function qwen3GroupTimestamps(frameIndices: readonly number[], videoFps: number, temporalPatchSize: number): number[] {
  const idx = frameIndices.slice();
  const rem = idx.length % temporalPatchSize;
  if (rem !== 0 && idx.length > 0) {
    const lastIdx = idx[idx.length - 1]!;
    for (let k = 0; k < temporalPatchSize - rem; k++) idx.push(lastIdx);
  }
  const out: number[] = [];
  for (let i = 0; i < idx.length; i += temporalPatchSize) {
    const first = pyDiv(idx[i]!, videoFps);
    const last = pyDiv(idx[i + temporalPatchSize - 1]!, videoFps);
    out.push((first + last) / 2);
  }
  return out;
}

/** `f"<{t:.1f} seconds>"`. */
export function timestampText(seconds: number): string {
  return `<${formatFixed1(seconds)} seconds>`;
}
