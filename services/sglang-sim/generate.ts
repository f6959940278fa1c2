/**
 * SGLang's native `POST /generate` (GenerateReqInput → {text, output_ids, meta_info}) for single
 * requests: body validation with SGLang's error shapes, tokenization, context checks, and the
 * non-stream / cumulative-SSE response formats (sgl-project/sglang @9d147fd: `GenerateReqInput` in
 * python/sglang/srt/managers/io_struct.py L154-786, the route in
 * python/sglang/srt/entrypoints/http_server.py L809-859).
 */
import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import { z } from "zod";
import type { QwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import type { FinishReason, RequestSnapshot } from "./engine.ts";
import type { SimScheduler } from "./dp-engines.ts";
import { parseSamplingParams, SamplingTypeError, type SamplingParams } from "./sampling-params.ts";
import { fakeOutputLogprobs, reasoningTokenCount, scriptedAnswer } from "./scripted-output.ts";
import {
  SglangInternalError,
  SglangValidationError,
  SglangValueError,
  streamErrorFrame,
  validationErrorBody,
} from "./sglang-errors.ts";

/** Top-level GenerateReqInput fields the simulator looks at; unknown keys are dropped, as pydantic does. */
export const GenerateBodySchema = z.looseObject({
  text: z.union([z.string(), z.array(z.string())]).nullish(),
  input_ids: z.union([z.array(z.number().int()), z.array(z.array(z.number().int()))]).nullish(),
  input_embeds: z.unknown().nullish(),
  image_data: z.unknown().nullish(),
  video_data: z.unknown().nullish(),
  audio_data: z.unknown().nullish(),
  mm_hashes: z.unknown().nullish(),
  sampling_params: z.union([z.record(z.string(), z.unknown()), z.array(z.record(z.string(), z.unknown()))]).nullish(),
  stream: z.boolean().nullish(),
  rid: z.union([z.string(), z.array(z.string())]).nullish(),
  return_logprob: z.union([z.boolean(), z.array(z.boolean())]).nullish(),
  top_logprobs_num: z.number().int().nullish(),
  return_text_in_logprobs: z.boolean().nullish(),
  require_reasoning: z.boolean().nullish(),
  extra_key: z.union([z.string(), z.array(z.string())]).nullish(),
  /** GenerateReqInput.cache_salt (managers/io_struct.py): a namespace for otherwise identical prefixes. */
  cache_salt: z.union([z.string(), z.array(z.string())]).nullish(),
  /** GenerateReqInput.routed_dp_rank (managers/io_struct.py L252 @9d147fd): the DP rank to run on. */
  routed_dp_rank: z.number().int().nullish(),
});
export type GenerateBody = z.infer<typeof GenerateBodySchema>;

/** One media item of a prepared prompt (simulator diagnostics; not part of SGLang's response). */
export interface MediaItemInfo {
  modality: "image" | "video";
  /** Position in image_data / video_data. */
  kindIndex: number;
  padValue: number;
  /** Where the pad value came from: the caller's mm_hashes entry, the item's content hash, or an encoder's embedding. */
  padSource: "mm_hashes" | "content" | "embedding";
  /** Media (pad) tokens of the item. */
  padCount: number;
  /** Pad tokens per temporal group (an image: all of them): what one full-attention block of the vision tower spans. */
  sliceTokens: number;
  /** The item's token run [start, end) in the expanded prompt (vision tokens and timestamps included). */
  start: number;
  end: number;
}

/** The prompt as the scheduler sees it (after any multimodal expansion). */
export interface PreparedPrompt {
  inputIds: number[];
  imageTokens: number;
  videoTokens: number;
  /** Media items in prompt order (absent for text-only prompts). */
  media?: MediaItemInfo[];
}

/**
 * Multimodal expansion: given a request with media, return the padded prompt ids SGLang would
 * build (media-expand.ts is the simulator's own; tests may plug in another). Without one, media
 * requests are refused.
 */
export type MediaExpander = (body: GenerateBody, tokenizer: QwenTokenizer) => Promise<PreparedPrompt>;

export interface GenerateContext {
  engine: SimScheduler;
  /** The worker's DP size (`--dp-size`); a routed_dp_rank must be below it. Absent: 1. */
  dpSize?: number;
  tokenizer: QwenTokenizer;
  contextLength: number;
  maxReqInputLen: number;
  dpRank: number;
  unknownSamplingKeyStatus: 400 | 500;
  /** `--incremental-streaming-output`: stream frames carry deltas (incrementalFrame). */
  incrementalStreaming: boolean;
  mediaExpander: MediaExpander | null;
  log: (line: string) => void;
}

/** A validated single request ready for the engine. */
export interface PreparedRequest {
  rid: string;
  /** The request's cache namespace (null: none). */
  cacheSalt: string | null;
  prompt: PreparedPrompt;
  sampling: SamplingParams;
  stream: boolean;
  /** Scripted answer tokens (a `[[sim-output:…]]` marker in the prompt), else null. */
  script: number[] | null;
  /** return_logprob: alternatives per position and whether token text is included. */
  logprobs: { topN: number; withText: boolean } | null;
  /** require_reasoning: meta_info.reasoning_tokens counts the thinking block. */
  requireReasoning: boolean;
  /** routed_dp_rank, checked against the DP size (null: the controller picks). */
  routedDpRank: number | null;
}

export function newRid(): string {
  return randomUUID().replace(/-/g, "");
}

function hasMedia(v: unknown): boolean {
  if (v === null || v === undefined) return false;
  if (Array.isArray(v)) return v.some(hasMedia);
  return true;
}

/** Parses the JSON body into GenerateReqInput fields; pydantic-style failures are SglangValidationError. */
export function parseGenerateBody(raw: unknown): GenerateBody {
  const parsed = GenerateBodySchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new SglangValidationError(`${issue?.path.join(".") || "body"}: ${issue?.message ?? "invalid request"}`);
  }
  return parsed.data;
}

