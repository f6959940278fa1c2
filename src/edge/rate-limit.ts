/**
 * Rate limits, on by default (`KVEDGE_RATE_LIMIT`, src/config/config.ts RateLimitsSchema):
 * - the generate routes (`/v1/chat/completions`, `/v1/completions`, `/v1/responses`): one token
 *   bucket per API key, else per client network, shared by the three;
 * - failed authentication on any route, operator routes and relay connects: a bucket per client
 *   network each.
 * A client network is the /64 of an IPv6 address (one subscriber's allocation: rotating through it
 * buys nothing) or the /32 of an IPv4 one. A bucket holds up to `burst` requests and refills at
 * requestsPerMinute / 60 per second; a request that finds it empty gets 429 in the OpenAI error
 * shape with `retry-after`. The bucket arithmetic is src/util/token-bucket.ts; each bucket lives in one Durable Object
 * (durable-objects/rate-limiter.ts), so a limit holds across every edge isolate; an isolate takes a
 * busy client's requests from it in leases of a few (rate-lease.ts), deducted there at once.
 */
import type { BucketConfig } from "../config/config.ts";
import { RateLimitError } from "../api/errors.ts";
import { parseIp, formatIpv4 } from "../media/ip-address.ts";
import type { TakeResult } from "../util/token-bucket.ts";
import { apiKeyDigest, type ClientRef } from "./client-label.ts";
import type { LeaseSource, RateLeases } from "./rate-lease.ts";

/** 429 with the wait the client should honour (`retry-after`, seconds). */
export class RateLimitedError extends RateLimitError {
  readonly retryAfterSeconds: number;
  /** More headers for the 429 (a token quota's `x-ratelimit-*`, token-quota.ts). */
  readonly headers: Readonly<Record<string, string>>;
  constructor(retryAfterSeconds: number, message = `Rate limit exceeded. Retry after ${retryAfterSeconds} s.`, code?: string, headers: Record<string, string> = {}) {
    super(message, code);
    this.retryAfterSeconds = retryAfterSeconds;
    this.headers = headers;
  }
}

/** Headers for an error response: `retry-after` (and any `x-ratelimit-*`) on a RateLimitedError. */
export function rateLimitHeaders(err: unknown): Record<string, string> | undefined {
  return err instanceof RateLimitedError ? { ...err.headers, "retry-after": String(err.retryAfterSeconds) } : undefined;
}

/**
 * The client's network for rate limiting: `2001:db8:1:2::/64` for IPv6 (IPv4-mapped addresses count
 * as IPv4), `203.0.113.7/32` for IPv4; anything unparsable is its own (bounded) label.
 */
export function clientNetwork(address: string | null): string {
  if (!address) return "unknown";
  const ip = parseIp(address.trim());
  if (!ip) return `raw:${address.slice(0, 64)}`;
  if (ip.family === 4) return `${formatIpv4(ip.value)}/32`;
  const v = ip.value;
  if (v >> 32n === 0xffffn) return `${formatIpv4(Number(v & 0xffffffffn))}/32`;
  const top = v >> 64n;
  const groups = [48n, 32n, 16n, 0n].map((s) => ((top >> s) & 0xffffn).toString(16));
  return `${groups.join(":")}::/64`;
}

export type BucketKind = "chat" | "auth" | "admin" | "relay";
/** Token quotas' buckets (token-quota.ts), per API key or client network like the chat bucket. */
export type QuotaKind = "input_tokens" | "output_tokens";

/**
 * A bucket's Durable Object name. API keys appear only as a digest (requires initHashing()); the
 * kind keeps a client's failed logins, admin calls and chat requests in separate buckets.
 */
export function rateLimitBucketName(kind: BucketKind | QuotaKind, client: ClientRef): string {
  if ("apiKey" in client) return `${kind}:key:${apiKeyDigest(client.apiKey)}`;
  return `${kind}:net:${client.network}`;
}

export interface RateLimiterClient {
  take(cfg: BucketConfig, amount?: number): Promise<TakeResult>;
}

/**
 * Takes one request from bucket `name` through this isolate's leases (rate-lease.ts: most of a busy
 * client's requests need no call to `source(name)`); throws RateLimitedError when the bucket is
 * empty. Returns the bucket's state (x-ratelimit-*-requests).
 */
export async function enforceRateLimit(leases: RateLeases, name: string, source: (name: string) => LeaseSource, cfg: BucketConfig): Promise<TakeResult> {
  const r = await leases.take(name, cfg, source);
  if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds, undefined, undefined, requestLimitHeaders(cfg, r));
  return r;
}

/** OpenAI's `x-ratelimit-*-requests` for the chat bucket's state. */
export function requestLimitHeaders(cfg: BucketConfig, r: TakeResult): Record<string, string> {
  return rateLimitTriple("requests", cfg.requestsPerMinute, r);
}

/**
 * `x-ratelimit-limit-<what>`, `-remaining-<what>`, `-reset-<what>` as OpenAI sends them: the
 * per-minute limit, what is left, and the time until the bucket is full again ("1s", "6m0s", "20ms").
 */
export function rateLimitTriple(what: string, perMinute: number, r: TakeResult): Record<string, string> {
  return {
    [`x-ratelimit-limit-${what}`]: String(perMinute),
    [`x-ratelimit-remaining-${what}`]: String(r.remaining),
    [`x-ratelimit-reset-${what}`]: resetDuration(r.resetMs),
  };
}

/** OpenAI's reset format: "20ms" under a second, else minutes and whole seconds ("1s", "6m0s"). */
export function resetDuration(ms: number): string {
  const t = Math.max(0, Math.ceil(ms));
  if (t < 1000) return `${t}ms`;
  const s = Math.ceil(t / 1000);
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${s % 60}s` : `${s}s`;
}
