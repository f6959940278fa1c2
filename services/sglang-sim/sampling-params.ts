/**
 * SGLang's `sampling_params` (sampling/sampling_params.py): built as `SamplingParams(**d)`, so an
 * unknown key is a Python TypeError, then `verify()` raises ValueErrors for out-of-range values.
 * Wrong JSON types also end as TypeErrors in Python (a comparison with a str), so they are reported
 * the same way as unknown keys.
 */
import { SglangValueError } from "./sglang-errors.ts";

export interface SamplingParams {
  /** null = no limit (the scheduler clamps it). */
  maxNewTokens: number | null;
  minNewTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  noStopTrim: boolean;
  skipSpecialTokens: boolean;
  samplingSeed: number | null;
  /** Stream a frame every this many output tokens; null: the server's --stream-interval. */
  streamInterval: number | null;
  n: number;
}

/** An unknown key or a wrongly typed value: Python would raise TypeError here. */
export class SamplingTypeError extends Error {
  override readonly name = "SamplingTypeError";
}

type Kind = "int" | "number" | "bool" | "str" | "strOrStrList" | "intList" | "object";

const KEYS: Record<string, { kind: Kind; nullable: boolean }> = {
  max_new_tokens: { kind: "int", nullable: true },
  min_new_tokens: { kind: "int", nullable: false },
  temperature: { kind: "number", nullable: false },
  top_p: { kind: "number", nullable: false },
  top_k: { kind: "int", nullable: false },
  min_p: { kind: "number", nullable: false },
  frequency_penalty: { kind: "number", nullable: false },
  presence_penalty: { kind: "number", nullable: false },
  repetition_penalty: { kind: "number", nullable: false },
  stop: { kind: "strOrStrList", nullable: true },
  stop_token_ids: { kind: "intList", nullable: true },
  stop_regex: { kind: "strOrStrList", nullable: true },
  n: { kind: "int", nullable: false },
  ignore_eos: { kind: "bool", nullable: false },
  no_stop_trim: { kind: "bool", nullable: false },
  skip_special_tokens: { kind: "bool", nullable: false },
  spaces_between_special_tokens: { kind: "bool", nullable: false },
  json_schema: { kind: "str", nullable: true },
  regex: { kind: "str", nullable: true },
  ebnf: { kind: "str", nullable: true },
  structural_tag: { kind: "str", nullable: true },
  logit_bias: { kind: "object", nullable: true },
  sampling_seed: { kind: "int", nullable: true },
  stream_interval: { kind: "int", nullable: true },
  custom_params: { kind: "object", nullable: true },
};

function typeOk(kind: Kind, v: unknown): boolean {
  switch (kind) {
    case "int":
      return typeof v === "number" && Number.isInteger(v);
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "bool":
      return typeof v === "boolean";
    case "str":
      return typeof v === "string";
    case "strOrStrList":
      return typeof v === "string" || (Array.isArray(v) && v.every((s) => typeof s === "string"));
    case "intList":
      return Array.isArray(v) && v.every((x) => typeof x === "number" && Number.isInteger(x));
    case "object":
      return typeof v === "object" && v !== null && !Array.isArray(v);
  }
}

const SAMPLING_EPS = 1e-6;

export function parseSamplingParams(raw: Record<string, unknown>): SamplingParams {
  for (const [key, value] of Object.entries(raw)) {
    const spec = KEYS[key];
    if (!spec) throw new SamplingTypeError(`SamplingParams.__init__() got an unexpected keyword argument '${key}'`);
    if (value === null && spec.nullable) continue;
    if (!typeOk(spec.kind, value)) {
      throw new SamplingTypeError(`SamplingParams: '${key}' has an invalid type (${value === null ? "None" : typeof value})`);
    }
  }
  const num = (k: string, d: number): number => (typeof raw[k] === "number" ? (raw[k] as number) : d);
  const bool = (k: string): boolean => raw[k] === true;

  const maxNewTokens = raw.max_new_tokens === undefined ? 128 : (raw.max_new_tokens as number | null);
  const minNewTokens = num("min_new_tokens", 0);
  let temperature = num("temperature", 1.0);
  const topP = num("top_p", 1.0);
  let topK = num("top_k", 1 << 30);
  const minP = num("min_p", 0.0);
  const frequencyPenalty = num("frequency_penalty", 0.0);
  const presencePenalty = num("presence_penalty", 0.0);
  const repetitionPenalty = num("repetition_penalty", 1.0);
  const n = num("n", 1);

  if (temperature >= 0 && temperature < SAMPLING_EPS) {
    // Greedy: SGLang switches to top_k=1 and resets the temperature.
    topK = 1;
    temperature = 1.0;
  }
  if (topK === -1) topK = 1 << 30;

  if (temperature < 0) throw new SglangValueError(`temperature must be non-negative, got ${String(temperature)}.`);
  if (!(topP > 0 && topP <= 1)) throw new SglangValueError(`top_p must be in (0, 1], got ${String(topP)}.`);
  if (!(minP >= 0 && minP <= 1)) throw new SglangValueError(`min_p must be in [0, 1], got ${String(minP)}.`);
  if (topK < 1) throw new SglangValueError(`top_k must be -1 (disable), or at least 1, got ${topK}.`);
  if (!(frequencyPenalty >= -2 && frequencyPenalty <= 2)) {
    throw new SglangValueError(`frequency_penalty must be in [-2, 2], got ${String(frequencyPenalty)}.`);
  }
  if (!(presencePenalty >= -2 && presencePenalty <= 2)) {
    throw new SglangValueError(`presence_penalty must be in [-2, 2], got ${String(presencePenalty)}.`);
  }
  if (!(repetitionPenalty > 0 && repetitionPenalty <= 2)) {
    throw new SglangValueError(`repetition_penalty must be in (0, 2], got ${String(repetitionPenalty)}.`);
  }
  if (minNewTokens < 0) throw new SglangValueError(`min_new_tokens must be in [0, max_new_tokens], got ${minNewTokens}.`);
  if (maxNewTokens !== null) {
    if (maxNewTokens < 0) throw new SglangValueError(`max_new_tokens must be at least 0, got ${maxNewTokens}.`);
    if (minNewTokens > maxNewTokens) {
      throw new SglangValueError(`min_new_tokens must be in [0, max_new_tokens(${maxNewTokens})], got ${minNewTokens}.`);
    }
  }
  const grammars = ["regex", "json_schema", "ebnf"].filter((k) => typeof raw[k] === "string").length;
  if (grammars > 1) throw new SglangValueError("Only one of regex, json_schema, or ebnf can be set.");
  if (n < 1) throw new SglangValueError(`n must be at least 1, got ${n}.`);

  const stopRaw = raw.stop;
  const stop = typeof stopRaw === "string" ? [stopRaw] : Array.isArray(stopRaw) ? (stopRaw as string[]) : [];
  return {
    maxNewTokens,
    minNewTokens,
    temperature,
    topP,
    topK,
    minP,
    stop: stop.filter((s) => s.length > 0),
    stopTokenIds: Array.isArray(raw.stop_token_ids) ? (raw.stop_token_ids as number[]) : [],
    ignoreEos: bool("ignore_eos"),
    noStopTrim: bool("no_stop_trim"),
    skipSpecialTokens: raw.skip_special_tokens !== false,
    samplingSeed: typeof raw.sampling_seed === "number" ? raw.sampling_seed : null,
    streamInterval: typeof raw.stream_interval === "number" && raw.stream_interval > 0 ? raw.stream_interval : null,
    n,
  };
}
