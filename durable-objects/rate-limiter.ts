/**
 * RateLimiter: one Durable Object per rate-limit bucket (src/edge/rate-limit.ts: an API key digest
 * or a client network, per kind). One object per bucket serialises its requests, so the limit is
 * exact across every edge isolate and location. The bucket is written to storage on every take, so
 * an evicted object resumes where it was instead of starting full; an alarm at the moment the
 * bucket is full again deletes the stored state, so idle clients leave nothing behind.
 */
import { DurableObject } from "cloudflare:workers";
import type { BucketConfig } from "../src/config/config.ts";
import { fullAgainAt, fullBucket, takeToken, type BucketState, type TakeResult } from "../src/util/token-bucket.ts";

const KEY = "bucket";
/** Slack after the refill moment, so an alarm never races a take that just refilled the bucket. */
const EXPIRY_SLACK_MS = 1_000;

export class RateLimiter extends DurableObject {
  #bucket: BucketState | null = null;
  #alarmAt: number | null = null;

  /** Takes `amount` (one request, or a request's tokens) from the bucket under `cfg` (sent by the edge with every call). */
  async take(cfg: BucketConfig, amount = 1): Promise<TakeResult> {
    const now = Date.now();
    this.#bucket ??= this.ctx.storage.kv.get<BucketState>(KEY) ?? fullBucket(cfg, now);
    const r = takeToken(this.#bucket, cfg, now, amount);
    this.ctx.storage.kv.put(KEY, this.#bucket);
    const expireAt = fullAgainAt(this.#bucket, cfg) + EXPIRY_SLACK_MS;
    // Only ever move the alarm later (a take empties the bucket further); one write per change.
    if (this.#alarmAt === null || expireAt > this.#alarmAt) {
      this.#alarmAt = expireAt;
      await this.ctx.storage.setAlarm(expireAt);
    }
    return r;
  }

  /** The bucket refilled completely: forget it (a fresh bucket is identical). */
  override async alarm(): Promise<void> {
    this.#bucket = null;
    this.#alarmAt = null;
    await this.ctx.storage.deleteAll();
  }
}
