/**
 * Per-client rate limits for `POST /v1/chat/completions`: a token bucket per API key (or, when no
 * API keys are configured, per client address), `KVEDGE_RATE_LIMIT = {"requestsPerMinute":600,
 * "burst":60}`. A bucket holds up to `burst` requests and refills at requestsPerMinute / 60 per
 * second; a request that finds it empty gets 429 in the OpenAI error shape with `retry-after`.
 * The bucket arithmetic is pure (here); its state lives in one Durable Object per client
 * (durable-objects/rate-limiter.ts), so the limit holds across every edge isolate.
 */
import { z } from "zod";
import { RateLimitError } from "../api/errors.ts";
import { bytesToHex, sha256 } from "../util/hash.ts";

export const RateLimitConfigSchema = z.strictObject({
  requestsPerMinute: z.number().positive().max(10_000_000),
  burst: z.number().int().min(1).max(1_000_000),
});
export type RateLimitConfig = z.infer<typeof RateLimitConfigSchema>;

/** `KVEDGE_RATE_LIMIT` → config; unset or empty = no rate limiting. Throws on a malformed value. */
export function parseRateLimitVar(raw: unknown): RateLimitConfig | null {
  if (raw === undefined || raw === null || raw === "") return null;
  const value: unknown = typeof raw === "string" ? JSON.parse(raw) : raw;
  return RateLimitConfigSchema.parse(value);
}

export interface BucketState {
  tokens: number;
  /** Time of the last refill, ms. */
  at: number;
}

export interface TakeResult {
  allowed: boolean;
  /** Whole requests left in the bucket after this one. */
  remaining: number;
  /** Seconds until one request fits again (0 when allowed). */
  retryAfterSeconds: number;
}

/** Refills `state` up to `now` and takes one request if there is one. Mutates and returns the verdict. */
export function takeToken(state: BucketState, cfg: RateLimitConfig, now: number): TakeResult {
  const perMs = cfg.requestsPerMinute / 60_000;
  const elapsed = Math.max(0, now - state.at);
  state.tokens = Math.min(cfg.burst, state.tokens + elapsed * perMs);
  state.at = Math.max(state.at, now);
  if (state.tokens >= 1) {
    state.tokens -= 1;
    return { allowed: true, remaining: Math.floor(state.tokens), retryAfterSeconds: 0 };
  }
  return { allowed: false, remaining: 0, retryAfterSeconds: Math.max(1, Math.ceil((1 - state.tokens) / perMs / 1000)) };
}

export function fullBucket(cfg: RateLimitConfig, now: number): BucketState {
  return { tokens: cfg.burst, at: now };
}

/** 429 with the wait the client should honour (`retry-after`, seconds). */
export class RateLimitedError extends RateLimitError {
  readonly retryAfterSeconds: number;
  constructor(retryAfterSeconds: number) {
    super(`Rate limit exceeded. Retry after ${retryAfterSeconds} s.`);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** Headers for an error response: `retry-after` on a RateLimitedError. */
export function rateLimitHeaders(err: unknown): Record<string, string> | undefined {
  return err instanceof RateLimitedError ? { "retry-after": String(err.retryAfterSeconds) } : undefined;
}

/** The bucket's name: a digest, so raw API keys never appear as object names (requires initHashing()). */
export function rateLimitBucketName(client: { apiKey: string } | { address: string }): string {
  return "apiKey" in client ? `key:${bytesToHex(sha256(new TextEncoder().encode(client.apiKey))).slice(0, 32)}` : `ip:${client.address}`;
}

export interface RateLimiterClient {
  take(cfg: RateLimitConfig): Promise<TakeResult>;
}

/** Takes one request from the client's bucket; throws RateLimitedError when it is empty. */
export async function enforceRateLimit(limiter: RateLimiterClient, cfg: RateLimitConfig): Promise<void> {
  const r = await limiter.take(cfg);
  if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds);
}
