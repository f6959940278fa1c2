/**
 * The request schema of `POST /v1/completions` (legacy Completions: OpenAI's CreateCompletionRequest,
 * openai-node 6.30.1 `resources/completions.ts`; SGLang's CompletionRequest, sgl-project/sglang
 * python/sglang/srt/entrypoints/openai/protocol.py @9d147fd L316-408). The prompt goes to the worker
 * as it is (no chat template). Its sampling fields map to `/generate` exactly as the chat path maps
 * them (generate-request.ts), through the chat request they correspond to.
 */
import { z } from "zod";
import { InvalidRequestError } from "./errors.ts";
import type { Limits } from "./limits.ts";
import { ChatCompletionRequestSchema, type ChatCompletionRequest } from "./openai-schema.ts";

function opt<T extends z.ZodType>(schema: T) {
  return schema.nullish().transform((v): z.output<T> | undefined => v ?? undefined);
}

const tokenId = z.number().int().min(0).max(0xffffffff);

export const CompletionRequestSchema = z.object({
  model: z.string().min(1, "model must not be empty"),
  prompt: z.union([z.string(), z.array(z.string()).min(1), z.array(tokenId).min(1), z.array(z.array(tokenId).min(1)).min(1)]),
  echo: z.boolean().nullish().transform((v) => v ?? false),
  /** 0-5 in OpenAI's spec: the number of most likely alternatives per position. */
  logprobs: opt(z.number().int().min(0).max(5)),
  max_tokens: z.number().int().min(1).nullish().transform((v) => v ?? 16),
  n: z.number().int().min(1).nullish().transform((v) => v ?? 1),
  stop: opt(z.union([z.string(), z.array(z.string()).max(4)])),
  stream: z.boolean().nullish().transform((v) => v ?? false),
  stream_options: opt(z.object({ include_usage: opt(z.boolean()) })),
  temperature: opt(z.number().min(0).max(2)),
  top_p: opt(z.number().gt(0).max(1)),
  presence_penalty: opt(z.number().min(-2).max(2)),
  frequency_penalty: opt(z.number().min(-2).max(2)),
  seed: opt(z.number().int()),
  logit_bias: opt(z.record(z.string().regex(/^(?:0|[1-9][0-9]*)$/, "keys must be token ids"), z.number().min(-100).max(100))),
  best_of: opt(z.number().int().min(0).max(20)),
  suffix: opt(z.string()),
  user: opt(z.string().max(256)),
});
export type CompletionRequest = z.output<typeof CompletionRequestSchema>;

/** One prompt of the request: text, or token ids sent to the worker as `input_ids`. */
export type CompletionPrompt = { text: string } | { ids: number[] };

/** The request's prompts in order (a list is a batch; each is routed on its own). */
export function promptsOf(req: CompletionRequest, limits: Pick<Limits, "maxN">): CompletionPrompt[] {
  const p = req.prompt;
  const prompts: CompletionPrompt[] =
    typeof p === "string" ? [{ text: p }] : typeof p[0] === "number" ? [{ ids: p as number[] }] : typeof p[0] === "string" ? (p as string[]).map((text) => ({ text })) : (p as number[][]).map((ids) => ({ ids }));
  if (prompts.length * req.n > limits.maxN)
    throw new InvalidRequestError(`${prompts.length} prompts × n = ${req.n} asks for ${prompts.length * req.n} completions; at most ${limits.maxN} per request (KVEDGE_LIMITS.maxN).`, "prompt");
  if (req.stream && prompts.length > 1) throw new InvalidRequestError("A stream serves one prompt; send one request per prompt.", "prompt", "unsupported_parameter");
  prompts.forEach((q, i) => {
    if ("text" in q && q.text.length === 0) throw new InvalidRequestError("The prompt is empty.", typeof p === "string" ? "prompt" : `prompt[${i}]`);
  });
  return prompts;
}

/** Fields the router refuses, naming them (SGLang reads neither `suffix` without a FIM template nor `best_of`). */
export function refuseUnsupportedCompletion(req: CompletionRequest): void {
  if (req.suffix !== undefined && req.suffix !== "") throw new InvalidRequestError("'suffix' (fill-in-the-middle) is not supported here.", "suffix", "unsupported_parameter");
  if (req.best_of !== undefined && req.best_of > 1 && req.best_of !== req.n) throw new InvalidRequestError("'best_of' is not supported here (SGLang does not read it); use n.", "best_of", "unsupported_parameter");
  if (req.echo && req.logprobs !== undefined) throw new InvalidRequestError("'echo' with 'logprobs' would need the prompt's logprobs, which are not served; drop one of them.", "echo", "unsupported_parameter");
}

/**
 * The chat request with the same sampling fields: its `/generate` mapping (max tokens, stop, seed,
 * penalties, logprobs with their text) is the chat path's own. Its messages are never rendered.
 */
export function samplingRequestOf(req: CompletionRequest): ChatCompletionRequest {
  const stop = req.stop === undefined ? undefined : typeof req.stop === "string" ? [req.stop] : req.stop;
  const parsed = ChatCompletionRequestSchema.safeParse({
    model: req.model,
    messages: [{ role: "user", content: "" }],
    max_tokens: req.max_tokens,
    n: req.n,
    stream: req.stream,
    ...(req.stream_options?.include_usage ? { stream_options: { include_usage: true } } : {}),
    ...(stop && stop.length > 0 ? { stop } : {}),
    ...(req.temperature !== undefined ? { temperature: req.temperature } : {}),
    ...(req.top_p !== undefined ? { top_p: req.top_p } : {}),
    ...(req.presence_penalty !== undefined ? { presence_penalty: req.presence_penalty } : {}),
    ...(req.frequency_penalty !== undefined ? { frequency_penalty: req.frequency_penalty } : {}),
    ...(req.seed !== undefined ? { seed: req.seed } : {}),
    ...(req.logit_bias !== undefined ? { logit_bias: req.logit_bias } : {}),
    ...(req.logprobs !== undefined ? { logprobs: true, top_logprobs: req.logprobs } : {}),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidRequestError(`Invalid ${issue.path.join(".")}: ${issue.message}`, issue.path.join(".") || null);
  }
  return parsed.data;
}
