/**
 * Timing model. Two kinds:
 * - linear presets: prefill cost grows with the uncached prompt tokens at a fixed rate, decode costs a
 *   fixed time per output token plus a per-running-request term;
 * - calibrated (`calibration` set): costs measured on a GPU (bench/calibration/, one H200 or one H100
 *   with a Qwen2.5-VL-7B language model): a prefill chunk costs T(new, cached) interpolated from the measured
 *   grid, a prompt is prefilled in chunks of `chunkedPrefillSize` (SGLang --chunked-prefill-size; each
 *   chunk attends to the cached prefix and the earlier chunks), and a decode step of the running batch
 *   costs a + b·batch + c·(KV tokens the batch attends to); where the table measured the vision tower,
 *   a media item's encoder forward costs a + b·tokens + c·tokens·sliceTokens (encoderMs).
 * Prefills run one at a time, as one GPU does. Numbers are wall-clock milliseconds.
 */
import { z } from "zod";
import h100Qwen25Vl7b from "./calibration/h100-qwen2_5-vl-7b.json" with { type: "json" };
import h200Qwen25Vl7b from "./calibration/h200-qwen2_5-vl-7b.json" with { type: "json" };

/** A measured cost table (services/sglang-sim/calibration/*.json, made by bench/calibration/derive.mjs). */
export interface CostTable {
  chunkedPrefillSize: number;
  prefill: { newTokens: number[]; cachedTokens: number[]; ms: number[][] };
  decode: { baseMs: number; perRequestMs: number; perThousandKvTokensMs: number };
  /** The vision tower's forward per media item (tables measured with it). */
  vision?: { baseMs: number; perThousandTokensMs: number; perMillionTokenSliceTokensMs: number };
}

export const COST_TABLES = { "h200-qwen2_5-vl-7b": h200Qwen25Vl7b as CostTable, "h100-qwen2_5-vl-7b": h100Qwen25Vl7b as CostTable } as const;
export const CostTableNameSchema = z.enum(["h200-qwen2_5-vl-7b", "h100-qwen2_5-vl-7b"]);

