/**
 * The chat endpoint's answer: `/generate` output as an OpenAI chat completion or its SSE chunks
 * (tools, reasoning and logprobs per the output plan), and the one stream shape too costly to proxy.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import type { ChatOutputPlan } from "../../proxy/chat-output.ts";
import { cumulativeLogprobBytes, MAX_CUMULATIVE_LOGPROB_BYTES, maxCumulativeLogprobTokens } from "../../proxy/stream-cost.ts";
import { createChatStreamTranslator, translateGenerateHttp } from "../../proxy/translate.ts";
import type { AnswerFormat } from "./proxy.ts";

export function chatAnswer(req: ChatCompletionRequest, output: ChatOutputPlan, requestId: string): AnswerFormat {
  const ctx = { id: `chatcmpl-${requestId}`, model: req.model, n: req.n, plan: output };
  return {
    stream: Boolean(req.stream),
    complete(status, text) {
      const { completion, usage } = translateGenerateHttp(status, text, ctx);
      return { body: completion, usage };
    },
    streamAnswer: (opts) =>
      createChatStreamTranslator(opts.source, {
        id: ctx.id,
        model: req.model,
        n: req.n,
        incremental: opts.incremental,
        includeUsage: req.stream_options?.include_usage === true,
        plan: output,
        holdEndUntilFinished: opts.holdEndUntilFinished,
        onFinish: opts.onFinish,
      }),
  };
}

/**
 * A stream with logprobs whose cumulative frames would make the edge receive more than
 * MAX_CUMULATIVE_LOGPROB_BYTES (src/proxy/stream-cost.ts): it goes only to workers that stream
 * increments, and this is the client's 400 when the pool has none. Null when any worker will do.
 */
export function costlyLogprobStream(req: ChatCompletionRequest, output: ChatOutputPlan, maxNewTokens: number): InvalidRequestError | null {
  const top = req.top_logprobs ?? 0;
  if (!req.stream || !output.logprobs || cumulativeLogprobBytes(maxNewTokens, top, req.n) <= MAX_CUMULATIVE_LOGPROB_BYTES) return null;
  const field = req.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens";
  return new InvalidRequestError(
    `Streaming logprobs for up to ${maxNewTokens} tokens is refused here: this pool's workers resend every earlier position in each stream frame, which would cost the edge quadratic work. Set ${field} to at most ${maxCumulativeLogprobTokens(top, req.n)}${top > 0 ? ", lower top_logprobs" : ""}, or use stream: false (operators: run workers with --incremental-streaming-output).`,
    field,
    "logprobs_stream_too_costly",
  );
}
