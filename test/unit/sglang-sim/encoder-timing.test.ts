import { describe, expect, it } from "vitest";
import { COST_TABLES, TIMING_PRESETS, encoderMs, encoderMsBy, type MediaCostItem } from "../../../services/sglang-sim/timing.ts";

// The rule of when a prefill pays the vision tower (SGLang's mm_utils._get_chunked_prefill_embedding,
// timing.ts), over a per-item cost of our own; the H100 tower fit against its run: timing-h100.test.ts.
const itemMs = (tokens: number, sliceTokens: number) => 1 + tokens / 100 + sliceTokens / 1000;
const img = (end: number, padCount: number): MediaCostItem => ({ modality: "image", end, padCount, sliceTokens: padCount });

describe("vision-encoder time of a prefill", () => {
  it("charges a modality's items together when any of them reaches past the cached prefix, else nothing", () => {
    const a = img(1100, 1024);
    const b = img(2200, 1024);
    const one = itemMs(1024, 1024);
    expect(encoderMsBy(itemMs, [a, b], 2200)).toBe(0);
    expect(encoderMsBy(itemMs, [a, b], 1100)).toBeCloseTo(2 * one, 9);
    expect(encoderMsBy(itemMs, [a, b], 0)).toBeCloseTo(2 * one, 9);
    const video: MediaCostItem = { modality: "video", end: 5000, padCount: 2048, sliceTokens: 256 };
    expect(encoderMsBy(itemMs, [a, video], 1100)).toBeCloseTo(itemMs(2048, 256), 9);
    expect(encoderMsBy(itemMs, [a, video], 5000)).toBe(0);
  });

  it("does not charge items whose embedding an encoder server computed (EPD)", () => {
    expect(encoderMsBy(itemMs, [{ ...img(100, 64), padSource: "embedding" }], 0)).toBe(0);
    expect(encoderMsBy(itemMs, [{ ...img(100, 64), padSource: "embedding" }, img(300, 64)], 0)).toBeCloseTo(itemMs(64, 64), 9);
  });

  it("costs nothing on the linear presets", () => {
    for (const preset of ["h100-8b", "fast"] as const) expect(encoderMs(TIMING_PRESETS[preset], [img(100, 64)], 0)).toBe(0);
  });

  it("charges the H200 table the H100 run's tower fit (same compute; derive.mjs --vision-from, recorded in the table)", () => {
    const h200 = encoderMs(TIMING_PRESETS["h200-7b"], [img(1100, 1024)], 0);
    expect(h200).toBeGreaterThan(30);
    expect(h200).toBeCloseTo(encoderMs(TIMING_PRESETS["h100-7b"], [img(1100, 1024)], 0), 9);
    expect((COST_TABLES["h200-qwen2_5-vl-7b"] as { visionFrom?: string }).visionFrom).toMatch(/^bench\/calibration\/h100-qwen2_5-vl-7b\.json: .*132 SMs/);
  });
});
