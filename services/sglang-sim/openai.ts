/**
 * SGLang's own OpenAI endpoint `POST /v1/chat/completions` (serving_chat.py): the chat template is
 * rendered with the project's renderer (the same one the router uses, so prompts and cache keys
 * agree), sampling fields are mapped as SGLang maps them, and responses/chunks follow
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_chat.py @9d147fd L535-1450 (bare-uuid ids, role chunk, content deltas, a separate
 * finish chunk, optional usage chunk, [DONE]).
 */
import type { ServerResponse } from "node:http";
import { z } from "zod";
import { preparePrompt, renderChatPrompt } from "../../src/prompt/index.ts";
import type { RequestSnapshot } from "./engine.ts";
import { prepareGenerate, type GenerateContext, type PreparedPrompt, type PreparedRequest } from "./generate.ts";
import type { ModelFamily, TemplateId } from "./options.ts";
import { SamplingTypeError } from "./sampling-params.ts";
import {
  openAIErrorBody,
  SglangInternalError,
  SglangOpenAIError,
  SglangValidationError,
  SglangValueError,
  validationErrorBody,
} from "./sglang-errors.ts";

export type ChatRenderer = (
  family: ModelFamily,
  templateId: TemplateId,
  request: { messages: unknown[]; tools?: unknown[]; chat_template_kwargs?: Record<string, unknown> },
) => string;

/** The project's renderer: the same prompt string the router computes, so cache keys agree. */
export const defaultChatRenderer: ChatRenderer = renderChatPrompt;

const num = z.number().nullish();
const int = z.number().int().nullish();

