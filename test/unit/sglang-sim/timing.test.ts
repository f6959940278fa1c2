import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { COST_TABLES, TIMING_PRESETS, decodeStepMs, prefillChunkMs, prefillMs } from "../../../services/sglang-sim/timing.ts";

// The raw GPU measurements (bench/calibration/calibrate.py output), not the derived table.
const raw = (f: string) => JSON.parse(readFileSync(new URL(`../../../bench/calibration/${f}`, import.meta.url), "utf8"));
const full = raw("h200-qwen2_5-vl-7b.json");
const small = raw("h200-qwen2_5-vl-7b-small.json");
const table = COST_TABLES["h200-qwen2_5-vl-7b"];
const t = TIMING_PRESETS["h200-7b"];

describe("calibrated simulator timing (h200-7b)", () => {
  it("reproduces every measured prefill point of the grid it was derived from", () => {
    const pts = [...small.prefill_graph, ...full.prefill.filter((r: { new: number }) => r.new > 4096)];
    expect(pts.length).toBeGreaterThan(50);
    for (const r of pts) expect(prefillChunkMs(table, r.new, r.cached)).toBeCloseTo(r.ms, 6);
  });

  it("interpolates between grid points monotonically in new and cached tokens", () => {
    for (const p of [0, 3000, 12_000, 30_000])
      for (let n = 16; n < 40_000; n = Math.ceil(n * 1.3)) {
        expect(prefillChunkMs(table, n * 1.3, p)).toBeGreaterThanOrEqual(prefillChunkMs(table, n, p));
        expect(prefillChunkMs(table, n, p + 1000)).toBeGreaterThanOrEqual(prefillChunkMs(table, n, p) - 1e-9);
      }
  });

  it("prefills in 8192-token chunks, each on the prefix before it", () => {
    expect(prefillMs(t, 8192, 0)).toBeCloseTo(prefillChunkMs(table, 8192, 0), 9);
    const chunked = prefillChunkMs(table, 8192, 0) + prefillChunkMs(table, 8192, 8192) + prefillChunkMs(table, 8192, 16_384) + prefillChunkMs(table, 8192, 24_576);
    expect(prefillMs(t, 32_768, 0)).toBeCloseTo(chunked, 9);
    expect(prefillMs({ ...t, chunkedPrefillSize: 32_768 }, 32_768, 0)).toBeCloseTo(1174.01, 2); // the measured unchunked forward
    expect(prefillMs({ ...t, prefillScale: 2 }, 5000, 100)).toBeCloseTo(2 * prefillMs(t, 5000, 100), 9);
    expect(prefillMs(t, 0, 500)).toBe(prefillChunkMs(table, 1, 500)); // one token always runs
  });

  it("decode step fit stays within 10 % of every CUDA-graph measurement", () => {
    const pts = [...full.decode, ...small.decode].filter((d: { ms?: number }) => d.ms !== undefined);
    expect(pts.length).toBeGreaterThan(30);
    for (const d of pts) {
      const m = decodeStepMs(t, d.batch, d.batch * d.context);
      expect(Math.abs(m - d.ms) / d.ms).toBeLessThan(0.1);
    }
  });

  it("leaves the linear presets as they were", () => {
    expect(prefillMs(TIMING_PRESETS["h100-8b"], 12_000)).toBeCloseTo(1008, 9);
    expect(decodeStepMs(TIMING_PRESETS["h100-8b"], 3)).toBeCloseTo(14.3, 9);
  });
});
