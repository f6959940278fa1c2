/**
 * The completions endpoint's answer: `/generate` output as an OpenAI `text_completion` or its SSE
 * chunks. The worker's output is read by the chat path's translators with the plain-text plan (no
 * tool or reasoning parsing: stream framing, cumulative or incremental frames, errors, usage and
 * logprobs are theirs), then reshaped: `message.content` / `delta.content` become `text`, token
 * logprobs become `{tokens, token_logprobs, top_logprobs, text_offset}`, and `echo` puts the prompt
 * in front of each choice's text.
 */
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import { PLAIN_OUTPUT } from "../../proxy/chat-output.ts";
import type { ChoiceLogprobs } from "../../proxy/logprobs.ts";
import { createSseParser, sseFrame, SSE_DONE } from "../../proxy/sse.ts";
import { createChatStreamTranslator, translateGenerateHttp, type ChatCompletion } from "../../proxy/translate.ts";
import type { OpenAIUsage } from "../../proxy/usage.ts";
import type { AnswerFormat } from "../chat/proxy.ts";

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export interface CompletionChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  finish_reason: string | null;
}

export interface TextCompletion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: CompletionChoice[];
  usage: OpenAIUsage;
}

/** Chat token logprobs → completions logprobs; offsets count UTF-16 units from `offset`. */
export function completionLogprobs(lp: ChoiceLogprobs | null, offset: number): CompletionLogprobs | null {
  if (!lp) return null;
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (const t of lp.content) {
    out.tokens.push(t.token);
    out.token_logprobs.push(t.logprob);
    out.top_logprobs.push(Object.fromEntries(t.top_logprobs.map((a) => [a.token, a.logprob])));
    out.text_offset.push(at);
    at += t.token.length;
  }
  return out;
}

export interface CompletionAnswerInput {
  /** The sampling request (completions-schema.ts samplingRequestOf). */
  sampling: ChatCompletionRequest;
  id: string;
  /** Echoed in front of each choice's text (the prompt's text), or null. */
  echo: string | null;
  /** This prompt's first choice index (a batch numbers prompt × n). */
  firstIndex: number;
}

export function completionAnswer(input: CompletionAnswerInput): AnswerFormat {
  const { sampling, id, echo, firstIndex } = input;
  const plan = { ...PLAIN_OUTPUT, logprobs: sampling.logprobs };
  const prefix = echo ?? "";
  return {
    stream: sampling.stream,
    complete(status, text) {
      const { completion, usage } = translateGenerateHttp(status, text, { id, model: sampling.model, n: sampling.n, plan });
      return { body: textCompletion(completion as ChatCompletion, prefix, firstIndex), usage };
    },
    streamAnswer(opts) {
      const chat = createChatStreamTranslator(opts.source, {
        id,
        model: sampling.model,
        n: sampling.n,
        incremental: opts.incremental,
        includeUsage: sampling.stream_options?.include_usage === true,
        plan,
        holdEndUntilFinished: opts.holdEndUntilFinished,
        onFinish: opts.onFinish,
      });
      return { ready: chat.ready, readable: chat.readable.pipeThrough(chatChunksToCompletion(prefix, sampling.n)) };
    },
  };
}

function textCompletion(c: ChatCompletion, prefix: string, firstIndex: number): TextCompletion {
  return {
    id: c.id,
    object: "text_completion",
    created: c.created,
    model: c.model,
    choices: c.choices.map((ch) => ({
      index: firstIndex + ch.index,
      text: prefix + (ch.message.content ?? ""),
      logprobs: completionLogprobs(ch.logprobs, prefix.length),
      finish_reason: ch.finish_reason,
    })),
    usage: c.usage,
  };
}

interface ChatChunk {
  id: string;
  created: number;
  model: string;
  choices?: { index: number; delta?: { content?: string | null }; logprobs?: ChoiceLogprobs | null; finish_reason?: string | null }[];
  usage?: OpenAIUsage | null;
}

/** Chat chunk frames → completion chunk frames; error frames and `[DONE]` pass as they are. */
function chatChunksToCompletion(echo: string, n: number): TransformStream<Uint8Array, Uint8Array> {
  const parser = createSseParser();
  const encoder = new TextEncoder();
  const offsets = new Map<number, number>();
  let echoed = echo === "";
  const frame = (ctl: TransformStreamDefaultController<Uint8Array>, data: string) => {
    if (data === "[DONE]") return ctl.enqueue(encoder.encode(SSE_DONE));
    const chunk = JSON.parse(data) as ChatChunk & { error?: unknown };
    if (chunk.error !== undefined) return ctl.enqueue(encoder.encode(sseFrame(data)));
    const head = { id: chunk.id, object: "text_completion", created: chunk.created, model: chunk.model };
    if (!echoed) {
      echoed = true;
      // SGLang sends the echoed prompt as each choice's first text.
      const choices = Array.from({ length: n }, (_, index) => ({ index, text: echo, logprobs: null, finish_reason: null }));
      for (let i = 0; i < n; i++) offsets.set(i, echo.length);
      ctl.enqueue(encoder.encode(sseFrame(JSON.stringify({ ...head, choices }))));
    }
    const choices = (chunk.choices ?? [])
      .filter((c) => (c.delta?.content ?? "") !== "" || c.finish_reason || c.logprobs)
      .map((c) => {
        const text = c.delta?.content ?? "";
        const at = offsets.get(c.index) ?? 0;
        offsets.set(c.index, at + text.length);
        return { index: c.index, text, logprobs: completionLogprobs(c.logprobs ?? null, at), finish_reason: c.finish_reason ?? null };
      });
    if (choices.length === 0 && !chunk.usage) return;
    ctl.enqueue(encoder.encode(sseFrame(JSON.stringify({ ...head, choices, ...(chunk.usage ? { usage: chunk.usage } : {}) }))));
  };
  return new TransformStream({
    transform(bytes, ctl) {
      for (const e of parser.push(bytes)) frame(ctl, e.data);
    },
    flush(ctl) {
      for (const e of parser.end()) frame(ctl, e.data);
    },
  });
}