/**
 * Turns a parsed body into one engine request, raising what SGLang raises: ValueError for the input
 * checks (→ 400 or an inline stream error), TypeError for unknown sampling keys.
 */
export async function prepareGenerate(body: GenerateBody, ctx: GenerateContext): Promise<PreparedRequest> {
  const given = [body.text, body.input_ids, body.input_embeds].filter((v) => v !== null && v !== undefined).length;
  if (given === 0) throw new SglangValueError("Either text, input_ids or input_embeds should be provided.");
  if (given > 1) throw new SglangValueError("Only one of text, input_ids, or input_embeds can be provided.");
  if (body.input_embeds !== null && body.input_embeds !== undefined) {
    throw new SglangValueError("input_embeds is not supported by the simulator.");
  }
  const batch =
    Array.isArray(body.text) ||
    (Array.isArray(body.input_ids) && body.input_ids.some((x) => Array.isArray(x))) ||
    Array.isArray(body.sampling_params);
  if (batch) throw new SglangValueError("Batch requests are not supported by the simulator; send one request per prompt.");
  if (Array.isArray(body.return_logprob)) throw new SglangValueError("Batch requests are not supported by the simulator; send one request per prompt.");

  let sampling: SamplingParams;
  try {
    sampling = parseSamplingParams((body.sampling_params as Record<string, unknown> | null | undefined) ?? {});
  } catch (err) {
    if (err instanceof SamplingTypeError) {
      throw ctx.unknownSamplingKeyStatus === 500 ? new SglangInternalError(err.message) : new SglangValueError(err.message);
    }
    throw err;
  }

  let prompt: PreparedPrompt;
  // mm_hashes without media items: zero items, so SGLang ignores the list (wrong length).
  const media = hasMedia(body.image_data) || hasMedia(body.video_data) || hasMedia(body.audio_data);
  if (media) {
    if (!ctx.mediaExpander) throw new SglangValueError("media not supported by simulator yet");
    prompt = await ctx.mediaExpander(body, ctx.tokenizer);
  } else if (typeof body.text === "string") {
    let ids: number[];
    try {
      ids = ctx.tokenizer.encode(body.text, "");
    } catch (err) {
      throw new SglangValueError(`Tokenization failed: ${(err as Error).message}`);
    }
    prompt = { inputIds: ids, imageTokens: 0, videoTokens: 0 };
  } else {
    const ids = body.input_ids as number[];
    if (ids.some((t) => t < 0 || t > 0xffffffff)) throw new SglangValueError("input_ids must be non-negative uint32 token ids.");
    prompt = { inputIds: ids.slice(), imageTokens: 0, videoTokens: 0 };
  }

  const n = prompt.inputIds.length;
  if (n === 0) throw new SglangValueError("The input is empty.");
  if (n >= ctx.contextLength || n > ctx.maxReqInputLen) {
    throw new SglangValueError(
      `The input (${n} tokens) is longer than the model's context length (${ctx.contextLength} tokens).`,
    );
  }
  if (sampling.maxNewTokens !== null && n + sampling.maxNewTokens > ctx.contextLength) {
    throw new SglangValueError(
      `Requested token count exceeds the model's maximum context length of ${ctx.contextLength} tokens. ` +
        `You requested a total of ${n + sampling.maxNewTokens} tokens: ${n} tokens from the input messages and ` +
        `${sampling.maxNewTokens} tokens for the completion. Please reduce the number of tokens in the input ` +
        `messages or the completion to fit within the limit.`,
    );
  }
  const rid = typeof body.rid === "string" && body.rid.length > 0 ? body.rid : newRid();
  if (Array.isArray(body.cache_salt)) throw new SglangValueError("A list cache_salt needs a batch request; the simulator takes one prompt.");
  const routedDpRank = body.routed_dp_rank ?? null;
  // SGLang's tokenizer manager refuses a rank outside [0, dp_size) with a ValueError (tokenizer_manager.py L623-632).
  if (routedDpRank !== null && (routedDpRank < 0 || routedDpRank >= (ctx.dpSize ?? 1)))
    throw new SglangValueError(`routed_dp_rank ${routedDpRank} is out of range [0, ${ctx.dpSize ?? 1})`);
  const answer = typeof body.text === "string" ? scriptedAnswer(body.text) : null;
  return {
    rid,
    cacheSalt: body.cache_salt ?? null,
    prompt,
    sampling,
    stream: body.stream === true,
    script: answer === null ? null : ctx.tokenizer.encode(answer, ""),
    logprobs: body.return_logprob === true ? { topN: Math.max(0, body.top_logprobs_num ?? 0), withText: body.return_text_in_logprobs === true } : null,
    requireReasoning: body.require_reasoning === true,
    routedDpRank,
  };
}

