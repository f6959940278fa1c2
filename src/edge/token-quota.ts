/**
 * Token quotas on the chat route, beside its request bucket (rate-limit.ts): prompt tokens and
 * output tokens per minute per API key, else per client network (`KVEDGE_RATE_LIMIT`
 * inputTokensPerMinute / outputTokensPerMinute; absent: no quota). A request takes its exact prompt
 * length from the input bucket once the prompt stage has counted it, and its output budget
 * (max_tokens, or the edge's cap) from the output bucket up front, as OpenAI counts max_tokens
 * toward its token limit. The answer carries OpenAI's `x-ratelimit-*-tokens` (the prompt bucket)
 * and `x-ratelimit-*-output-tokens`; a refusal is a 429 with Retry-After and the same headers.
 */
import type { RateLimits } from "../config/config.ts";
import { rateLimitTriple, RateLimitedError, type QuotaKind, type RateLimiterClient } from "./rate-limit.ts";

export interface TokenCounts {
  /** The request's prompt tokens (the routed sequence's length). */
  input: number;
  /** The output tokens it may produce. */
  output: number;
}

const HEADER_NAME: Record<QuotaKind, string> = { input_tokens: "tokens", output_tokens: "output-tokens" };
const WHAT: Record<QuotaKind, string> = { input_tokens: "prompt tokens", output_tokens: "output tokens (max_tokens)" };

/** Takes the request's tokens from each configured bucket; throws RateLimitedError on the first that is short. Returns the headers. */
export async function enforceTokenQuota(limiter: (kind: QuotaKind) => RateLimiterClient, limits: RateLimits, t: TokenCounts): Promise<Record<string, string>> {
  const headers: Record<string, string> = {};
  const buckets: [QuotaKind, number | undefined, number][] = [
    ["input_tokens", limits.inputTokensPerMinute, t.input],
    ["output_tokens", limits.outputTokensPerMinute, t.output],
  ];
  for (const [kind, perMinute, amount] of buckets) {
    if (perMinute === undefined) continue;
    const r = await limiter(kind).take({ requestsPerMinute: perMinute, burst: perMinute }, Math.max(0, Math.ceil(amount)));
    Object.assign(headers, rateLimitTriple(HEADER_NAME[kind], perMinute, r));
    if (!r.allowed)
      throw new RateLimitedError(r.retryAfterSeconds, `Rate limit reached for ${WHAT[kind]} per minute: limit ${perMinute}, requested ${Math.ceil(amount)}. Retry after ${r.retryAfterSeconds} s.`, undefined, headers);
  }
  return headers;
}
