// A worker's prefill rate learned from its own prefills: the median of its last samples, counted
// from a minimum number on, each sample clamped, samples of an earlier life dropped.
import { describe, expect, it } from "vitest";
import { DEFAULT_PREFILL_RATE_LEARNING, PrefillRateLearner } from "../../../src/load/prefill-rate-learner.ts";

const P = { ...DEFAULT_PREFILL_RATE_LEARNING, window: 5, minSamples: 3 };

describe("PrefillRateLearner", () => {
  it("counts from minSamples on, as the median of the last window samples", () => {
    const l = new PrefillRateLearner(P);
    l.sample(0, 0, 20_000, 1_000);
    l.sample(0, 0, 30_000, 1_000);
    expect(l.rate(0)).toBeNull();
    l.sample(0, 0, 10_000, 100); // 100k tok/s: one fast outlier does not move the median
    expect(l.rate(0)).toBe(30_000);
    l.sample(0, 0, 2_000, 1_000); // a prefill that also waited (2k tok/s)
    expect(l.rate(0)).toBe(25_000);
    for (let i = 0; i < 5; i++) l.sample(0, 0, 8_000, 1_000);
    expect(l.rate(0)).toBe(8_000); // the window forgets the older samples
    expect(l.rate(1)).toBeNull(); // per slot
  });

  it("clamps each sample to the sane range and refuses too few tokens or no time", () => {
    const l = new PrefillRateLearner(P);
    for (let i = 0; i < 3; i++) l.sample(0, 0, 1_000_000, 1);
    expect(l.rate(0)).toBe(P.maxRate);
    for (let i = 0; i < 3; i++) l.sample(1, 0, 5_000, 600_000);
    expect(l.rate(1)).toBe(P.minRate);
    for (const [tokens, ms] of [[P.minTokens - 1, 10], [5_000, 0], [5_000, -3], [5_000, NaN]] as const) l.sample(2, 0, tokens, ms);
    expect(l.rate(2)).toBeNull();
  });

  it("qualifies a request whose worker had nothing (or little) counted ahead and enough tokens", () => {
    const l = new PrefillRateLearner(P);
    expect(l.qualifies(4_000, 0)).toBe(true);
    expect(l.qualifies(4_000, 500)).toBe(true); // 1/8 of its own tokens
    expect(l.qualifies(4_000, 501)).toBe(false);
    expect(l.qualifies(P.minTokens - 1, 0)).toBe(false);
  });

  it("a reset voids what was learned and the samples of the earlier life still on their way", () => {
    const l = new PrefillRateLearner(P);
    for (let i = 0; i < 3; i++) l.sample(0, 0, 20_000, 1_000);
    expect(l.rate(0)).toBe(20_000);
    const before = l.life(0);
    l.reset(0);
    expect(l.rate(0)).toBeNull();
    for (let i = 0; i < 3; i++) l.sample(0, before, 20_000, 1_000);
    expect(l.rate(0)).toBeNull();
    for (let i = 0; i < 3; i++) l.sample(0, l.life(0), 5_000, 1_000);
    expect(l.rate(0)).toBe(5_000);
  });
});