export interface MetaInfoOptions {
  first: boolean;
  dpRank: number;
  /** The request's logprob and reasoning options, with the tokenizer that renders token text. */
  output?: { prepared: Pick<PreparedRequest, "logprobs" | "requireReasoning">; tokenizer: QwenTokenizer };
}

let alternativeIds: number[] | null = null;
function alternatives(tokenizer: QwenTokenizer): number[] {
  return (alternativeIds ??= [" the", " a", " of", " to", " and", " is", " it", " in"].map((w) => tokenizer.encode(w, "")[0]!));
}

/** `meta_info` in SGLang's key order; e2e_latency only when final, the sent-ts only on the first output. */
export function metaInfo(s: RequestSnapshot, prompt: PreparedPrompt, o: MetaInfoOptions): Record<string, unknown> {
  const m: Record<string, unknown> = {
    id: s.rid,
    finish_reason: s.finishReason,
    prompt_tokens: s.promptTokens,
    weight_version: "default",
    num_retractions: 0,
    reasoning_tokens: o.output?.prepared.requireReasoning ? reasoningTokenCount(s.outputIds, o.output.tokenizer) : 0,
    completion_tokens: s.outputIds.length,
    cached_tokens: s.cachedTokens,
    cached_tokens_details: { device: s.cachedTokens, host: 0 },
  };
  if (prompt.imageTokens > 0) m.image_tokens = prompt.imageTokens;
  if (prompt.videoTokens > 0) m.video_tokens = prompt.videoTokens;
  const lp = o.output?.prepared.logprobs;
  if (lp && o.output) {
    const { tokens, top } = fakeOutputLogprobs(s.outputIds, o.output.tokenizer, alternatives(o.output.tokenizer), lp.topN, lp.withText);
    m.output_token_logprobs = tokens;
    m.output_top_logprobs = top;
    m.output_token_logprobs_length = tokens.length;
  }
  m.dp_rank = o.dpRank;
  if (s.finishReason !== null && s.e2eLatency !== null) m.e2e_latency = s.e2eLatency;
  if (o.first) m.response_sent_to_client_ts = Date.now() / 1000;
  return m;
}

