/**
 * Token quotas on every generate route (chat, completions, responses — one bucket pair per caller,
 * so switching route evades nothing), beside the request bucket (rate-limit.ts): prompt tokens and
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

/** What a generate route needs for its token quotas (functions/ wires the buckets). */
export interface TokenQuotaDeps {
  /** Takes the request's prompt and output tokens from the caller's token quotas; rejects with 429; resolves to their `x-ratelimit-*` headers. */
  tokenQuota?(apiKey: string | null, tokens: TokenCounts): Promise<Record<string, string>>;
}

/** The quota stage of every generate route, once the prompt is counted and before any routing: a refusal is a 429. Resolves to the headers for the answer. */
export async function takeTokenQuota(deps: TokenQuotaDeps, apiKey: string | null, tokens: TokenCounts): Promise<Record<string, string>> {
  return (await deps.tokenQuota?.(apiKey, tokens)) ?? {};
}

/** Puts the request bucket's and the token quotas' `x-ratelimit-*` on a generate route's answer. */
export function withLimitHeaders(answer: Response, ...sets: Record<string, string>[]): Response {
  for (const set of sets) for (const [k, v] of Object.entries(set)) answer.headers.set(k, v);
  return answer;
}
