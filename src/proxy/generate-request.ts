/**
 * Builds the SGLang `/generate` body from a validated chat request and its rendered prompt,
 * mapping fields exactly as SGLang's own `/v1/chat/completions` does (`to_sampling_params`,
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_chat.py @9d147fd L535-638). Traps handled here: `max_new_tokens` is always sent
 * (absent would mean 128), generation_config defaults are applied by us (`/generate` ignores
 * them), `seed` becomes `sampling_seed`, and no key outside SamplingParams is ever sent.
 */
import { z } from "zod";
import { InternalError } from "../api/errors.ts";
import type { ChatCompletionRequest } from "../api/openai-schema.ts";
import { bytesToHex } from "../util/hex.ts";
import type { GenerateRequestBody, SglangSamplingParams } from "./sglang-wire.ts";
import { forcedToolCallSchema, qwenStructuralTag } from "./tool-calls/constraint.ts";
import { pyJsonDumps } from "./tool-calls/json.ts";

/** Sampling defaults from the served model's `generation_config.json` (SGLang `--sampling-defaults model`). */
export const ModelSamplingDefaultsSchema = z.object({
  temperature: z.number().min(0).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.number().int().optional(),
  min_p: z.number().min(0).max(1).optional(),
  repetition_penalty: z.number().gt(0).optional(),
});
export type ModelSamplingDefaults = z.output<typeof ModelSamplingDefaultsSchema>;

/** SGLang's fallbacks when neither the request nor generation_config sets a value. */
export const OPENAI_SAMPLING_FALLBACKS = {
  temperature: 1.0,
  top_p: 1.0,
  top_k: -1,
  min_p: 0.0,
  repetition_penalty: 1.0,
} as const;

export interface GenerateMedia {
  /** One entry per image, prompt order: a data: URL or a signed media-store URL of exactly the bytes the hashes were computed over (src/edge/media.ts); never a client URL. */
  imageData?: string[];
  /** One entry per video, prompt order. */
  videoData?: string[];
  /** One 16-hex hash per item, images first then videos; forwarded only when mmHashesAllowed(). */
  mmHashes?: string[];
}

export interface BuildGenerateOptions {
  /** The rendered prompt (chat template applied, generation prompt added). */
  text: string;
  /** Upstream request id; unique among in-flight requests (SGLang answers 400 on duplicates). */
  rid?: string;
  media?: GenerateMedia;
  modelDefaults?: ModelSamplingDefaults;
  /** The output is a thinking output (chat-output.ts plan): ask the worker to count reasoning tokens. */
  requireReasoning?: boolean;
  /** The model's tool-call parser: with one, strict tools under tool_choice "auto" get a structural tag. */
  toolCallParser?: "qwen25" | null;
  /** `max_new_tokens` when the request names no maximum (outputCap); null: none (up to the context). */
  defaultMaxNewTokens?: number | null;
  /** Output tokens per stream frame (routing.streamInterval); null: not sent, the worker's own setting. */
  streamInterval?: number | null;
}

/**
 * The output cap for a request that names no `max_tokens`: SGLang then generates up to the end of
 * the context, so the operator's `maxMaxTokens` must bound it too, where it is the tighter bound.
 * Only with an exact prompt count: with a lower bound (an inexact media layout) the worker could
 * refuse prompt + cap as too long, so nothing is sent (as without the cap); nor when the workers
 * clamp by themselves (--allow-auto-truncate).
 */
export function outputCap(cap: number, prompt: { tokens: number; exact: boolean }, contextTokens: number, autoTruncate: boolean): number | null {
  if (!prompt.exact || autoTruncate) return null;
  return prompt.tokens + cap < contextTokens ? cap : null;
}

/**
 * SGLang drops caller `mm_hashes` when it splits a request into n copies (`GenerateReqInput.__getitem__`,
 * sgl-project/sglang python/sglang/srt/managers/io_struct.py @9d147fd L703-786), so they are
 * honoured for n = 1 only; layout should fall back to text-prefix routing otherwise.
 */
export function mmHashesAllowed(req: Pick<ChatCompletionRequest, "n">): boolean {
  return req.n === 1;
}

/** A fresh 32-hex request id (SGLang's own rid format), from the platform CSPRNG. */
export function newRequestId(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return bytesToHex(bytes);
}

type Constraint = Pick<SglangSamplingParams, "json_schema" | "structural_tag">;

/**
 * response_format → grammar, then a forced tool call's schema unless a constraint is already set
 * (serving_chat.py `_build_sampling_params`: "Constrained decoding is not compatible with tool
 * calls" is only logged). Schemas are sent as Python's json.dumps text, as SGLang sends them.
 */
