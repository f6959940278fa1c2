import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { COST_TABLES, TIMING_PRESETS, decodeStepMs, encodeItemMs, encoderMs, prefillChunkMs } from "../../../services/sglang-sim/timing.ts";

// The H100 table against the raw GPU run it was derived from (bench/calibration/h100-qwen2_5-vl-7b.json).
const raw = JSON.parse(readFileSync(new URL("../../../bench/calibration/h100-qwen2_5-vl-7b.json", import.meta.url), "utf8"));
const table = COST_TABLES["h100-qwen2_5-vl-7b"];
const t = TIMING_PRESETS["h100-7b"];
type Point = { new: number; cached: number; ms?: number };

describe("calibrated simulator timing (h100-7b)", () => {
  it("reproduces every measured prefill point, and fills only the points the run skipped", () => {
    const measured = raw.prefill.filter((r: Point) => r.ms !== undefined);
    expect(measured.length).toBe(75);
    for (const r of measured) expect(prefillChunkMs(table, r.new, r.cached)).toBeCloseTo(r.ms, 6);
    const skipped = new Set(raw.prefill.filter((r: Point) => r.ms === undefined).map((r: Point) => `${r.new}:${r.cached}`));
    const unmeasured = (table.prefill as { unmeasured?: [number, number][] }).unmeasured ?? [];
    expect(unmeasured.length).toBe(5);
    const rows = table.prefill.cachedTokens;
    for (const [n, p] of unmeasured) {
      expect(skipped.has(`${n}:${p}`)).toBe(true);
      // the cached axis extended linearly from the two rows below
      const j = rows.indexOf(p);
      const [a, b] = [prefillChunkMs(table, n, rows[j - 2]!), prefillChunkMs(table, n, rows[j - 1]!)];
      expect(prefillChunkMs(table, n, p)).toBeCloseTo(b + ((b - a) * (p - rows[j - 1]!)) / (rows[j - 1]! - rows[j - 2]!), 2);
    }
  });

  it("interpolates monotonically in new and cached tokens up to the 128k context", () => {
    for (const p of [0, 3000, 30_000, 70_000, 100_000, 120_000])
      for (let n = 16; n + p < 131_072; n = Math.ceil(n * 1.3)) {
        expect(prefillChunkMs(table, n * 1.3, p)).toBeGreaterThanOrEqual(prefillChunkMs(table, n, p));
        expect(prefillChunkMs(table, n, p + 1000)).toBeGreaterThanOrEqual(prefillChunkMs(table, n, p) - 1e-9);
      }
  });

  it("decode step fit: within 10 % of every CUDA-graph point but one request at 64k+ of context (within 20 %)", () => {
    const pts = raw.decode.filter((d: { ms?: number }) => d.ms !== undefined);
    expect(pts.length).toBe(31);
    for (const d of pts) {
      const err = Math.abs(decodeStepMs(t, d.batch, d.batch * d.context) - d.ms) / d.ms;
      expect(err).toBeLessThan(d.batch === 1 && d.context >= 65_536 ? 0.2 : 0.1);
    }
  });

  it("vision tower timed through transformers' per-window loop (launch-bound): left out, so media cost no encoder time", () => {
    expect(raw.vision.attention).toMatch(/per-window loop/);
    expect(raw.vision.items.filter((v: { ms?: number }) => v.ms !== undefined).length).toBe(12);
    expect(table.vision).toBeUndefined();
    expect((table as { visionLeftOut?: string }).visionLeftOut).toMatch(/^12 items .* not charged$/);
    const image = { modality: "image" as const, end: 1100, padCount: 1024, sliceTokens: 1024 };
    expect(encodeItemMs(t, 1024, 1024)).toBe(0);
    expect(encoderMs(t, [image], 0)).toBe(0);
  });
});
