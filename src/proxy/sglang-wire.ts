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
