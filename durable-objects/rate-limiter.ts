/**
 * RateLimiter: one Durable Object per rate-limited client (API key digest or client address),
 * holding that client's token bucket (src/edge/rate-limit.ts). One object per client serialises
 * its requests, so the limit is exact across every edge isolate and location. The bucket is
 * written to the object's storage on every take, so an evicted object resumes where it was
 * instead of starting full.
 */
import { DurableObject } from "cloudflare:workers";
import { fullBucket, takeToken, type BucketState, type RateLimitConfig, type TakeResult } from "../src/edge/rate-limit.ts";

const KEY = "bucket";

export class RateLimiter extends DurableObject {
  #bucket: BucketState | null = null;

  /** Takes one request from the bucket under `cfg` (sent by the edge with every call). */
  async take(cfg: RateLimitConfig): Promise<TakeResult> {
    const now = Date.now();
    this.#bucket ??= this.ctx.storage.kv.get<BucketState>(KEY) ?? fullBucket(cfg, now);
    const r = takeToken(this.#bucket, cfg, now);
    this.ctx.storage.kv.put(KEY, this.#bucket);
    return r;
  }
}
