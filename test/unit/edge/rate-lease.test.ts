/**
 * Rate-limit leases (src/edge/rate-lease.ts) against the RateLimiter object's own arithmetic
 * (src/util/token-bucket.ts takeLease, what durable-objects/rate-limiter.ts runs), with a clock the
 * test moves: N isolates sharing one bucket never admit more than the bucket allows, leases grow
 * for a busy client and shrink after expiring, unspent tokens go back, the book stays bounded.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { enforceRateLimit, RateLimitedError } from "../../../src/edge/rate-limit.ts";
import { MAX_RATE_LEASE_NAME_CHARS, RateLeases, type LeaseSource } from "../../../src/edge/rate-lease.ts";
import { fullBucket, takeLease, takeToken, type BucketRate, type BucketState } from "../../../src/util/token-bucket.ts";
import { lateLeaseObject } from "../../helpers/late-lease-object.ts";

/** One bucket object shared by every isolate: counts calls and records what each carried. */
function bucketObject(clock: { now: number }) {
  let state: BucketState | null = null;
  const calls: { want: number; returned: number; granted: number }[] = [];
  const source: LeaseSource = {
    lease: async (cfg, want, back) => {
      state ??= fullBucket(cfg, clock.now);
      const r = takeLease(state, cfg, clock.now, want, back);
      calls.push({ want, returned: back?.returned ?? 0, granted: r.granted });
      return r;
    },
  };
  return { calls, source: () => source, level: () => state?.tokens };
}

