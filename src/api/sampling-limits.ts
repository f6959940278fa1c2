/**
 * The bounds of the sampling parameters, one check for every generating endpoint: chat runs it in
 * its parse, completions on the chat request its fields map to, responses through chat. Token ids
 * are checked against the model's vocabulary once the model is known (checkTokenIdsInVocab).
 */
import { InvalidRequestError } from "./errors.ts";
import type { Limits } from "./limits.ts";
import type { ChatCompletionRequest } from "./openai-schema.ts";

type SamplingFields = Pick<
  ChatCompletionRequest,
  "model" | "n" | "max_tokens" | "max_completion_tokens" | "min_tokens" | "stop" | "stop_regex" | "logit_bias" | "stop_token_ids"
>;

export function limitError(message: string, param: string | null): InvalidRequestError {
  return new InvalidRequestError(message, param, "limit_exceeded");
}

export function checkSamplingLimits(req: SamplingFields, limits: Limits): void {
  if (req.model.length > limits.maxModelChars) throw limitError(`model is longer than ${limits.maxModelChars} characters.`, "model");
  if (req.n > limits.maxN) throw limitError(`n must be at most ${limits.maxN}.`, "n");
  for (const key of ["max_tokens", "max_completion_tokens"] as const) {
    const v = req[key];
    if (v !== undefined && v > limits.maxMaxTokens) throw limitError(`${key} must be at most ${limits.maxMaxTokens}.`, key);
  }
  // With max_tokens absent, checkSemantics has no maximum to hold min_tokens to: SGLang would be
  // asked for that many tokens, ignoring EOS and stop strings until then.
  if (req.min_tokens > limits.maxMaxTokens) throw limitError(`min_tokens must be at most ${limits.maxMaxTokens}.`, "min_tokens");
  if (req.stop !== undefined) {
    if (req.stop.length > limits.maxStopSequences) throw limitError(`At most ${limits.maxStopSequences} stop sequences are allowed.`, "stop");
    req.stop.forEach((s, i) => {
      if (s.length > limits.maxStopChars) throw limitError(`Stop sequences are limited to ${limits.maxStopChars} characters.`, `stop[${i}]`);
    });
  }
  const patterns = req.stop_regex === undefined ? [] : typeof req.stop_regex === "string" ? [req.stop_regex] : req.stop_regex;
  if (patterns.length > 0) {
    if (limits.maxStopRegexes === 0) {
      throw limitError("stop_regex is not accepted on this endpoint: each pattern runs on the worker's scheduler at every token (operators can allow it with KVEDGE_LIMITS.maxStopRegexes).", "stop_regex");
    }
    if (patterns.length > limits.maxStopRegexes) throw limitError(`At most ${limits.maxStopRegexes} stop_regex patterns are allowed.`, "stop_regex");
    patterns.forEach((p, i) => {
      if (p.length > limits.maxStopRegexChars) throw limitError(`stop_regex patterns are limited to ${limits.maxStopRegexChars} characters.`, typeof req.stop_regex === "string" ? "stop_regex" : `stop_regex[${i}]`);
    });
  }
  const biased = req.logit_bias === undefined ? 0 : Object.keys(req.logit_bias).length;
  if (biased > limits.maxLogitBias) throw limitError(`logit_bias has ${biased} entries; at most ${limits.maxLogitBias} are allowed.`, "logit_bias");
  const stopIds = req.stop_token_ids?.length ?? 0;
  if (stopIds > limits.maxStopTokenIds) throw limitError(`stop_token_ids has ${stopIds} ids; at most ${limits.maxStopTokenIds} are allowed.`, "stop_token_ids");
}

/**
 * Token ids the worker indexes its embedding or logits with must lie in the model's vocabulary: an
 * id past SGLang's embedding table is a CUDA device-side assert that takes the worker down, and
 * SGLang long had no caller of its _validate_input_ids_in_vocab (its fix's test says so; fixed
 * versions check input_ids against the config's vocab_size, not logit_bias). `vocabSize` is the
 * tokenizer's, added tokens included (HF get_vocab_size(true)): at most the config's padded
 * vocab_size, so every id let through has an embedding row; the padding rows name no token.
 */
export function checkTokenIdsInVocab(ids: readonly number[], vocabSize: number, paramAt: (i: number) => string): void {
  ids.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw new InvalidRequestError(`Token id ${id} is outside the model's vocabulary (0 to ${vocabSize - 1}).`, paramAt(i), "invalid_token_id");
  });
}

/** logit_bias keys and stop_token_ids against the vocabulary (checkTokenIdsInVocab). */
export function checkSamplingTokenIds(req: Pick<ChatCompletionRequest, "logit_bias" | "stop_token_ids">, vocabSize: number): void {
  for (const key of Object.keys(req.logit_bias ?? {})) {
    const id = Number(key);
    if (id >= vocabSize) throw new InvalidRequestError(`Token id ${key} is outside the model's vocabulary (0 to ${vocabSize - 1}).`, `logit_bias.${key}`, "invalid_token_id");
  }
  if (req.stop_token_ids !== undefined) checkTokenIdsInVocab(req.stop_token_ids, vocabSize, (i) => `stop_token_ids[${i}]`);
}
