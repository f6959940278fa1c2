// What the suites that replay traces on calibrated workers share (routing, fleet-shapes): the
// worker timing (bench/calibration, services/sglang-sim/timing.ts), the suite's size for the run's
// mode, a worker's KV capacity (kv-capacity.mjs), the TTFT SLO and the relay lag.
import { kvCapacity } from "./kv-capacity.mjs";

/** A request meets the SLO when its TTFT ≤ max(SLO_FLOOR_MS, SLO_FACTOR × its prefill on an idle GPU with the ceiling's hit). */
export const SLO_FLOOR_MS = 1000;
export const SLO_FACTOR = 2;
export const sloMs = (idealPrefillMs) => Math.max(SLO_FLOOR_MS, SLO_FACTOR * idealPrefillMs);
/** Relay → index propagation delay for KV events. */
export const RELAY_LAG_MS = 10;

/** Hashing ready; the H200 worker timing and its prefill cost, `sizes` entry for the mode (tiny, quick, full) and the KV capacity. */
export async function replaySetup(ctx, sizes) {
  const { initHashing } = await import("../../src/util/hash.ts");
  await initHashing();
  const { TIMING_PRESETS, prefillMs, encoderMs } = await import("../../services/sglang-sim/timing.ts");
  return { timing: TIMING_PRESETS["h200-7b"], prefillMs, encoderMs, size: ctx.tiny ? sizes.tiny : ctx.quick ? sizes.quick : sizes.full, kv: kvCapacity() };
}

/** A figure over seeds: mean ± sd with several seeds, the mean alone with one. */
export const seedFigure = (seeds) => (a, digits = 0, scale = 1) => (seeds > 1 ? `${(a.mean * scale).toFixed(digits)}±${(a.sd * scale).toFixed(digits)}` : (a.mean * scale).toFixed(digits));
