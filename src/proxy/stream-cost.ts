/**
 * What streaming logprobs costs when the worker sends cumulative frames (SGLang's default): every
 * frame repeats all output positions so far (tokenizer_manager.py `convert_logprob_style` extends
 * the request's lists and sends them whole), so the bytes the edge must receive and scan grow with
 * the square of the answer, whatever the edge parses of them (logprob-tail.ts keeps the parsing
 * linear; the receiving cannot be). A request whose estimate is past the bound is routed only to
 * workers that stream increments (`--incremental-streaming-output`), or refused with a 400.
 */

/** JSON bytes of one `[logprob, token_id, "text"]` entry (a float's repr, an id, a short token). */
export const LOGPROB_ENTRY_BYTES = 32;
/** Most cumulative logprob bytes a stream may make the edge receive (~0.1 s of edge CPU). */
export const MAX_CUMULATIVE_LOGPROB_BYTES = 16 * 1024 * 1024;

/** Logprob bytes cumulative frames carry over a stream of up to `tokens` output tokens per choice. */
export function cumulativeLogprobBytes(tokens: number, topLogprobs: number, choices: number): number {
  return ((tokens * (tokens + 1)) / 2) * LOGPROB_ENTRY_BYTES * (1 + topLogprobs) * choices;
}

/** The most output tokens per choice whose cumulative logprob bytes stay within the bound. */
export function maxCumulativeLogprobTokens(topLogprobs: number, choices: number): number {
  // The largest n with n(n + 1)/2 · perPosition ≤ the bound.
  const positions = MAX_CUMULATIVE_LOGPROB_BYTES / (LOGPROB_ENTRY_BYTES * (1 + topLogprobs) * choices);
  return Math.floor((Math.sqrt(1 + 8 * positions) - 1) / 2);
}