export const ChatRequestSchema = z.looseObject({
  model: z.string().default("default"),
  messages: z.array(z.looseObject({ role: z.string() })).min(1),
  max_tokens: int,
  max_completion_tokens: int,
  temperature: num,
  top_p: num,
  top_k: int,
  min_p: num,
  presence_penalty: num,
  frequency_penalty: num,
  repetition_penalty: num,
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  stop_token_ids: z.array(z.number().int()).nullish(),
  ignore_eos: z.boolean().nullish(),
  no_stop_trim: z.boolean().nullish(),
  skip_special_tokens: z.boolean().nullish(),
  min_tokens: int,
  n: int,
  seed: int,
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  tools: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  logprobs: z.boolean().nullish(),
  rid: z.string().nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

export interface OpenAIContext extends GenerateContext {
  family: ModelFamily;
  template: TemplateId;
  renderer: ChatRenderer;
  enableCacheReport: boolean;
}

const MEDIA_PART_TYPES = new Set(["image_url", "input_image", "video_url", "audio_url", "input_audio", "image", "video"]);

function hasMediaParts(messages: readonly Record<string, unknown>[]): boolean {
  return messages.some(
    (m) =>
      Array.isArray(m.content) &&
      m.content.some((p) => typeof p === "object" && p !== null && MEDIA_PART_TYPES.has(String((p as { type?: unknown }).type))),
  );
}

/** OpenAI fields → SGLang sampling_params (serving_chat.py _build_sampling_params). */
function samplingFromChat(r: ChatRequest): Record<string, unknown> {
  const sp: Record<string, unknown> = {
    // Python `max_completion_tokens or max_tokens`: 0 falls through; None means no limit.
    max_new_tokens: r.max_completion_tokens || r.max_tokens || null,
  };
  const copy = (from: keyof ChatRequest, to: string): void => {
    const v = r[from];
    if (v !== null && v !== undefined) sp[to] = v;
  };
  copy("temperature", "temperature");
  copy("top_p", "top_p");
  copy("top_k", "top_k");
  copy("min_p", "min_p");
  copy("presence_penalty", "presence_penalty");
  copy("frequency_penalty", "frequency_penalty");
  copy("repetition_penalty", "repetition_penalty");
  copy("stop", "stop");
  copy("stop_token_ids", "stop_token_ids");
  copy("ignore_eos", "ignore_eos");
  copy("no_stop_trim", "no_stop_trim");
  copy("skip_special_tokens", "skip_special_tokens");
  copy("min_tokens", "min_new_tokens");
  copy("n", "n");
  copy("seed", "sampling_seed");
  if (r.tools && r.tools.length > 0 && r.tool_choice !== "none") sp.skip_special_tokens = false;
  return sp;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

function sendError(res: ServerResponse, err: unknown): void {
  if (err instanceof SglangOpenAIError) return sendJson(res, err.status, openAIErrorBody(err.message, err.errType, err.status));
  if (err instanceof SglangValidationError) return sendJson(res, 400, validationErrorBody(err.message));
  if (err instanceof SglangValueError || err instanceof SglangInternalError || err instanceof SamplingTypeError) {
    return sendJson(res, 400, openAIErrorBody(err.message, "BadRequest", 400));
  }
  throw err;
}

async function prepareChat(raw: unknown, ctx: OpenAIContext): Promise<{ chat: ChatRequest; prepared: PreparedRequest }> {
  const parsed = ChatRequestSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SglangValidationError(`${issue?.path.join(".") || "body"}: ${issue?.message ?? "invalid request"}`);
  }
  const chat = parsed.data;
  if (chat.logprobs) throw new SglangOpenAIError("logprobs are not supported by the simulator.");
  if ((chat.n ?? 1) > 1) throw new SglangOpenAIError("n > 1 is not supported by the simulator's /v1 endpoint.");
  let text: string;
  const media: Record<"image_data" | "video_data" | "audio_data", string[]> = { image_data: [], video_data: [], audio_data: [] };
  try {
    // The renderer applies SGLang's preprocessing itself (tool_choice, continue_final_message, reasoning_effort).
    text = ctx.renderer(ctx.family, ctx.template, chat as Parameters<ChatRenderer>[2]);
    if (hasMediaParts(chat.messages)) {
      // The parts' URLs in order of appearance per kind: SGLang's image_data / video_data lists.
      for (const p of preparePrompt(chat as Parameters<typeof preparePrompt>[0], { family: ctx.family, templateId: ctx.template }).mediaParts) {
        media[`${p.kind}_data`].push(p.url);
      }
    }
  } catch (err) {
    throw new SglangOpenAIError(`Failed to apply the chat template: ${(err as Error).message}`);
  }
  const prepared = await prepareGenerate(
    {
      text,
      sampling_params: samplingFromChat(chat),
      rid: chat.rid ?? undefined,
      stream: chat.stream === true,
      ...(media.image_data.length ? { image_data: media.image_data } : {}),
      ...(media.video_data.length ? { video_data: media.video_data } : {}),
      ...(media.audio_data.length ? { audio_data: media.audio_data } : {}),
    },
    { ...ctx, unknownSamplingKeyStatus: 400 },
  );
  return { chat, prepared };
}

/**
 * usage_processor.py: `prompt_tokens_details` is `{cached_tokens}` with the cache report and a
 * non-zero hit; with media tokens it always exists and carries image_tokens / video_tokens
 * (cached_tokens then 0 without the cache report); else null.
 */
function usageOf(s: RequestSnapshot, cacheReport: boolean, prompt: PreparedPrompt): Record<string, unknown> {
  const cached = cacheReport ? s.cachedTokens : 0;
  let details: Record<string, number> | null = cached > 0 ? { cached_tokens: cached } : null;
  if (prompt.imageTokens > 0 || prompt.videoTokens > 0) {
    details = { cached_tokens: cached };
    if (prompt.imageTokens > 0) details.image_tokens = prompt.imageTokens;
    if (prompt.videoTokens > 0) details.video_tokens = prompt.videoTokens;
  }
  return {
    prompt_tokens: s.promptTokens,
    total_tokens: s.promptTokens + s.outputIds.length,
    completion_tokens: s.outputIds.length,
    prompt_tokens_details: details,
    reasoning_tokens: 0,
  };
}

function finishOf(s: RequestSnapshot): { reason: string | null; matched: number | string | null } {
  const f = s.finishReason;
  if (!f) return { reason: null, matched: null };
  return { reason: f.type, matched: f.type === "stop" ? f.matched : null };
}

export async function handleChatCompletions(res: ServerResponse, raw: unknown, ctx: OpenAIContext): Promise<void> {
  let chat: ChatRequest;
  let prepared: PreparedRequest;
  try {
    ({ chat, prepared } = await prepareChat(raw, ctx));
  } catch (err) {
    return sendError(res, err);
  }
  return chat.stream === true ? streamChat(res, chat, prepared, ctx) : nonStreamChat(res, chat, prepared, ctx);
}

async function nonStreamChat(res: ServerResponse, chat: ChatRequest, prepared: PreparedRequest, ctx: OpenAIContext): Promise<void> {
  res.on("close", () => {
    if (!res.writableFinished) ctx.engine.abort(prepared.rid, false);
  });
  let final: RequestSnapshot;
  try {
    final = await ctx.engine.submit({ rid: prepared.rid, inputIds: prepared.prompt.inputIds, sampling: prepared.sampling, script: prepared.script });
  } catch (err) {
    return sendError(res, err);
  }
  if (res.destroyed) return;
  const f = final.finishReason;
  if (f && f.type === "abort" && f.status_code !== null) {
    return sendJson(res, f.status_code, openAIErrorBody(f.message, f.status_code === 400 ? "BadRequest" : String(f.status_code), f.status_code));
  }
  const { reason, matched } = finishOf(final);
  sendJson(res, 200, {
    id: final.rid,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: chat.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: final.text, reasoning_content: null, tool_calls: null },
        logprobs: null,
        finish_reason: reason,
        matched_stop: matched,
      },
    ],
    usage: usageOf(final, ctx.enableCacheReport, prepared.prompt),
    metadata: { weight_version: "default" },
  });
}