function constraintOf(req: ChatCompletionRequest, toolCallParser: "qwen25" | null): Constraint {
  const rf = req.response_format;
  let out: Constraint = {};
  if (rf?.type === "json_object") out = { json_schema: '{"type": "object"}' };
  else if (rf?.type === "json_schema") {
    const schema = rf.json_schema?.schema ?? rf.schema;
    // validate.ts guarantees a schema; a missing one here is a bug, not a client error.
    if (schema === undefined) throw new InternalError("response_format json_schema without schema");
    out = { json_schema: pyJsonDumps(schema) };
  } else if (rf?.type === "structural_tag") out = { structural_tag: pyJsonDumps(rf) };
  const hasOther = out.json_schema !== undefined || out.structural_tag !== undefined || req.regex !== undefined || req.ebnf !== undefined;
  if (!hasOther && req.tools !== undefined && req.tools.length > 0) {
    // With the qwen25 parser a forced call is written in its own <tool_call> format (constraint.ts).
    if (toolCallParser === "qwen25") {
      const tag = qwenStructuralTag(req.tools, req.tool_choice);
      if (tag !== null) out = { structural_tag: pyJsonDumps(tag) };
    } else {
      const forced = forcedToolCallSchema(req.tools, req.tool_choice, req.parallel_tool_calls);
      if (forced !== null) out = { json_schema: pyJsonDumps(forced) };
    }
  }
  return out;
}

/** `sampling_params` as SGLang's `ChatCompletionRequest.to_sampling_params` builds them. */
export function buildSamplingParams(
  req: ChatCompletionRequest,
  modelDefaults: ModelSamplingDefaults = {},
  toolCallParser: "qwen25" | null = null,
  defaultMaxNewTokens: number | null = null,
): SglangSamplingParams {
  const pick = <K extends keyof typeof OPENAI_SAMPLING_FALLBACKS>(k: K): number =>
    req[k] ?? modelDefaults[k] ?? OPENAI_SAMPLING_FALLBACKS[k];
  const usesTools = req.tools !== undefined && req.tools.length > 0 && req.tool_choice !== "none";
  const spaces = req.chat_template_kwargs?.["spaces_between_special_tokens"];
  const params: SglangSamplingParams = {
    // SGLang: `max_completion_tokens or max_tokens`; validation forbids 0, so `??` is the same.
    max_new_tokens: req.max_completion_tokens ?? req.max_tokens ?? defaultMaxNewTokens,
    min_new_tokens: req.min_tokens,
    temperature: pick("temperature"),
    top_p: pick("top_p"),
    top_k: pick("top_k"),
    min_p: pick("min_p"),
    presence_penalty: req.presence_penalty,
    frequency_penalty: req.frequency_penalty,
    repetition_penalty: pick("repetition_penalty"),
    stop: req.stop ?? [],
    n: req.n,
    ignore_eos: req.ignore_eos,
    no_stop_trim: req.no_stop_trim,
    // SGLang keeps special tokens when tools are in play, so tool-call markers survive.
    skip_special_tokens: usesTools ? false : req.skip_special_tokens,
    spaces_between_special_tokens: typeof spaces === "boolean" ? spaces : true,
    ...constraintOf(req, toolCallParser),
  };
  if (req.stop_token_ids !== undefined) params.stop_token_ids = req.stop_token_ids;
  if (req.stop_regex !== undefined) params.stop_regex = req.stop_regex;
  if (req.regex !== undefined) params.regex = req.regex;
  if (req.ebnf !== undefined) params.ebnf = req.ebnf;
  if (req.logit_bias !== undefined) params.logit_bias = req.logit_bias;
  if (req.seed !== undefined) params.sampling_seed = req.seed;
  return params;
}

/** The complete `/generate` body for one chat request. */
export function buildGenerateBody(req: ChatCompletionRequest, opts: BuildGenerateOptions): GenerateRequestBody {
  const body: GenerateRequestBody = {
    text: opts.text,
    sampling_params: buildSamplingParams(req, opts.modelDefaults, opts.toolCallParser ?? null, opts.defaultMaxNewTokens ?? null),
    stream: req.stream,
  };
  if (opts.rid !== undefined) body.rid = opts.rid;
  // The scheduler reads it only for streamed requests (`req.sampling_params.stream_interval or
  // self.stream_interval`, sgl-project/sglang @5294b03 python/sglang/srt/managers/
  // scheduler_output_processor_mixin.py `stream_output_generation`): frames at output lengths 1,
  // k + 1, 2k + 1, … and the finishing one. Never sent unless configured: an SGLang without the key
  // refuses the whole request.
  if (req.stream && opts.streamInterval != null) body.sampling_params.stream_interval = opts.streamInterval;
  if (req.logprobs) {
    // serving_chat.py `_convert_to_internal_request`: output tokens only, with their text.
    body.return_logprob = true;
    body.top_logprobs_num = req.top_logprobs ?? 0;
    body.logprob_start_len = -1;
    body.return_text_in_logprobs = true;
  }
  if (opts.requireReasoning) body.require_reasoning = true;
  const media = opts.media ?? {};
  const images = media.imageData ?? [];
  const videos = media.videoData ?? [];
  if (images.length > 0) body.image_data = [...images];
  if (videos.length > 0) body.video_data = [...videos];
  if (media.mmHashes !== undefined && media.mmHashes.length > 0 && mmHashesAllowed(req)) {
    // SGLang silently ignores a list of the wrong length; sending one would be our bug.
    if (media.mmHashes.length !== images.length + videos.length) {
      throw new InternalError("mm_hashes count does not match the media items");
    }
    body.mm_hashes = [...media.mmHashes];
  }
  return body;
}
