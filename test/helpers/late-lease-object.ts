/**
 * One RateLimiter object's bucket on a test clock, for the lease property tests: each isolate's
 * lease call is decided at once (takeLease) and answered `late` ms later (parked until `deliver`),
 * as a slow or distant object would answer.
 */
import type { LeaseSource, RateLeases } from "../../src/edge/rate-lease.ts";
import { fullBucket, takeLease, type BucketRate, type BucketState } from "../../src/util/token-bucket.ts";

export interface LateLeaseObject {
  /** How late the object's next answers come (ms); 0: at once. */
  late: number;
  /** Lets settled promises' callbacks run. */
  flush(): Promise<void>;
  /** Answers every call parked until `upTo`, then flushes. */
  deliver(upTo: number): Promise<void>;
  /**
   * One request through `iso` under `cfg`: when admitted, pushes to `admitted` the time the object
   * decided its call, or the time it was spent from a lease the isolate held. `onCall` sees every
   * call the object answers (its config and what it granted).
   */
  take(iso: RateLeases, cfg: BucketRate, admitted: number[], onCall?: (cfg: BucketRate, granted: number) => void): void;
}

export function lateLeaseObject(clock: { now: number }): LateLeaseObject {
  let state: BucketState | null = null;
  const parked: { at: number; answer: () => void }[] = [];
  const flush = () => new Promise<void>((resolve) => setImmediate(resolve));
  const object: LateLeaseObject = {
    late: 0,
    flush,
    async deliver(upTo) {
      for (const p of parked.filter((p) => p.at <= upTo)) p.answer();
      parked.splice(0, parked.length, ...parked.filter((p) => p.at > upTo));
      await flush();
    },
    take(iso, cfg, admitted, onCall) {
      let decidedAt: number | undefined;
      const source: LeaseSource = {
        lease: (c, want, back) => {
          state ??= fullBucket(c, clock.now);
          const r = takeLease(state, c, clock.now, want, back);
          decidedAt = clock.now;
          onCall?.(c, r.granted);
          if (object.late === 0) return Promise.resolve(r);
          return new Promise((resolve) => parked.push({ at: clock.now + object.late, answer: () => resolve(r) }));
        },
      };
      const spentAt = clock.now;
      void iso.take("chat:key:x", cfg, () => source).then((r) => r.allowed && admitted.push(decidedAt ?? spentAt));
    },
  };
  return object;
}
