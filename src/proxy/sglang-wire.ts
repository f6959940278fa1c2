/**
 * SGLang `/generate` wire shapes (sgl-project/sglang @9d147fd: `GenerateReqInput` in
 * python/sglang/srt/managers/io_struct.py L154-786, `SamplingParams` in
 * python/sglang/srt/sampling/sampling_params.py L75-273, responses from
 * python/sglang/srt/entrypoints/http_server.py L809-859). Request types are
 * closed (an unknown sampling key makes SGLang fail with a 500 or a broken stream); response
 * schemas are lenient (SGLang adds `meta_info` keys freely) and validate only what we read.
 */
import { z } from "zod";

/** Exactly the `sampling_params` keys this router may send (all exist in SGLang's SamplingParams). */
export interface SglangSamplingParams {
  /** Always sent; `null` = no limit (absent would mean 128). */
  max_new_tokens: number | null;
  min_new_tokens: number;
  temperature: number;
  top_p: number;
  top_k: number;
  min_p: number;
  presence_penalty: number;
  frequency_penalty: number;
  repetition_penalty: number;
  stop: string[];
  n: number;
  ignore_eos: boolean;
  no_stop_trim: boolean;
  skip_special_tokens: boolean;
  spaces_between_special_tokens: boolean;
  stop_token_ids?: number[];
  stop_regex?: string | string[];
  json_schema?: string;
  regex?: string;
  ebnf?: string;
  structural_tag?: string;
  logit_bias?: Record<string, number>;
  sampling_seed?: number;
  /** Output tokens per stream frame; absent: the worker's `--stream-interval`. Streamed requests only. */
  stream_interval?: number;
}

/** The body POSTed to a worker's `/generate` (single request; never a batch). */
export interface GenerateRequestBody {
  text: string;
  sampling_params: SglangSamplingParams;
  stream: boolean;
  rid?: string;
  image_data?: string[];
  video_data?: string[];
  mm_hashes?: string[];
  /** Logprobs of the output tokens (serving_chat.py sets these four together for `logprobs`). */
  return_logprob?: boolean;
  top_logprobs_num?: number;
  logprob_start_len?: number;
  return_text_in_logprobs?: boolean;
  /** The scheduler counts reasoning tokens (meta_info.reasoning_tokens) for a thinking output. */
  require_reasoning?: boolean;
  /** GenerateReqInput.cache_salt: the request's KV-cache namespace (src/edge/cache-salt.ts). */
  cache_salt?: string;
  /** GenerateReqInput.extra_key: set to the same salt, so SGLang versions without cache_salt still namespace the tree. */
  extra_key?: string;
  /** GenerateReqInput.lora_path: the LoRA adapter (a name from the worker's --lora-paths). */
  lora_path?: string;
}

const count = z.number().int().nonnegative();

export const FinishReasonSchema = z.looseObject({
  type: z.string(),
  matched: z.union([z.number(), z.string()]).nullish(),
  message: z.string().nullish(),
  status_code: z.number().int().nullish(),
});
export type SglangFinishReason = z.output<typeof FinishReasonSchema>;

export const MetaInfoSchema = z.looseObject({
  id: z.string().optional(),
  finish_reason: FinishReasonSchema.nullish(),
  prompt_tokens: count.default(0),
  completion_tokens: count.default(0),
  cached_tokens: count.default(0),
  reasoning_tokens: count.default(0),
  image_tokens: count.optional(),
  video_tokens: count.optional(),
  audio_tokens: count.optional(),
  weight_version: z.string().optional(),
});
export type SglangMetaInfo = z.output<typeof MetaInfoSchema>;

/** One non-stream result, or one streamed frame (`index` only when n > 1). */
export const GenerateResultSchema = z.looseObject({
  text: z.string().default(""),
  meta_info: MetaInfoSchema,
  index: count.optional(),
});
export type SglangGenerateResult = z.output<typeof GenerateResultSchema>;

/** The non-stream body: one object, or an array of n when n > 1. */
export const GenerateResponseSchema = z.union([GenerateResultSchema, z.array(GenerateResultSchema).min(1)]);


/**
 * Reading a worker's answer without zod's interpreter on the common path. workerd forbids eval, so
 * zod parses uncompiled; a streamed answer parses one frame per token (warm 1k-token streamed
 * request, perf: safeParse ~0.14 ms of edge CPU for 17 frames). Each reader below accepts only
 * values its zod schema accepts and returns exactly the schema's output (shape keys in the shape's
 * order with defaults filled, then the input's other keys in its order, as zod's looseObject
 * builds it); anything else goes to the schema itself, so errors (and their messages) are zod's.
 * The schemas stay the definition: test/unit/proxy/sglang-wire-read.test.ts checks the readers
 * against them.
 */