describe("lease arithmetic (the object's side)", () => {
  const cfg = { requestsPerMinute: 600, burst: 120 };

  it("grants within a quarter of the level and an eighth of the burst, at least one token, none from an empty bucket", () => {
    const b = fullBucket(cfg, 0);
    expect(takeLease(b, cfg, 0, 100)).toMatchObject({ allowed: true, granted: 15, level: 105, remaining: 105 });
    expect(takeLease(b, cfg, 0, 4)).toMatchObject({ granted: 4, level: 101 });
    const low = { tokens: 9, at: 0 };
    expect(takeLease(low, cfg, 0, 10).granted).toBe(2); // floor(9 / 4)
    const one = { tokens: 1.5, at: 0 };
    expect(takeLease(one, cfg, 0, 10).granted).toBe(1);
    const empty = { tokens: 0.5, at: 0 };
    // 0.5 token short at 10 per second: 50 ms, rounded up to a whole second.
    expect(takeLease(empty, cfg, 0, 10)).toMatchObject({ allowed: false, granted: 0, retryAfterSeconds: 1 });
    expect(empty.tokens).toBe(0.5);
  });

  it("counts a lease held until it is settled or expired: the bucket refills only up to burst less what leases hold", () => {
    const b = fullBucket(cfg, 0);
    const lease = takeLease(b, cfg, 0, 15);
    expect(lease).toMatchObject({ granted: 15, level: 105 });
    // A second later the bucket would be full, but 14 of the lease are still held (its first went to the calling request): 106.
    expect(takeLease(b, cfg, 1_000, 1)).toMatchObject({ granted: 1, level: 105 });
    // Settled with 5 unspent: those come back, the rest is spent, the cap is the burst again.
    expect(takeLease(b, cfg, 1_000, 1, { returned: 5, settled: 14, at: lease.at, epoch: lease.epoch }).level).toBe(105 + 5 - 1);
    // Once expired (two windows on), held leases no longer count.
    expect(takeLease(b, cfg, 60_000, 1).level).toBe(119);
  });

  it("refills up to the cap the lease held before settling it (a settlement does not refill the time it was held)", () => {
    const fast = { requestsPerMinute: 6_000, burst: 16 };
    const b = fullBucket(fast, 0);
    const lease = takeLease(b, fast, 0, 2); // one token held
    expect(lease).toMatchObject({ granted: 2, level: 14 });
    // 30 ms at 100 / s: three tokens, but the bucket fills only to 16 - 1 while the lease is held; settled (spent), one taken.
    expect(takeLease(b, fast, 30, 1, { returned: 0, settled: 1, at: lease.at, epoch: lease.epoch }).level).toBe(14);
  });

  it("a lease nobody settles (an evicted lease, a recycled isolate) stops counting 3 to 6 s after its grant", () => {
    const early = () => {
      const b = fullBucket(cfg, 0);
      takeLease(b, cfg, 0, 15); // 14 held from the start of a 3 s window
      return b;
    };
    // Refilled at 10 / s: up to 120 less the 14 until the end of the next window (6 s), then up to 120
    // from then on (not over the time the hold kept it down); one taken.
    expect(takeLease(early(), cfg, 5_999, 1).level).toBe(120 - 14 - 1);
    expect(takeLease(early(), cfg, 6_000, 1).level).toBe(120 - 14 - 1);
    expect(takeLease(early(), cfg, 7_400, 1).level).toBe(120 - 1);
    const late = { tokens: 120, at: 2_999 };
    takeLease(late, cfg, 2_999, 15); // granted at the end of the window
    expect(takeLease(late, cfg, 7_400, 1).level).toBe(120 - 1);
  });

  it("a plain take (token quotas, an isolate without leases) refills only up to what leases leave", () => {
    const b = fullBucket(cfg, 0);
    takeLease(b, cfg, 0, 15); // 14 held
    // A second at 10 / s would refill 10 of the 15 taken; the bucket stops at 120 - 14.
    expect(takeToken(b, cfg, 1_000)).toMatchObject({ allowed: true, remaining: 120 - 14 - 1 });
  });

  it("forgets counts made under another config: the new config's bucket is as full as its level allows", () => {
    const big = { requestsPerMinute: 6_000, burst: 1_000 };
    const b = fullBucket(big, 0);
    const old = takeLease(b, big, 0, 200); // 124 held
    expect(old.granted).toBe(125);
    const small = { requestsPerMinute: 30, burst: 10 };
    const r = takeLease(b, small, 0, 1);
    expect(r).toMatchObject({ allowed: true, level: 9 });
    expect(r.epoch).not.toBe(old.epoch);
    // The old lease's settlement and leftover are ignored: its count is gone, and its tokens are not this config's.
    expect(takeLease(b, small, 0, 1, { returned: 100, settled: 124, at: old.at, epoch: old.epoch }).level).toBe(8);
  });

  it("takes returned tokens back only while the lease is still held there, never more than the settlement released", () => {
    const b = fullBucket(cfg, 0);
    const lease = takeLease(b, cfg, 0, 15); // 14 held
    b.tokens = 0;
    // A return claiming more than the lease held releases (and credits) only what was held.
    expect(takeLease(b, cfg, 0, 1, { returned: 1_000_000, settled: 1_000_000, at: lease.at, epoch: lease.epoch }).level).toBe(14 - 1);
    // A return with nothing settled is nothing released: no credit (it would create tokens).
    const c = fullBucket(cfg, 0);
    const l2 = takeLease(c, cfg, 0, 15);
    c.tokens = 0;
    expect(takeLease(c, cfg, 0, 1, { returned: 10, settled: 0, at: l2.at, epoch: l2.epoch }).granted).toBe(0);
    // Settled again (a caller's bug): the count is gone already, nothing more comes back.
    const d = fullBucket(cfg, 0);
    const l3 = takeLease(d, cfg, 0, 15);
    d.tokens = 0;
    expect(takeLease(d, cfg, 0, 1, { returned: 14, settled: 14, at: l3.at, epoch: l3.epoch }).level).toBe(13);
    d.tokens = 0;
    expect(takeLease(d, cfg, 0, 1, { returned: 14, settled: 14, at: l3.at, epoch: l3.epoch }).granted).toBe(0);
    // Capped at the burst: 110 + 10 returned, one taken.
    const full = fullBucket(cfg, 0);
    const l4 = takeLease(full, cfg, 0, 15);
    full.tokens = 110;
    expect(takeLease(full, cfg, 0, 1, { returned: 14, settled: 14, at: l4.at, epoch: l4.epoch }).level).toBe(119);
    expect(takeLease({ tokens: 10, at: 0 }, cfg, 0, Number.NaN).granted).toBe(1);
  });

  it("a leftover returned after the object stopped counting its lease is not credited (the bucket has refilled over it)", () => {
    const b = fullBucket(cfg, 0);
    const lease = takeLease(b, cfg, 0, 15); // granted in window 0 (0-3 s), held until 6 s at most
    expect(takeLease(b, cfg, 6_000, 1).level).toBe(105); // the hold has just expired: the bucket was kept to 106 until now, one taken
    b.tokens = 0;
    // 14 returned at 6 s: the lease is no longer counted, so nothing is released nor credited.
    expect(takeLease(b, cfg, 6_000, 1, { returned: 14, settled: 14, at: lease.at, epoch: lease.epoch }).granted).toBe(0);
    // Within the hold (the next window) the same return is credited.
    const c = fullBucket(cfg, 0);
    const l2 = takeLease(c, cfg, 0, 15);
    c.tokens = 0;
    c.at = 5_999;
    expect(takeLease(c, cfg, 5_999, 1, { returned: 14, settled: 14, at: l2.at, epoch: l2.epoch }).level).toBe(13);
  });

  it("a small burst leases one token at a time (today's take)", () => {
    const small = { requestsPerMinute: 60, burst: 10 };
    expect(takeLease(fullBucket(small, 0), small, 0, 50).granted).toBe(1);
  });
});