export const TimingSchema = z.strictObject({
  /** Fixed scheduling overhead per prefill. */
  prefillOverheadMs: z.number().min(0),
  /** Prefill throughput for tokens not served from the cache. */
  prefillTokensPerSec: z.number().positive(),
  /** Time per decode step (one output token) with a single running request. */
  decodeMsPerToken: z.number().min(0),
  /** Extra time per decode step for every other running request. */
  decodeMsPerRunningRequest: z.number().min(0),
  /** Use a measured cost table instead of the linear terms above (which then go unused). */
  calibration: CostTableNameSchema.optional(),
  /** Tokens per prefill chunk (SGLang --chunked-prefill-size); calibrated model only; default the table's. */
  chunkedPrefillSize: z.int().positive().optional(),
  /** Multiplies every calibrated prefill cost (sensitivity runs: 2 = half the prefill rate). */
  prefillScale: z.number().positive().optional(),
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
  /** Measured: Qwen2.5-VL-7B language model on one H200, SGLang's default 8192-token prefill chunks (bench/calibration). */
  "h200-7b": { prefillOverheadMs: 0, prefillTokensPerSec: 30_000, decodeMsPerToken: 7, decodeMsPerRunningRequest: 0.01, calibration: "h200-qwen2_5-vl-7b" },
  /**
   * Measured: the same on one H100, cached prefix to 122 880 tokens, decode to 131 072 of context, and
   * the vision tower's forward (varlen flash attention over windows).
   */
  "h100-7b": { prefillOverheadMs: 0, prefillTokensPerSec: 30_000, decodeMsPerToken: 8, decodeMsPerRunningRequest: 0.01, calibration: "h100-qwen2_5-vl-7b" },
} as const satisfies Record<string, Timing>;

export const TimingPresetNameSchema = z.enum(["fast", "instant", "h100-8b", "l4-8b", "h200-7b", "h100-7b"]);
export type TimingPresetName = z.infer<typeof TimingPresetNameSchema>;

export function resolveTiming(preset: TimingPresetName, overrides: Partial<Timing>): Timing {
  return TimingSchema.parse({ ...TIMING_PRESETS[preset], ...overrides });
}

/** Index i with xs[i] ≤ x < xs[i+1], clamped so that [i, i+1] is a valid segment (extrapolates at the ends). */
function segment(xs: readonly number[], x: number): number {
  let i = 0;
  while (i < xs.length - 2 && x >= xs[i + 1]!) i++;
  return i;
}

/** Linear interpolation on one axis; beyond the ends, the end segment's slope continues. */
function lerp(xs: readonly number[], ys: readonly number[], x: number): number {
  const i = segment(xs, x);
  const x0 = xs[i]!;
  const x1 = xs[i + 1]!;
  return ys[i]! + ((ys[i + 1]! - ys[i]!) * (x - x0)) / (x1 - x0);
}

/** One prefill forward of `newTokens` on top of `cachedTokens` (bilinear in the measured grid). */
export function prefillChunkMs(table: CostTable, newTokens: number, cachedTokens: number): number {
  if (newTokens <= 0) return 0;
  const { newTokens: ns, cachedTokens: ps, ms } = table.prefill;
  const j = segment(ps, cachedTokens);
  const a = lerp(ns, ms[j]!, newTokens);
  const b = lerp(ns, ms[j + 1]!, newTokens);
  const p0 = ps[j]!;
  const v = a + ((b - a) * (cachedTokens - p0)) / (ps[j + 1]! - p0);
  return Math.max(ms[0]![0]!, v);
}

/** Tokens per prefill chunk under timing `t` (calibrated model; Infinity for the linear one). */
export function chunkSize(t: Timing): number {
  return t.calibration ? (t.chunkedPrefillSize ?? COST_TABLES[t.calibration].chunkedPrefillSize) : Infinity;
}

/**
 * Prefill time of a prompt whose first `cachedTokens` are served from the cache. Calibrated: the sum
 * of its chunks (each on the prefix before it), as SGLang runs them with nothing else in the batch.
 */
export function prefillMs(t: Timing, uncachedTokens: number, cachedTokens = 0): number {
  if (!t.calibration) return t.prefillOverheadMs + (Math.max(0, uncachedTokens) / t.prefillTokensPerSec) * 1000;
  // At least one token is always computed (it yields the first logits).
  const n = Math.max(1, uncachedTokens);
  const table = COST_TABLES[t.calibration];
  const chunk = chunkSize(t);
  let ms = 0;
  for (let done = 0; done < n; done += chunk) ms += prefillChunkMs(table, Math.min(chunk, n - done), cachedTokens + done);
  return t.prefillOverheadMs + ms * (t.prefillScale ?? 1);
}

/**
 * One decode step (one token for each running request). Calibrated: the measured fit over batch size
 * and the KV tokens the batch attends to (`contextTokens`, summed over the batch); linear: a fixed
 * time plus a per-request term.
 */
export function decodeStepMs(t: Timing, runningRequests: number, contextTokens = 0): number {
  if (!t.calibration) return t.decodeMsPerToken + Math.max(0, runningRequests - 1) * t.decodeMsPerRunningRequest;
  const d = COST_TABLES[t.calibration].decode;
  return d.baseMs + d.perRequestMs * Math.max(1, runningRequests) + (d.perThousandKvTokensMs * Math.max(0, contextTokens)) / 1000;
}

/** A media item of a prompt as the encoder's cost sees it. */
export interface MediaCostItem {
  modality: "image" | "video";
  /** End (exclusive) of the item's token run in the prompt. */
  end: number;
  /** Media (pad) tokens of the item: the vision tower's merged outputs. */
  padCount: number;
  /** Tokens per temporal slice (an image: all of them): the span a full-attention block attends over. */
  sliceTokens: number;
  /** "embedding": the embedding came from an encoder server (EPD), so this worker runs no vision forward for it. */
  padSource?: string;
}

/** One media item's vision-tower forward (calibrated tables that measured it; else 0). */
export function encodeItemMs(t: Timing, tokens: number, sliceTokens: number): number {
  const v = t.calibration ? COST_TABLES[t.calibration].vision : undefined;
  if (!v || tokens <= 0) return 0;
  return (v.baseMs + (v.perThousandTokensMs * tokens) / 1000 + (v.perMillionTokenSliceTokensMs * tokens * sliceTokens) / 1e6) * (t.prefillScale ?? 1);
}

/**
 * Vision-encoder time of one request's prefill, as SGLang spends it (sgl-project/sglang
 * python/sglang/srt/managers/mm_utils.py `_get_chunked_prefill_embedding` @005fa833): per modality,
 * nothing when every item of it lies inside the cached prefix; otherwise the request's items of that
 * modality are encoded together in the prefill forward, once (its embedding cache serves the later
 * chunks). Items whose embedding an encoder server computed (`_get_precomputed_embedding`) cost nothing
 * here. The cross-request hit of that cache (the same item set again while its embedding is still
 * held) is not modelled: such a request pays again.
 */
export function encoderMs(t: Timing, media: readonly MediaCostItem[], cachedTokens: number): number {
  return encoderMsBy((tokens, sliceTokens) => encodeItemMs(t, tokens, sliceTokens), media, cachedTokens);
}

/** `encoderMs`'s rule over any per-item cost (the tests' own, before a table measures the tower). */
export function encoderMsBy(itemMs: (tokens: number, sliceTokens: number) => number, media: readonly MediaCostItem[], cachedTokens: number): number {
  let ms = 0;
  for (const modality of ["image", "video"] as const) {
    const items = media.filter((m) => m.modality === modality && m.padSource !== "embedding");
    if (items.every((m) => m.end <= cachedTokens)) continue;
    for (const m of items) ms += itemMs(m.padCount, m.sliceTokens);
  }
  return ms;
}