const INVALID: unique symbol = Symbol("invalid");
type Accept = (value: unknown) => unknown;
/** A field's output when undefined: required (invalid), left out, or a default. */
type Absent = "required" | "omit" | { value: unknown };
interface LooseShape {
  keys: readonly string[];
  keySet: ReadonlySet<string>;
  fields: Readonly<Record<string, { accept: Accept; absent: Absent }>>;
}

function looseShape(fields: Record<string, { accept: Accept; absent: Absent }>): LooseShape {
  const keys = Object.keys(fields);
  return { keys, keySet: new Set(keys), fields };
}

function readLoose(shape: LooseShape, input: unknown): Record<string, unknown> | typeof INVALID {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return INVALID;
  const from = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const key of shape.keys) {
    const field = shape.fields[key]!;
    const value = from[key];
    if (value === undefined) {
      if (field.absent === "required") return INVALID;
      if (field.absent !== "omit") out[key] = field.absent.value;
      else if (key in from) out[key] = undefined;
      continue;
    }
    const accepted = field.accept(value);
    if (accepted === INVALID) return INVALID;
    out[key] = accepted;
  }
  for (const key in from) {
    if (shape.keySet.has(key)) continue;
    if (key === "__proto__") return INVALID;
    out[key] = from[key];
  }
  return out;
}

const acceptString: Accept = (v) => (typeof v === "string" ? v : INVALID);
const acceptCount: Accept = (v) => (Number.isSafeInteger(v) && (v as number) >= 0 ? v : INVALID);
const acceptInt: Accept = (v) => (Number.isSafeInteger(v) ? v : INVALID);
const acceptNumberOrString: Accept = (v) => ((typeof v === "number" && Number.isFinite(v)) || typeof v === "string" ? v : INVALID);
const nullable = (accept: Accept): Accept => (v) => (v === null ? null : accept(v));

const FINISH_REASON_SHAPE = looseShape({
  type: { accept: acceptString, absent: "required" },
  matched: { accept: nullable(acceptNumberOrString), absent: "omit" },
  message: { accept: nullable(acceptString), absent: "omit" },
  status_code: { accept: nullable(acceptInt), absent: "omit" },
});
const zeroCount = { accept: acceptCount, absent: { value: 0 } } as const;
const optionalCount = { accept: acceptCount, absent: "omit" } as const;
const META_INFO_SHAPE = looseShape({
  id: { accept: acceptString, absent: "omit" },
  finish_reason: { accept: nullable((v) => readLoose(FINISH_REASON_SHAPE, v)), absent: "omit" },
  prompt_tokens: zeroCount,
  completion_tokens: zeroCount,
  cached_tokens: zeroCount,
  reasoning_tokens: zeroCount,
  image_tokens: optionalCount,
  video_tokens: optionalCount,
  audio_tokens: optionalCount,
  weight_version: { accept: acceptString, absent: "omit" },
});
const GENERATE_RESULT_SHAPE = looseShape({
  text: { accept: acceptString, absent: { value: "" } },
  meta_info: { accept: (v) => readLoose(META_INFO_SHAPE, v), absent: "required" },
  index: optionalCount,
});

/** `GenerateResultSchema.safeParse(raw)`. */
export function parseGenerateResult(raw: unknown): z.ZodSafeParseResult<SglangGenerateResult> {
  const read = readLoose(GENERATE_RESULT_SHAPE, raw);
  return read === INVALID ? GenerateResultSchema.safeParse(raw) : { success: true, data: read as SglangGenerateResult };
}

/** `GenerateResponseSchema.safeParse(raw)`. */
export function parseGenerateResponse(raw: unknown): z.ZodSafeParseResult<z.output<typeof GenerateResponseSchema>> {
  if (!Array.isArray(raw)) {
    const read = readLoose(GENERATE_RESULT_SHAPE, raw);
    return read === INVALID ? GenerateResponseSchema.safeParse(raw) : { success: true, data: read as SglangGenerateResult };
  }
  const results: SglangGenerateResult[] = [];
  for (const item of raw) {
    const read = readLoose(GENERATE_RESULT_SHAPE, item);
    if (read === INVALID) return GenerateResponseSchema.safeParse(raw);
    results.push(read as SglangGenerateResult);
  }
  return results.length > 0 ? { success: true, data: results } : GenerateResponseSchema.safeParse(raw);
}