describe("leases in the isolate", () => {
  const cfg = { requestsPerMinute: 600, burst: 120 };

  it("a client seen once takes one token by one call; a busy one's leases double up to burst / 8", async () => {
    const clock = { now: 1_000 };
    const obj = bucketObject(clock);
    const leases = new RateLeases(16, () => clock.now);
    const first = await leases.take("chat:net:a", cfg, obj.source);
    expect(obj.calls).toEqual([{ want: 1, returned: 0, granted: 1 }]);
    expect(first).toMatchObject({ allowed: true, remaining: 119 });
    for (let i = 0; i < 59; i++) {
      const r = await leases.take("chat:net:a", cfg, obj.source);
      expect(r.remaining).toBe(119 - i - 1); // the clock stands still: no refill
    }
    expect(obj.calls.map((c) => c.granted)).toEqual([1, 2, 4, 8, 15, 15, 15]);
    expect(obj.level()).toBe(120 - 60);
  });

  it("an expired lease's leftover goes back with the next call, which asks for what was used", async () => {
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const leases = new RateLeases(16, () => clock.now);
    for (let i = 0; i < 1 + 2 + 4 + 1; i++) await leases.take("k", cfg, obj.source); // leases of 1, 2, 4, then 8 (one spent)
    expect(obj.calls.at(-1)).toEqual({ want: 8, returned: 0, granted: 8 });
    await leases.take("k", cfg, obj.source); // two of the eight spent
    expect(obj.level()).toBe(120 - 15);
    clock.now += 2_000; // expired: six unspent
    const r = await leases.take("k", cfg, obj.source);
    expect(obj.calls.at(-1)).toEqual({ want: 2, returned: 6, granted: 2 });
    // 2 s at 10 / s refilled the bucket up to 120 less the lease's seven held (six unspent, one spent
    // in its time: the object counts it until the settlement), 113; then the six came back: 119, less the new lease.
    expect(obj.level()).toBe(117);
    expect(r.remaining).toBe(118);
  });

  it("a refusal is the object's, with its retry-after, and resets the lease to one", async () => {
    const tight = { requestsPerMinute: 60, burst: 64 };
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const leases = new RateLeases(16, () => clock.now);
    let allowed = 0;
    let refused: unknown = null;
    for (let i = 0; i < 100 && !refused; i++) {
      const r = await leases.take("k", tight, obj.source);
      if (r.allowed) allowed++;
      else refused = r;
    }
    expect(allowed).toBe(64);
    expect(refused).toMatchObject({ retryAfterSeconds: 1, remaining: 0 }); // one token a second
    clock.now += 1_000;
    await expect(enforceRateLimit(leases, "k", obj.source, tight)).resolves.toMatchObject({ allowed: true });
    expect(obj.calls.at(-1)).toMatchObject({ want: 1, granted: 1 });
    await expect(enforceRateLimit(leases, "k", obj.source, tight)).rejects.toBeInstanceOf(RateLimitedError);
  });

  it("concurrent misses give an expired lease's leftover back once", async () => {
    const slow = { requestsPerMinute: 60, burst: 120 };
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const a = new RateLeases(16, () => clock.now);
    const b = new RateLeases(16, () => clock.now);
    for (let i = 0; i < 1 + 2 + 4 + 2; i++) await a.take("k", slow, obj.source); // a lease of 8, two spent: six held
    let drained = 0;
    for (let i = 0; i < 200; i++) if ((await b.take("k", slow, obj.source)).allowed) drained++;
    expect(drained).toBe(120 - 15); // b emptied what a did not hold
    clock.now += 2_000; // two more tokens; a's six expire
    const rs = await Promise.all([0, 1, 2].map(() => a.take("k", slow, obj.source)));
    expect(obj.calls.slice(-3).map((c) => c.returned).sort()).toEqual([0, 0, 6]);
    // 6 returned + 2 refilled: the object had 8 tokens, and holds 8 less what the three calls were granted.
    expect(rs.every((r) => r.allowed)).toBe(true);
    expect(obj.level()).toBe(8 - obj.calls.slice(-3).reduce((n, c) => n + c.granted, 0));
  });

  it("a lease granted under another config is not spent under this one", async () => {
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const leases = new RateLeases(16, () => clock.now);
    for (let i = 0; i < 4; i++) await leases.take("k", cfg, obj.source); // a lease of 4 held (three left... then one)
    const calls = obj.calls.length;
    await leases.take("k", { requestsPerMinute: 600, burst: 100 }, obj.source);
    expect(obj.calls.length).toBe(calls + 1);
  });

  it("leases under another config never refuse a take under the new one (the reliability-auth failure)", async () => {
    // The workers test's first file-level describe fails authentication many times under a large
    // auth bucket, the next runs with the default auth bucket (burst 10) from the same network.
    const before = { requestsPerMinute: 6_000, burst: 1_000 };
    const after = { requestsPerMinute: 30, burst: 10 };
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const same = new RateLeases(16, () => clock.now);
    const gone = new RateLeases(16, () => clock.now); // an isolate that leaves with its lease
    for (let i = 0; i < 60; i++) {
      expect((await same.take("auth:net:a", before, obj.source)).allowed).toBe(true);
      expect((await gone.take("auth:net:a", before, obj.source)).allowed).toBe(true);
    }
    // The bucket still holds hundreds of requests: under the new config it is full (10), as a fresh one.
    const fresh = new RateLeases(16, () => clock.now);
    for (const leases of [same, fresh]) expect(await leases.take("auth:net:a", after, obj.source)).toMatchObject({ allowed: true, remaining: 10 - 1 - (leases === same ? 0 : 1) });
    let allowed = 2;
    for (let i = 0; i < 20; i++) if ((await fresh.take("auth:net:a", after, obj.source)).allowed) allowed++;
    expect(allowed).toBe(10); // and never more than the new burst
  });

  it("while one call leases, concurrent misses take one token each (nothing granted only to be forfeit)", async () => {
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const leases = new RateLeases(16, () => clock.now);
    for (let i = 0; i < 1 + 2 + 4; i++) await leases.take("k", cfg, obj.source); // leases of 1, 2, 4: all spent
    const rs = await Promise.all([0, 1, 2, 3].map(() => leases.take("k", cfg, obj.source)));
    expect(rs.every((r) => r.allowed)).toBe(true);
    expect(obj.calls.slice(-4).map((c) => c.want)).toEqual([8, 1, 1, 1]);
    // The lease of eight is whole in the isolate: seven more requests need no call.
    for (let i = 0; i < 7; i++) await leases.take("k", cfg, obj.source);
    expect(obj.calls.length).toBe(3 + 4);
  });

  it("headers refill by the isolate's own clock, whatever the object's", async () => {
    const clock = { now: 100_000 };
    const behind = { now: 0 }; // the object's clock runs 100 s behind the isolate's
    let state: BucketState | null = null;
    const source: LeaseSource = { lease: async (c, want, back) => takeLease((state ??= fullBucket(c, behind.now)), c, behind.now, want, back) };
    const leases = new RateLeases(16, () => clock.now);
    await leases.take("k", cfg, () => source);
    await leases.take("k", cfg, () => source); // a lease of two: one left
    expect(await leases.take("k", cfg, () => source)).toMatchObject({ allowed: true, remaining: 117, resetMs: 300 });
  });

  it("headers never count refill past what the object refills to while other isolates hold leases", async () => {
    const clock = { now: 0 };
    const obj = bucketObject(clock);
    const other = new RateLeases(16, () => clock.now);
    for (let i = 0; i < 16; i++) await other.take("k", cfg, obj.source); // leases 1, 2, 4, 8, then 15: 14 held there
    const leases = new RateLeases(16, () => clock.now);
    await leases.take("k", cfg, obj.source);
    await leases.take("k", cfg, obj.source); // a lease of two: one left, one held; the object's level 87, room 120 - 14 - 1
    clock.now = 1_900; // 19 refilled by this clock, but the object refills only to 105 while those leases are held
    expect(await leases.take("k", cfg, obj.source)).toMatchObject({ allowed: true, remaining: 105 });
  });

  it("the book holds at most `capacity` leases and no long names", async () => {
    const clock = { now: 0 };
    const leases = new RateLeases(4, () => clock.now);
    for (let i = 0; i < 10; i++) await leases.take(`chat:net:${i}`, cfg, bucketObject(clock).source);
    expect(leases.size).toBe(4);
    const long = "x".repeat(MAX_RATE_LEASE_NAME_CHARS + 1);
    const obj = bucketObject(clock);
    await leases.take(long, cfg, obj.source);
    await leases.take(long, cfg, obj.source);
    expect(obj.calls.map((c) => c.want)).toEqual([1, 1]); // never leased: one call per request
    expect(leases.size).toBe(4);
  });
});