async function streamChat(res: ServerResponse, chat: ChatRequest, prepared: PreparedRequest, ctx: OpenAIContext): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  res.flushHeaders();
  res.on("close", () => {
    if (!res.writableFinished) ctx.engine.abort(prepared.rid, false);
  });
  const write = (obj: unknown): void => {
    if (!res.writableEnded && !res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`);
  };
  const chunk = (id: string, delta: Record<string, unknown>, finish: string | null, matched: number | string | null): unknown => ({
    id,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: chat.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, matched_stop: matched }],
  });
  let sentRole = false;
  let sentText = "";
  const emit = (s: RequestSnapshot): void => {
    if (!sentRole) {
      write(chunk(s.rid, { reasoning_content: null, role: "assistant", content: "" }, null, null));
      sentRole = true;
    }
    const delta = s.text.slice(sentText.length);
    if (delta.length > 0) {
      write(chunk(s.rid, { reasoning_content: null, content: delta }, null, null));
      sentText = s.text;
    }
  };
  try {
    const final = await ctx.engine.submit({
      rid: prepared.rid,
      inputIds: prepared.prompt.inputIds,
      sampling: prepared.sampling,
      script: prepared.script,
      onFrame: emit,
    });
    const f = final.finishReason;
    if (f && f.type === "abort" && f.status_code !== null) {
      write({ error: { object: "error", message: f.message, type: "BadRequest", param: null, code: f.status_code } });
    } else {
      emit(final);
      const { reason, matched } = finishOf(final);
      write(chunk(final.rid, { reasoning_content: null }, reason, matched));
      if (chat.stream_options?.include_usage) {
        write({
          id: final.rid,
          object: "chat.completion.chunk",
          created: Math.floor(Date.now() / 1000),
          model: chat.model,
          choices: [],
          usage: usageOf(final, ctx.enableCacheReport, prepared.prompt),
        });
      }
    }
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    write({ error: { object: "error", message, type: "BadRequest", param: null, code: 400 } });
  }
  if (!res.writableEnded && !res.destroyed) res.end("data: [DONE]\n\n");
}
