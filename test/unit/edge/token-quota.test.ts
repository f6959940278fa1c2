/**
 * Token quotas and OpenAI's x-ratelimit-* headers: the buckets are the rate limiter's own
 * arithmetic (src/util/token-bucket.ts, what the RateLimiter object runs), one per kind, with a
 * clock the test moves.
 */
import { describe, expect, it } from "vitest";
import { RateLimitsSchema, type BucketConfig } from "../../../src/config/config.ts";
import { enforceTokenQuota } from "../../../src/edge/token-quota.ts";
import { rateLimitHeaders, requestLimitHeaders, resetDuration, RateLimitedError, type QuotaKind, type RateLimiterClient } from "../../../src/edge/rate-limit.ts";
import { fullBucket, takeToken, type BucketState } from "../../../src/util/token-bucket.ts";

function buckets(clock: { now: number }) {
  const state = new Map<QuotaKind, BucketState>();
  return (kind: QuotaKind): RateLimiterClient => ({
    take: async (cfg: BucketConfig, amount = 1) => {
      const s = state.get(kind) ?? fullBucket(cfg, clock.now);
      state.set(kind, s);
      return takeToken(s, cfg, clock.now, amount);
    },
  });
}

describe("token quotas", () => {
  const limits = RateLimitsSchema.parse({ inputTokensPerMinute: 6_000, outputTokensPerMinute: 1_200 });

  it("takes prompt and output tokens and answers OpenAI's x-ratelimit-*-tokens headers", async () => {
    const clock = { now: 1_000_000 };
    const limiter = buckets(clock);
    const h = await enforceTokenQuota(limiter, limits, { input: 1_500, output: 300 });
    expect(h).toEqual({
      "x-ratelimit-limit-tokens": "6000",
      "x-ratelimit-remaining-tokens": "4500",
      "x-ratelimit-reset-tokens": "15s", // 1 500 tokens at 100 per second
      "x-ratelimit-limit-output-tokens": "1200",
      "x-ratelimit-remaining-output-tokens": "900",
      "x-ratelimit-reset-output-tokens": "15s",
    });
  });

  it("refuses past the quota with Retry-After and the headers, and admits again once refilled", async () => {
    const clock = { now: 1_000_000 };
    const limiter = buckets(clock);
    await enforceTokenQuota(limiter, limits, { input: 5_000, output: 10 });
    const err = await enforceTokenQuota(limiter, limits, { input: 2_000, output: 10 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitedError);
    const h = rateLimitHeaders(err)!;
    expect(h["retry-after"]).toBe("10"); // 1 000 more tokens at 100 per second
    expect(h["x-ratelimit-remaining-tokens"]).toBe("1000");
    expect(h["x-ratelimit-reset-tokens"]).toBe("50s");
    expect((err as RateLimitedError).message).toMatch(/prompt tokens per minute: limit 6000, requested 2000/);
    clock.now += 10_000;
    await expect(enforceTokenQuota(limiter, limits, { input: 2_000, output: 10 })).resolves.toMatchObject({ "x-ratelimit-remaining-tokens": "0" });
  });

  it("counts the output budget up front: a large max_tokens waits for the output bucket", async () => {
    const clock = { now: 1_000_000 };
    const limiter = buckets(clock);
    await enforceTokenQuota(limiter, limits, { input: 10, output: 1_200 });
    const err = await enforceTokenQuota(limiter, limits, { input: 10, output: 600 }).catch((e: unknown) => e);
    expect(rateLimitHeaders(err)).toMatchObject({ "retry-after": "30", "x-ratelimit-remaining-output-tokens": "0" });
  });

  it("without a token quota configured takes nothing and adds no header", async () => {
    const limiter = buckets({ now: 0 });
    expect(await enforceTokenQuota(limiter, RateLimitsSchema.parse({}), { input: 1e9, output: 1e9 })).toEqual({});
  });

  it("request headers and OpenAI's reset format", () => {
    const cfg = { requestsPerMinute: 60, burst: 60 };
    const s = fullBucket(cfg, 0);
    expect(requestLimitHeaders(cfg, takeToken(s, cfg, 0))).toEqual({ "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s" });
    expect([resetDuration(20), resetDuration(999.2), resetDuration(1_000), resetDuration(360_000), resetDuration(61_500)]).toEqual(["20ms", "1s", "1s", "6m0s", "1m2s"]);
  });
});
