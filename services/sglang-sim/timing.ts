/**
 * Timing model: prefill cost grows with the uncached prompt tokens (prefills run one at a time, as
 * one GPU does), decode costs a fixed time per output token plus a small per-running-request term
 * (a bigger decode batch steps more slowly). Numbers are wall-clock milliseconds.
 */
import { z } from "zod";

export const TimingSchema = z.strictObject({
  /** Fixed scheduling overhead per prefill. */
  prefillOverheadMs: z.number().min(0),
  /** Prefill throughput for tokens not served from the cache. */
  prefillTokensPerSec: z.number().positive(),
  /** Time per decode step (one output token) with a single running request. */
  decodeMsPerToken: z.number().min(0),
  /** Extra time per decode step for every other running request. */
  decodeMsPerRunningRequest: z.number().min(0),
});
export type Timing = z.infer<typeof TimingSchema>;

export const TIMING_PRESETS = {
  /** Unit and e2e tests: a 3k-token prefill takes ~30 ms. */
  fast: { prefillOverheadMs: 0, prefillTokensPerSec: 100_000, decodeMsPerToken: 2, decodeMsPerRunningRequest: 0 },
  /** No artificial delays at all (pure logic tests). */
  instant: { prefillOverheadMs: 0, prefillTokensPerSec: 1e12, decodeMsPerToken: 0, decodeMsPerRunningRequest: 0 },
  /** Roughly an 8B VL model on one H100 (bf16): ~12k prefill tok/s, ~14 ms/token decode. */
  "h100-8b": { prefillOverheadMs: 8, prefillTokensPerSec: 12_000, decodeMsPerToken: 14, decodeMsPerRunningRequest: 0.15 },
  /** Roughly an 8B VL model on one L4/A10-class GPU. */
  "l4-8b": { prefillOverheadMs: 15, prefillTokensPerSec: 3_000, decodeMsPerToken: 45, decodeMsPerRunningRequest: 0.6 },
} as const satisfies Record<string, Timing>;

export const TimingPresetNameSchema = z.enum(["fast", "instant", "h100-8b", "l4-8b"]);
export type TimingPresetName = z.infer<typeof TimingPresetNameSchema>;

export function resolveTiming(preset: TimingPresetName, overrides: Partial<Timing>): Timing {
  return TimingSchema.parse({ ...TIMING_PRESETS[preset], ...overrides });
}

export function prefillMs(t: Timing, uncachedTokens: number): number {
  return t.prefillOverheadMs + (Math.max(0, uncachedTokens) / t.prefillTokensPerSec) * 1000;
}

export function decodeStepMs(t: Timing, runningRequests: number): number {
  return t.decodeMsPerToken + Math.max(0, runningRequests - 1) * t.decodeMsPerRunningRequest;
}