export function generateOutput(s: RequestSnapshot, prompt: PreparedPrompt, o: MetaInfoOptions): Record<string, unknown> {
  return { text: s.text, output_ids: s.outputIds, meta_info: metaInfo(s, prompt, o) };
}

export function mediaLog(p: PreparedPrompt): string {
  if (!p.media?.length) return "";
  return ` media=[${p.media.map((m) => `${m.modality}${m.kindIndex}:${m.padCount}@${m.start} pad=${m.padValue}(${m.padSource})`).join(" ")}]`;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

function abortStatus(r: FinishReason | null): number | null {
  return r && r.type === "abort" ? r.status_code : null;
}

/** One engine run of a request: the request itself, or one of its n copies. */
interface Copy {
  rid: string;
  sampling: SamplingParams;
}

/**
 * n > 1 as SGLang's tokenizer manager runs it (sgl-project/sglang python/sglang/srt/managers/
 * tokenizer_manager.py @9d147fd L1578-1697): a prefix-warming
 * copy with max_new_tokens 0 first, then n copies with fresh rids (each its own sampling draw here).
 */
async function copiesOf(prepared: PreparedRequest, ctx: GenerateContext): Promise<Copy[]> {
  const s = prepared.sampling;
  if (s.n <= 1) return [{ rid: prepared.rid, sampling: s }];
  await ctx.engine.submit({ rid: newRid(), inputIds: prepared.prompt.inputIds, sampling: { ...s, n: 1, maxNewTokens: 0, minNewTokens: 0 }, cacheSalt: prepared.cacheSalt, routedDpRank: prepared.routedDpRank, media: prepared.prompt.media });
  return Array.from({ length: s.n }, (_, i) => ({ rid: newRid(), sampling: { ...s, n: 1, samplingSeed: (s.samplingSeed ?? 0) + i } }));
}

interface StreamedSoFar {
  text: number;
  ids: number;
  logprobs: number;
}

/**
 * A cumulative stream frame as `--incremental-streaming-output` sends it: `text`, `output_ids` and
 * the output logprob arrays hold only what earlier frames did not (`output_token_logprobs_length`
 * stays the total; sgl-project/sglang @9d147fd python/sglang/srt/entrypoints/http_server.py L818-849,
 * python/sglang/srt/managers/tokenizer_manager.py L2178-2351). Advances `so`.
 */
function incrementalFrame(out: Record<string, unknown>, so: StreamedSoFar): Record<string, unknown> {
  const text = out["text"] as string;
  const ids = out["output_ids"] as number[];
  const meta = { ...(out["meta_info"] as Record<string, unknown>) };
  const tokens = meta["output_token_logprobs"];
  if (Array.isArray(tokens)) {
    meta["output_token_logprobs"] = tokens.slice(so.logprobs);
    const top = meta["output_top_logprobs"];
    if (Array.isArray(top)) meta["output_top_logprobs"] = top.slice(so.logprobs);
    so.logprobs = tokens.length;
  }
  const delta = { ...out, text: text.slice(so.text), output_ids: ids.slice(so.ids), meta_info: meta };
  so.text = text.length;
  so.ids = ids.length;
  return delta;
}

function outputOf(s: RequestSnapshot, prepared: PreparedRequest, ctx: GenerateContext, first: boolean): Record<string, unknown> {
  return generateOutput(s, prepared.prompt, { first, dpRank: s.dpRank ?? ctx.dpRank, output: { prepared, tokenizer: ctx.tokenizer } });
}

/** Handles one /generate call whose JSON body has been read. */
export async function handleGenerate(
  res: ServerResponse,
  raw: unknown,
  ctx: GenerateContext,
): Promise<void> {
  let body: GenerateBody;
  try {
    body = parseGenerateBody(raw);
  } catch (err) {
    if (err instanceof SglangValidationError) return sendJson(res, 400, validationErrorBody(err.message));
    throw err;
  }

  if (body.stream === true) return streamGenerate(res, body, ctx);

  let prepared: PreparedRequest;
  try {
    prepared = await prepareGenerate(body, ctx);
  } catch (err) {
    return sendGenerateError(res, err);
  }
  let clientGone = false;
  let rids = [prepared.rid];
  res.on("close", () => {
    if (!res.writableFinished) {
      clientGone = true;
      for (const rid of rids) ctx.engine.abort(rid, false);
    }
  });
  let finals: RequestSnapshot[];
  try {
    const copies = await copiesOf(prepared, ctx);
    rids = copies.map((c) => c.rid);
    finals = await Promise.all(
      copies.map((c) => ctx.engine.submit({ rid: c.rid, inputIds: prepared.prompt.inputIds, sampling: c.sampling, script: prepared.script, cacheSalt: prepared.cacheSalt, routedDpRank: prepared.routedDpRank, media: prepared.prompt.media })),
    );
  } catch (err) {
    return sendGenerateError(res, err);
  }
  if (clientGone) return;
  for (const final of finals) {
    ctx.log(`generate rid=${final.rid} prompt=${final.promptTokens} cached=${final.cachedTokens} out=${final.outputIds.length}${mediaLog(prepared.prompt)}`);
  }
  for (const final of finals) {
    const status = abortStatus(final.finishReason);
    if (status === 400) {
      return sendJson(res, 400, { error: { message: (final.finishReason as { message: string }).message } });
    }
    if (status !== null && status >= 500) {
      const message = (final.finishReason as { message: string }).message;
      return sendJson(res, status, { object: "error", message, type: String(status), param: null, code: status });
    }
  }
  const outputs = finals.map((f) => outputOf(f, prepared, ctx, true));
  sendJson(res, 200, prepared.sampling.n > 1 ? outputs : outputs[0]);
}

function sendGenerateError(res: ServerResponse, err: unknown): void {
  if (err instanceof SglangValueError) return sendJson(res, 400, { error: { message: err.message } });
  if (err instanceof SglangValidationError) return sendJson(res, 400, validationErrorBody(err.message));
  if (err instanceof SglangInternalError) {
    res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
    res.end("Internal Server Error");
    return;
  }
  throw err;
}

/** SSE: status 200 first, then cumulative frames (with `index` when n > 1), inline errors, and always `data: [DONE]`. */
async function streamGenerate(res: ServerResponse, body: GenerateBody, ctx: GenerateContext): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  res.flushHeaders();
  const write = (obj: unknown): void => {
    if (!res.writableEnded && !res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`);
  };
  const done = (): void => {
    if (!res.writableEnded && !res.destroyed) res.end("data: [DONE]\n\n");
  };

  let prepared: PreparedRequest;
  try {
    prepared = await prepareGenerate(body, ctx);
  } catch (err) {
    if (err instanceof SglangInternalError) {
      res.destroy(); // an uncaught TypeError: the stream breaks without [DONE]
      return;
    }
    if (err instanceof SglangValueError || err instanceof SglangValidationError) {
      write(streamErrorFrame(err.message));
      return done();
    }
    throw err;
  }

  let rids = [prepared.rid];
  res.on("close", () => {
    if (!res.writableFinished) for (const rid of rids) ctx.engine.abort(rid, false);
  });
  const multi = prepared.sampling.n > 1;
  /** Per choice: how much of its text, ids and output logprobs earlier frames carried (incremental mode). */
  const sent = new Map<number, StreamedSoFar>();
  const frame = (s: RequestSnapshot, first: boolean, index: number) => {
    let out = outputOf(s, prepared, ctx, first);
    if (ctx.incrementalStreaming) {
      const so = sent.get(index) ?? { text: 0, ids: 0, logprobs: 0 };
      out = incrementalFrame(out, so);
      sent.set(index, so);
    }
    return multi ? { ...out, index } : out;
  };
  try {
    const copies = await copiesOf(prepared, ctx);
    rids = copies.map((c) => c.rid);
    await Promise.all(
      copies.map(async (c, index) => {
        let first = true;
        const final = await ctx.engine.submit({
          rid: c.rid,
          inputIds: prepared.prompt.inputIds,
          sampling: c.sampling,
          routedDpRank: prepared.routedDpRank,
          media: prepared.prompt.media,
          script: prepared.script,
          cacheSalt: prepared.cacheSalt,
          onFrame: (s) => {
            write(frame(s, first, index));
            first = false;
          },
        });
        ctx.log(`generate(stream) rid=${final.rid} prompt=${final.promptTokens} cached=${final.cachedTokens} out=${final.outputIds.length}${mediaLog(prepared.prompt)}`);
        write(frame(final, first, index));
      }),
    );
  } catch (err) {
    if (err instanceof SglangValueError) write(streamErrorFrame(err.message));
    else throw err;
  }
  done();
}
