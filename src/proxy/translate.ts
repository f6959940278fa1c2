/**
 * SGLang `/generate` answers → OpenAI `chat.completion`, built as SGLang's own
 * `/v1/chat/completions` builds it (sgl-project/sglang python/sglang/srt/entrypoints/openai/
 * serving_chat.py @9d147fd L1306-1450). Streaming lives in
 * chat-stream.ts; both share the finish-reason and usage rules here and in usage.ts.
 */
import { parseGenerateResponse } from "./sglang-wire-read.ts";
import type { SglangFinishReason, SglangGenerateResult } from "./sglang-wire.ts";
import { abortErrorOf, malformedUpstream, upstreamHttpError } from "./upstream-error.ts";
import { finishChoiceText, PLAIN_OUTPUT, type ChatOutputPlan, type OpenAIToolCall } from "./chat-output.ts";
import { LogprobMetaSchema, toChoiceLogprobs, type ChoiceLogprobs } from "./logprobs.ts";
import { summarizeUsage, toOpenAIUsage } from "./usage.ts";
import type { OpenAIUsage, UsageSummary } from "./usage.ts";

export { createChatStreamTranslator } from "./chat-stream.ts";

export type FinishReason = "stop" | "length" | "abort" | "tool_calls" | (string & {});

export interface ChatCompletionChoice {
  index: number;
  message: { role: "assistant"; content: string | null; reasoning_content: string | null; tool_calls: OpenAIToolCall[] | null };
  logprobs: ChoiceLogprobs | null;
  finish_reason: FinishReason | null;
  matched_stop: number | string | null;
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: ChatCompletionChoice[];
  usage: OpenAIUsage;
  metadata?: { weight_version: string };
}

export interface TranslateContext {
  /** The completion id shown to the client (the edge's request id). */
  id: string;
  /** The request's `model`, echoed back. */
  model: string;
  /** The request's `n`: the number of results expected. */
  n: number;
  /** Unix seconds; defaults to now. */
  created?: number;
  /** Reasoning / tool-call / logprob handling (chat-output.ts); plain text when absent. */
  plan?: ChatOutputPlan;
}

/** The logprobs of one result, or a malformed-upstream error when the worker sent none. */
export function resultLogprobs(meta: unknown): ChoiceLogprobs {
  const lp = LogprobMetaSchema.safeParse(meta);
  if (!lp.success || lp.data.output_token_logprobs === undefined) throw malformedUpstream("logprobs were asked for but not returned");
  return toChoiceLogprobs(lp.data);
}

/** SGLang finish object → OpenAI finish_reason (graceful abort stays the non-standard "abort"). */
export function finishReasonOf(fr: SglangFinishReason | null | undefined): FinishReason | null {
  if (fr === null || fr === undefined) return null;
  return fr.type;
}

export function matchedStopOf(fr: SglangFinishReason | null | undefined): number | string | null {
  return fr?.matched ?? null;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/**
 * Translates a parsed 2xx `/generate` body. Throws an UpstreamError (malformed body or wrong
 * result count) or the error an abort-with-status carries.
 */
export function translateGenerateResponse(
  body: unknown,
  ctx: TranslateContext,
): { completion: ChatCompletion; usage: UsageSummary } {
  const parsed = parseGenerateResponse(body);
  if (!parsed.success) throw malformedUpstream(`generate response: ${parsed.error.issues[0]?.message ?? "invalid"}`);
  const results: SglangGenerateResult[] = Array.isArray(parsed.data) ? parsed.data : [parsed.data];
  if (results.length !== ctx.n) throw malformedUpstream(`expected ${ctx.n} results, got ${results.length}`);
  const choices = results.map((r, index): ChatCompletionChoice => {
    const fr = r.meta_info.finish_reason;
    const err = abortErrorOf(fr);
    if (err !== null) throw err;
    const plan = ctx.plan ?? PLAIN_OUTPUT;
    const parts = finishChoiceText(plan, r.text, finishReasonOf(fr), matchedStopOf(fr));
    return {
      index,
      message: { role: "assistant", content: parts.content, reasoning_content: parts.reasoning_content, tool_calls: parts.tool_calls },
      logprobs: plan.logprobs ? resultLogprobs(r.meta_info) : null,
      finish_reason: parts.finishType,
      matched_stop: parts.matched,
    };
  });
  const usage = summarizeUsage(results.map((r) => r.meta_info));
  const completion: ChatCompletion = {
    id: ctx.id,
    object: "chat.completion",
    created: ctx.created ?? nowSeconds(),
    model: ctx.model,
    choices,
    usage: toOpenAIUsage(usage),
  };
  const wv = results[0]?.meta_info.weight_version;
  if (wv !== undefined) completion.metadata = { weight_version: wv };
  return { completion, usage };
}

/**
 * Translates a complete non-stream upstream answer given its status and body text: non-2xx →
 * the mapped KvedgeError (thrown); unparsable 2xx → UpstreamError (thrown).
 */
export function translateGenerateHttp(
  status: number,
  bodyText: string,
  ctx: TranslateContext,
): { completion: ChatCompletion; usage: UsageSummary } {
  if (status < 200 || status > 299) throw upstreamHttpError(status, bodyText);
  let body: unknown;
  try {
    body = JSON.parse(bodyText);
  } catch {
    throw malformedUpstream("generate response is not JSON");
  }
  return translateGenerateResponse(body, ctx);
}

