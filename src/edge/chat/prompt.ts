/**
 * Stage 3, prompt: the chat template rendered as SGLang renders it, then tokenized, each step
 * bounded by the model's context so a request the worker would refuse is refused here first.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { Limits } from "../../api/limits.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import { contextTokensOf, type ModelConfig } from "../../config/config.ts";
import { preparePrompt } from "../../prompt/index.ts";
import { sharedPrefixCache, type EncodedPrompt } from "../../prompt/prefix-cache.ts";
import { sharedTurnChain, type ChainedPrompt, type ChainFind } from "../../prompt/turn-chain.ts";
import { getQwenTokenizer } from "../../prompt/tokenizer/index.ts";
import { PieceText } from "../../util/piece-text.ts";
import { sampledCheck } from "../exactness.ts";
import { checkedEncode } from "./exactness-check.ts";

/** preparePrompt's result, plus how many leading messages the turn chain supplied and how many characters were rendered for it. */
export type RenderedPrompt = ChainedPrompt & { renderedChars: number };

/** Longest token of the Qwen2/2.5/3 vocabularies, in UTF-16 units (a run of 128 spaces). */
const MAX_TOKEN_CHARS = 128;

/**
 * The prompt text and its media parts, within `maxPromptChars` and what the context could hold.
 * With the body `req` was parsed from (by parseChatBody), earlier turns' rendered text comes from
 * the isolate's turn chain (only the messages from the last user query on are rendered; a
 * `checkRate` share of hits is also rendered whole and compared), and the validated messages are
 * kept for the next turn's parse. `found`: the parse stage's lookup for this body; `partition`: whose
 * entries of the chain it may use (cache-salt.ts edgeCachePartition).
 */
export function renderPrompt(req: ChatCompletionRequest, model: ModelConfig, limits: Limits, source: { bodyText: string; checkRate: number; found?: ChainFind | null; partition: string } | null = null): RenderedPrompt {
  const profile = { family: model.family, templateId: model.templateId };
  let prompt: RenderedPrompt;
  if (source) {
    const chain = sharedTurnChain(source.checkRate);
    const before = chain.renderedChars;
    prompt = { ...chain.prepare(req, source.bodyText, profile, source.partition, { found: source.found ?? null, validated: true }), renderedChars: 0 };
    prompt.renderedChars = chain.renderedChars - before;
  } else {
    const whole = preparePrompt(req, profile);
    prompt = { ...whole, renderedChars: whole.text.length };
  }
  checkPromptChars(prompt.text.length, model, limits);
  return prompt;
}

/** The prompt text for the prefix cache: in the turn chain's pieces when it came from there (never joined on a hit). */
export function promptTextOf(prompt: RenderedPrompt): string | PieceText {
  const p = prompt.pieces;
  return p ? new PieceText([...p.stable, p.rest], p.ids, p.heads) : prompt.text;
}

/**
 * A media prompt's template tokens (placeholders not yet expanded), non-empty and shorter than the
 * context, in the prompt-prefix cache's pieces (earlier turns' ids are its arrays, not copied; exact:
 * the same ids as encoding the whole text; a media placeholder is three added tokens like any other).
 * `partition`: whose entries of the cache it may use (cache-salt.ts edgeCachePartition).
 */
export function encodeMediaPrompt(prompt: RenderedPrompt, model: ModelConfig, partition: string, checkRate: number): EncodedPrompt {
  const encoded = encodePrompt(prompt, model, partition, checkRate);
  if (encoded.length === 0) throw new InvalidRequestError("The prompt is empty.", "messages");
  checkPromptTokens(encoded.length, model);
  return encoded;
}

/**
 * The prompt's token ids and block hashes from the isolate's prompt-prefix cache (earlier turns'
 * are reused); a `checkRate` share is also encoded whole and compared (exactness-check.ts).
 */
export function encodePrompt(prompt: RenderedPrompt, model: ModelConfig, partition: string, checkRate: number): EncodedPrompt {
  const cache = sharedPrefixCache();
  const tokenizer = getQwenTokenizer(model.family);
  const encoded = cache.encode(tokenizer, promptTextOf(prompt), model.blockSize, partition);
  return sampledCheck(checkRate) ? checkedEncode(encoded, { tokenizer, text: prompt.text, blockSize: model.blockSize, partition }, cache) : encoded;
}

/**
 * Before tokenizing: the rendered prompt within `maxPromptChars`, and not so long that even at the
 * longest token it could not fit the context (both bound the tokenizer's work per request).
 */
function checkPromptChars(chars: number, model: ModelConfig, limits: Limits): void {
  const context = contextTokensOf(model);
  if (chars > limits.maxPromptChars || chars > context * MAX_TOKEN_CHARS)
    throw new InvalidRequestError(
      `The rendered prompt is ${chars} characters, more than this endpoint accepts for '${model.id}' (limit ${Math.min(limits.maxPromptChars, context * MAX_TOKEN_CHARS)}).`,
      "messages",
      "context_length_exceeded",
    );
}

/** After tokenizing: SGLang refuses input_len ≥ context_len (tokenizer_manager _validate_one_request); refuse it here first. */
function checkPromptTokens(tokens: number, model: ModelConfig): void {
  if (model.allowAutoTruncate) return;
  const context = contextTokensOf(model);
  if (tokens >= context)
    throw new InvalidRequestError(
      `The input (${tokens} tokens) is longer than the model's context length (${context} tokens).`,
      "messages",
      "context_length_exceeded",
    );
}

/**
 * SGLang also refuses input + max_new_tokens ≥ context_len (same function) unless its workers run
 * with --allow-auto-truncate (then they clamp; `allowAutoTruncate` in the model config): with the
 * prompt's token count (exact, or a lower bound, so a refusal here is one the worker would make),
 * say so with both numbers instead of forwarding a request that can only fail.
 */
export function checkContextFit(promptTokens: number, req: ChatCompletionRequest, model: ModelConfig): void {
  checkPromptTokens(promptTokens, model);
  if (model.allowAutoTruncate) return;
  const maxNew = req.max_completion_tokens ?? req.max_tokens;
  if (maxNew === undefined || maxNew === null) return;
  const context = contextTokensOf(model);
  const field = req.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  if (promptTokens + maxNew >= context)
    throw new InvalidRequestError(
      `The input (${promptTokens} tokens) plus the completion (${maxNew} tokens) is ${promptTokens + maxNew} tokens, which does not fit the model's context length (${context} tokens): lower ${field} or shorten the messages.`,
      field,
      "context_length_exceeded",
    );
}