/**
 * Interleaved takes on N isolates (some concurrent) with the clock moving: within any window
 * [a, b] the requests admitted across all isolates never exceed burst + rate × (b − a), the
 * token bucket's own bound, whatever the leases.
 */
describe("never more than the bucket across isolates", () => {
  /** Requests of one bucket's isolates, each admission's time recorded; `worst` is the largest excess over burst + rate × window. */
  function ledger(cfg: BucketRate, clock: { now: number }) {
    const obj = bucketObject(clock);
    const admitted: number[] = [];
    const take = async (iso: RateLeases) => {
      const r = await iso.take("chat:key:x", cfg, obj.source);
      if (r.allowed) admitted.push(clock.now);
      return r.allowed;
    };
    const worst = () => {
      let w = -Infinity;
      for (let i = 0; i < admitted.length; i++) for (let j = i; j < admitted.length; j++) w = Math.max(w, j - i + 1 - (cfg.burst + (admitted[j]! - admitted[i]!) * (cfg.requestsPerMinute / 60_000)));
      return w;
    };
    return { take, worst, admitted, obj };
  }
  /** Grows an isolate's next lease to the largest (leases of 1, 2, 4 and 8 spent, a minute apart). */
  async function grown(take: (iso: RateLeases) => Promise<boolean>, iso: RateLeases, clock: { now: number }) {
    for (let i = 0; i < 15; i++) await take(iso);
    clock.now += 60_000;
  }

  it("a hold that expired between calls held the bucket down until its window ended (no refill over it)", async () => {
    // Isolates each take a 15-token lease 10 ms before a 3 s window ends and spend the leftovers at
    // their expiry; nobody calls the object until the counts have rolled off, then a fresh isolate
    // drains it. Refilling the whole gap up to the burst admitted up to 148 where 130.1 is the bound.
    const cfg = { requestsPerMinute: 600, burst: 120 };
    for (const n of [1, 2, 3]) {
      const clock = { now: 1_000 };
      const l = ledger(cfg, clock);
      const isolates = Array.from({ length: n }, () => new RateLeases(16, () => clock.now));
      for (const iso of isolates) await grown(l.take, iso, clock);
      const t0 = (Math.floor(clock.now / 3_000) + 20) * 3_000 - 10;
      clock.now = t0;
      l.admitted.length = 0;
      for (const iso of isolates) await l.take(iso);
      clock.now = t0 + 1_999;
      for (const iso of isolates) for (let i = 0; i < 14; i++) expect(await l.take(iso)).toBe(true);
      clock.now = (Math.floor(t0 / 3_000) + 2) * 3_000;
      const fresh = new RateLeases(16, () => clock.now);
      while (await l.take(fresh));
      expect(l.worst()).toBeLessThanOrEqual(1e-9);
    }
  });

  it("a settlement refused by an empty bucket is not made again by the next call (it would release another isolate's hold)", async () => {
    const cfg = { requestsPerMinute: 6_000, burst: 120 };
    const clock = { now: 1_000 };
    const l = ledger(cfg, clock);
    const [a, b] = [new RateLeases(16, () => clock.now), new RateLeases(16, () => clock.now)];
    for (const iso of [a, b]) await grown(l.take, iso, clock);
    clock.now = (Math.floor(clock.now / 3_000) + 1) * 3_000 + 10;
    l.admitted.length = 0;
    await l.take(b);
    await l.take(a);
    for (let i = 0; i < 14; i++) await l.take(a);
    const drain = new RateLeases(16, () => clock.now);
    while (await l.take(drain));
    expect(await l.take(a)).toBe(false); // settles a's 14 and is refused
    expect(await l.take(a)).toBe(false); // must not settle them again (b's 14 are still held)
    clock.now += 1_900;
    for (let i = 0; i < 14; i++) await l.take(b);
    const late = new RateLeases(16, () => clock.now);
    while (await l.take(late));
    expect(l.worst()).toBeLessThanOrEqual(1e-9);
  });

  it("holds for random interleavings", async () => {
    const step = fc.record({ isolate: fc.nat({ max: 7 }), dt: fc.oneof(fc.constant(0), fc.nat({ max: 50 }), fc.nat({ max: 3_000 })), together: fc.integer({ min: 1, max: 4 }) });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 8 }), fc.constantFrom<BucketRate>({ requestsPerMinute: 600, burst: 120 }, { requestsPerMinute: 60, burst: 40 }, { requestsPerMinute: 6_000, burst: 16 }), fc.array(step, { minLength: 1, maxLength: 120 }), async (n, cfg, steps) => {
        const clock = { now: 1_000 };
        const obj = bucketObject(clock);
        const isolates = Array.from({ length: n }, () => new RateLeases(8, () => clock.now));
        const admitted: number[] = [];
        for (const s of steps) {
          clock.now += s.dt;
          const rs = await Promise.all(Array.from({ length: s.together }, () => isolates[s.isolate % n]!.take("chat:key:x", cfg, obj.source)));
          for (const r of rs) if (r.allowed) admitted.push(clock.now);
        }
        const perMs = cfg.requestsPerMinute / 60_000;
        for (let i = 0; i < admitted.length; i++)
          for (let j = i; j < admitted.length; j++) expect(j - i + 1).toBeLessThanOrEqual(cfg.burst + (admitted[j]! - admitted[i]!) * perMs + 1e-9);
      }),
      { numRuns: 1000 },
    );
  });

  /**
   * The same bound under what a client and the platform can do between calls: idle gaps long
   * enough for every hold to expire and the bucket to refill (leftovers returned long after their
   * lease expired), runs of up to 40 requests per step, and object answers that arrive late (the
   * object decides at the call, the isolate hears 1.1 to 4 s later, while its other requests go on).
   * A request is admitted when its token was decided: by the object at the call, or by the isolate
   * spending its lease. Fixed seeds (counterexamples found on earlier versions) and a random one.
   */
  const cfgs: BucketRate[] = [{ requestsPerMinute: 600, burst: 120 }, { requestsPerMinute: 60, burst: 40 }, { requestsPerMinute: 6_000, burst: 16 }];
  const busyStep = fc.record({
    isolate: fc.nat({ max: 7 }),
    dt: fc.oneof(fc.constant(0), fc.nat({ max: 50 }), fc.nat({ max: 3_000 }), fc.constant(60_000)),
    together: fc.integer({ min: 1, max: 4 }),
    seq: fc.integer({ min: 1, max: 40 }),
    late: fc.constantFrom(0, 0, 1_100, 2_500, 4_000),
  });
  const busyProperty = fc.asyncProperty(fc.integer({ min: 1, max: 8 }), fc.nat({ max: cfgs.length - 1 }), fc.array(busyStep, { minLength: 1, maxLength: 40 }), async (n, c, steps) => {
    const cfg = cfgs[c]!;
    const clock = { now: 1_000 };
    const object = lateLeaseObject(clock);
    const isolates = Array.from({ length: n }, () => new RateLeases(8, () => clock.now));
    const admitted: number[] = [];
    for (const s of steps) {
      clock.now += s.dt;
      await object.deliver(clock.now);
      object.late = s.late;
      for (let k = 0; k < s.seq; k++) {
        for (let j = 0; j < s.together; j++) object.take(isolates[s.isolate % n]!, cfg, admitted);
        await object.flush();
      }
    }
    await object.deliver(Infinity);
    // Sorted by time, the fullest window ending at j starts at the i <= j maximising rate x t_i - i.
    admitted.sort((a, b) => a - b);
    const perMs = cfg.requestsPerMinute / 60_000;
    let best = -Infinity;
    for (let j = 0; j < admitted.length; j++) {
      best = Math.max(best, admitted[j]! * perMs - j);
      expect(j + 1 - admitted[j]! * perMs + best).toBeLessThanOrEqual(cfg.burst + 1e-9);
    }
  });

  const s = (isolate: number, dt: number, seq: number, together = 1, late = 0) => ({ isolate, dt, together, seq, late });
  /** Counterexamples found on earlier versions, checked first: a leftover credited after its hold expired (566559e), a lease settled before the refill. */
  const known: [number, number, ReturnType<typeof s>[]][] = [
    [2, 0, [s(0, 60_000, 8), s(1, 60_000, 13, 2), s(0, 0, 11), s(0, 0, 31, 2), s(0, 0, 22), s(0, 60_000, 1)]],
    [1, 2, [s(0, 60_000, 8), s(0, 90, 17)]],
  ];

  it.each([1, 42, 566_559, 1_476, undefined])("holds with idle gaps, runs of requests and late answers (seed %s)", async (seed) => {
    await fc.assert(busyProperty, { numRuns: seed === undefined ? 150 : 60, examples: seed === undefined ? known : [], ...(seed === undefined ? {} : { seed }) });
  });
});
