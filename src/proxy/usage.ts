/**
 * OpenAI `usage` from SGLang `meta_info` counts, aggregated as SGLang's UsageProcessor does:
 * prompt-side counts (prompt, cached, media tokens) from the first choice of the prompt,
 * completion and reasoning tokens summed over all choices. Unlike SGLang without
 * `--enable-cache-report`, `prompt_tokens_details.cached_tokens` is always reported: it is the
 * number the router's prediction is judged by.
 */
import type { SglangMetaInfo } from "./sglang-wire.ts";

/** What the edge needs to settle a routing receipt and to bill. */
export interface UsageSummary {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cached_tokens: number;
  reasoning_tokens: number;
  image_tokens: number;
  video_tokens: number;
  audio_tokens: number;
}

/** The OpenAI `usage` object (field order as SGLang serialises it). */
export interface OpenAIUsage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: {
    cached_tokens: number;
    image_tokens?: number;
    audio_tokens?: number;
    video_tokens?: number;
  };
  reasoning_tokens: number;
  /** OpenAI's place for reasoning tokens (SGLang reports the top-level field); only when non-zero. */
  completion_tokens_details?: { reasoning_tokens: number };
}

export type MetaCounts = Pick<
  SglangMetaInfo,
  "prompt_tokens" | "completion_tokens" | "cached_tokens" | "reasoning_tokens" | "image_tokens" | "video_tokens" | "audio_tokens"
>;

/** `perChoice[i]` = the latest meta_info of choice i (missing entries count as nothing). */
export function summarizeUsage(perChoice: ReadonlyArray<MetaCounts | undefined>): UsageSummary {
  const first = perChoice[0];
  let completion = 0;
  let reasoning = 0;
  for (const m of perChoice) {
    completion += m?.completion_tokens ?? 0;
    reasoning += m?.reasoning_tokens ?? 0;
  }
  const prompt = first?.prompt_tokens ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    cached_tokens: first?.cached_tokens ?? 0,
    reasoning_tokens: reasoning,
    image_tokens: first?.image_tokens ?? 0,
    video_tokens: first?.video_tokens ?? 0,
    audio_tokens: first?.audio_tokens ?? 0,
  };
}

export function toOpenAIUsage(u: UsageSummary): OpenAIUsage {
  const details: OpenAIUsage["prompt_tokens_details"] = { cached_tokens: u.cached_tokens };
  if (u.image_tokens > 0) details.image_tokens = u.image_tokens;
  if (u.audio_tokens > 0) details.audio_tokens = u.audio_tokens;
  if (u.video_tokens > 0) details.video_tokens = u.video_tokens;
  const usage: OpenAIUsage = {
    prompt_tokens: u.prompt_tokens,
    total_tokens: u.total_tokens,
    completion_tokens: u.completion_tokens,
    prompt_tokens_details: details,
    reasoning_tokens: u.reasoning_tokens,
  };
  if (u.reasoning_tokens > 0) usage.completion_tokens_details = { reasoning_tokens: u.reasoning_tokens };
  return usage;
}
