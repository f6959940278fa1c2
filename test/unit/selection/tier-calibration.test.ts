/**
 * Load-back calibration from receipts: synthetic samples from a known link converge on its
 * bandwidth; bad numbers and outliers are refused and never reach the cost.
 */
import { describe, expect, it } from "vitest";
import { TierCalibration, TIER_CALIBRATION_MIN_SAMPLES } from "../../../src/selection/tier-calibration.ts";
import { DEFAULT_TIER_COST, hostLoadBackMs } from "../../../src/selection/tier-cost.ts";

const BYTES = 1024 * DEFAULT_TIER_COST.kvBytesPerToken; // 64 blocks of 16 tokens

/** Deterministic noise in [1 − spread, 1 + spread]. */
function noise(i: number, spread: number): number {
  return 1 + spread * (((i * 7919) % 101) / 50 - 1);
}

/** A receipt's sample: predicted at the bandwidth in use, measured on a link of `trueGbps` (± noise). */
function sample(cal: TierCalibration, trueGbps: number, i: number) {
  const predictedMs = hostLoadBackMs(cal.params(), 64, 16);
  return { tier: "host" as const, bytes: BYTES, predictedMs, measuredMs: (BYTES / (trueGbps * 1e9)) * 1000 * noise(i, 0.2) };
}

describe("TierCalibration", () => {
  it("uses the configured bandwidth until enough samples, then converges on the link's true one", () => {
    const cal = new TierCalibration(DEFAULT_TIER_COST);
    for (let i = 0; i < TIER_CALIBRATION_MIN_SAMPLES - 1; i++) expect(cal.add(sample(cal, 5, i))).toBe(true);
    expect(cal.params().hostLoadGBps).toBe(37);
    expect(cal.view("host")).toMatchObject({ estimatedGbps: null, accepted: TIER_CALIBRATION_MIN_SAMPLES - 1 });
    // Predicted at 37 GB/s, measured at 5: the load-back takes ~7.4× the prediction.
    expect(cal.view("host").measuredOverPredicted).toBeGreaterThan(5);
    for (let i = TIER_CALIBRATION_MIN_SAMPLES - 1; i < 100; i++) cal.add(sample(cal, 5, i));
    expect(cal.params().hostLoadGBps).toBeGreaterThan(4.5);
    expect(cal.params().hostLoadGBps).toBeLessThan(5.5);
    // Predicting at the calibrated bandwidth: the EWMA of measured / predicted comes back to ~1.
    expect(cal.view("host").measuredOverPredicted).toBeGreaterThan(0.85);
    expect(cal.view("host").measuredOverPredicted).toBeLessThan(1.2);
    expect(cal.params().storageLoadGBps).toBe(2);
  });

  it("refuses bad samples: the cost never sees zero, negative, NaN or infinite bandwidth", () => {
    const cal = new TierCalibration(DEFAULT_TIER_COST);
    const bad = [
      { tier: "host" as const, bytes: BYTES, predictedMs: 4, measuredMs: 0 },
      { tier: "host" as const, bytes: BYTES, predictedMs: 4, measuredMs: -20 },
      { tier: "host" as const, bytes: BYTES, predictedMs: 4, measuredMs: Number.NaN },
      { tier: "host" as const, bytes: Number.POSITIVE_INFINITY, predictedMs: 4, measuredMs: 10 },
      { tier: "host" as const, bytes: 0, predictedMs: 4, measuredMs: 10 },
      { tier: "host" as const, bytes: BYTES, predictedMs: 0, measuredMs: 10 },
      // 151 MB in a microsecond: 150 000 GB/s, past the configuration's own bound.
      { tier: "host" as const, bytes: BYTES, predictedMs: 4, measuredMs: 0.001 },
    ];
    for (let k = 0; k < 3; k++) for (const s of bad) expect(cal.add(s)).toBe(false);
    expect(cal.view("host")).toMatchObject({ accepted: 0, rejected: 3 * bad.length, estimatedGbps: null, measuredOverPredicted: null, gbps: 37 });
  });

  it("ignores outliers once seeded: a stalled request does not drag the estimate", () => {
    const cal = new TierCalibration(DEFAULT_TIER_COST);
    for (let i = 0; i < 30; i++) cal.add(sample(cal, 10, i));
    const before = cal.params().hostLoadGBps;
    expect(before).toBeGreaterThan(9);
    expect(before).toBeLessThan(11);
    // A queue stall (100× slower) and a lost event (measured 100× faster) are refused.
    expect(cal.add({ tier: "host", bytes: BYTES, predictedMs: 15, measuredMs: 1500 })).toBe(false);
    expect(cal.add({ tier: "host", bytes: BYTES, predictedMs: 15, measuredMs: 0.15 })).toBe(false);
    expect(cal.params().hostLoadGBps).toBe(before);
    expect(cal.view("host").rejected).toBe(2);
  });
});
