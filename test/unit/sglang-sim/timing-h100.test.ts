import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { COST_TABLES, TIMING_PRESETS, decodeStepMs, encodeItemMs, encoderMs, prefillChunkMs } from "../../../services/sglang-sim/timing.ts";

// The H100 table against the raw GPU run it was derived from (bench/calibration/h100-qwen2_5-vl-7b.json).
const raw = JSON.parse(readFileSync(new URL("../../../bench/calibration/h100-qwen2_5-vl-7b.json", import.meta.url), "utf8"));
const table = COST_TABLES["h100-qwen2_5-vl-7b"];
const t = TIMING_PRESETS["h100-7b"];
type Point = { new: number; cached: number; ms?: number };

describe("calibrated simulator timing (h100-7b)", () => {
  it("reproduces every measured prefill point or raises it as listed for monotonicity; fills only points past the context", () => {
    const measured = raw.prefill.filter((r: Point) => r.ms !== undefined);
    expect(measured.length).toBe(88);
    const prefill = table.prefill as { unmeasured?: [number, number][]; extrapolated?: [number, number][]; raisedForMonotone?: [number, number, number][] };
    const raised = new Map((prefill.raisedForMonotone ?? []).map(([n, p, by]) => [`${n}:${p}`, by]));
    expect([...raised.entries()]).toEqual([["64:122880", 0.267]]);
    for (const r of measured) expect(prefillChunkMs(table, r.new, r.cached)).toBeCloseTo(r.ms + (raised.get(`${r.new}:${r.cached}`) ?? 0), 3);
    expect(prefill.unmeasured).toBeUndefined();
    expect(prefill.extrapolated).toEqual([[16384, 122880], [32768, 122880]]);
    for (const [n, p] of prefill.extrapolated!) expect(n + p).toBeGreaterThan(131_072);
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

  it("vision tower (varlen flash over windows) fitted within its worst error bound of every item; an image costs encoder time", () => {
    expect(raw.vision.attention).toMatch(/varlen/);
    const items = raw.vision.items.filter((v: { ms?: number }) => v.ms !== undefined);
    expect(items.length).toBe(12);
    const vision = JSON.parse(readFileSync(new URL("../../../services/sglang-sim/calibration/h100-qwen2_5-vl-7b.json", import.meta.url), "utf8")).vision;
    expect(vision.points).toBe(12);
    expect(vision.worstRelativeError).toBeLessThan(0.3);
    for (const v of items as { tokens: number; slice_tokens: number; ms: number }[])
      expect(Math.abs(encodeItemMs(t, v.tokens, v.slice_tokens) - v.ms) / v.ms).toBeLessThanOrEqual(vision.worstRelativeError + 1e-3);
    const image = { modality: "image" as const, end: 1100, padCount: 1024, sliceTokens: 1024 };
    expect(encodeItemMs(t, 1024, 1024)).toBeGreaterThan(0);
    expect(encoderMs(t, [image], 0)).toBeCloseTo(encodeItemMs(t, 1024, 1024), 9);
  });
});
