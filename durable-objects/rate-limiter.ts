/**
 * RateLimiter: one Durable Object per rate-limit bucket (src/edge/rate-limit.ts: an API key digest
 * or a client network, per kind). One object per bucket serialises its requests, so the limit is
 * exact across every edge isolate and location. The bucket is written to storage on every take, so
 * an evicted object resumes where it was instead of starting full. Its stored state is deleted once
 * the bucket is full again, so idle clients leave nothing behind: by one alarm, set by the object's
 * first take (after it starts or after a deletion); when it fires with the bucket not yet full
 * (later takes emptied it further), it is set again for the moment the bucket will be. A take thus
 * writes the bucket alone, not the alarm too.
 */
import { DurableObject } from "cloudflare:workers";
import type { BucketConfig } from "../src/config/config.ts";
import { fullAgainAt, fullBucket, takeToken, type BucketState, type TakeResult } from "../src/util/token-bucket.ts";

const KEY = "bucket";
/** Slack after the refill moment, so an alarm never races a take that just refilled the bucket. */
const EXPIRY_SLACK_MS = 1_000;

/** The bucket as stored: with the moment it is full again under the latest take's config (absent in state stored before it was kept: full at the alarm). */
interface StoredBucket extends BucketState {
  fullAt?: number;
}

export class RateLimiter extends DurableObject {
  #bucket: StoredBucket | null = null;
  #alarmSet = false;

  /** Takes `amount` (one request, or a request's tokens) from the bucket under `cfg` (sent by the edge with every call). */
  async take(cfg: BucketConfig, amount = 1): Promise<TakeResult> {
    const now = Date.now();
    this.#bucket ??= this.ctx.storage.kv.get<StoredBucket>(KEY) ?? fullBucket(cfg, now);
    const r = takeToken(this.#bucket, cfg, now, amount);
    this.#bucket.fullAt = fullAgainAt(this.#bucket, cfg);
    this.ctx.storage.kv.put(KEY, this.#bucket);
    // An object that has not set its alarm since it started (or since the last deletion) sets it;
    // a later take leaves it, and the alarm moves itself on while the bucket is not full.
    if (!this.#alarmSet) {
      this.#alarmSet = true;
      await this.ctx.storage.setAlarm(this.#bucket.fullAt + EXPIRY_SLACK_MS);
    }
    return r;
  }

  /** The bucket refilled completely: forget it (a fresh bucket is identical); not yet: wait until it has. */
  override async alarm(): Promise<void> {
    const bucket = this.#bucket ?? this.ctx.storage.kv.get<StoredBucket>(KEY) ?? null;
    if (bucket?.fullAt !== undefined && bucket.fullAt > Date.now()) {
      this.#alarmSet = true;
      await this.ctx.storage.setAlarm(bucket.fullAt + EXPIRY_SLACK_MS);
      return;
    }
    this.#bucket = null;
    this.#alarmSet = false;
    await this.ctx.storage.deleteAll();
  }
}
