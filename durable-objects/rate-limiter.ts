/**
 * RateLimiter: one Durable Object per rate-limit bucket (src/edge/rate-limit.ts: an API key digest
 * or a client network, per kind). One object per bucket serialises its requests, so the limit is
 * exact across every edge isolate and location: a lease (`lease`) is deducted here at once, so
 * what isolates hold is never more than the bucket had. The bucket is written to storage on every take, so
 * an evicted object resumes where it was instead of starting full. Its stored state is deleted once
 * the bucket is full again, so idle clients leave nothing behind: by one alarm, set by the object's
 * first take (after it starts or after a deletion); when it fires with the bucket not yet full
 * (later takes emptied it further), it is set again for the moment the bucket will be. A take thus
 * writes the bucket alone, not the alarm too.
 */
import { DurableObject } from "cloudflare:workers";
import type { BucketConfig } from "../src/config/config.ts";
import { fullAgainAt, fullBucket, takeLease, takeToken, type BucketState, type LeaseBack, type LeaseResult, type TakeResult } from "../src/util/token-bucket.ts";

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
    const bucket = this.#load(cfg, now);
    const r = takeToken(bucket, cfg, now, amount);
    await this.#store(bucket, cfg);
    return r;
  }

  #load(cfg: BucketConfig, now: number): StoredBucket {
    return (this.#bucket ??= this.ctx.storage.kv.get<StoredBucket>(KEY) ?? fullBucket(cfg, now));
  }

  async #store(bucket: StoredBucket, cfg: BucketConfig): Promise<void> {
    bucket.fullAt = fullAgainAt(bucket, cfg);
    this.ctx.storage.kv.put(KEY, bucket);
    // An object that has not set its alarm since it started (or since the last deletion) sets it;
    // a later take leaves it, and the alarm moves itself on while the bucket is not full.
    if (!this.#alarmSet) {
      this.#alarmSet = true;
      await this.ctx.storage.setAlarm(bucket.fullAt + EXPIRY_SLACK_MS);
    }
  }

  /**
   * Leases up to `want` requests (src/util/token-bucket.ts takeLease: deducted at once and counted
   * held until settled or expired, within a quarter of the level and an eighth of the burst), after
   * settling the caller's previous lease (`back`). Counts are of `cfg`: a call under another config
   * forgets those of the last one. Refused (granted 0) when not one request is there.
   */
  async lease(cfg: BucketConfig, want: number, back?: LeaseBack): Promise<LeaseResult> {
    const now = Date.now();
    const bucket = this.#load(cfg, now);
    const r = takeLease(bucket, cfg, now, want, back);
    await this.#store(bucket, cfg);
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
