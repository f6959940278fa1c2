import { beforeAll, describe, expect, it } from "vitest";
import { initHashing } from "../../../src/util/hash.ts";
import { PagedRadixCache } from "../../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS } from "../../../services/sglang-sim/timing.ts";
import { EventLoop } from "../../../bench/lib/event-loop.mjs";
import { CalibratedWorker } from "../../../bench/lib/worker-model.mjs";

// The routing replay's calibrated worker never holds more KV than its pool: cached radix tokens plus
// the started requests' reservations stay within capacity, as SGLang's PrefillAdder keeps them
// (schedule_policy.py, sgl-project/sglang@00550cd1); requests that do not fit wait in its queue.
const PAGE = 16;
const CAPACITY = 8_192;

type Req = { at: number; tokens: number[]; output: number[] };

describe("routing-replay calibrated worker: KV capacity", () => {
  beforeAll(initHashing);

  it("twelve distinct 2k-token prompts arriving together: cache + reservations never exceed the pool, all finish", () => {
    const loop = new EventLoop();
    const cache = new PagedRadixCache(PAGE);
    const worker = new CalibratedWorker({ cache, capacityTokens: CAPACITY, timing: TIMING_PRESETS["h200-7b"], pageSize: PAGE, schedule: loop.schedule });
    const w = worker as unknown as { reserved: number };
    let peak = 0;
    const check = () => (peak = Math.max(peak, cache.totalTokens + w.reserved, cache.protectedTokens + w.reserved));
    const reqs: Req[] = Array.from({ length: 12 }, (_, k) => ({ at: 0, tokens: Array.from({ length: 2_000 }, (_, i) => 1 + k * 10_000 + i), output: Array.from({ length: 64 }, (_, i) => 900_000 + i) }));
    const ttft: number[] = [];
    loop.run(reqs, (req, now) => {
      const r = { ttft: NaN };
      worker.submit({ req, r, onPrefilled: check, onFinished: () => ttft.push(r.ttft) }, now);
      check();
    });
    expect(ttft).toHaveLength(12);
    expect(peak).toBeLessThanOrEqual(CAPACITY);
    // Only three fit at once (3 × 2 064 ≤ 8 192 < 4 × 2 064): the later ones waited for KV, not for compute.
    expect(peak).toBeGreaterThan(3 * 2_000);
    expect(ttft[11]!).toBeGreaterThan(3 * ttft[0]!);
  });

  it("a request larger than the whole pool is refused, not admitted over capacity", () => {
    const loop = new EventLoop();
    const worker = new CalibratedWorker({ cache: new PagedRadixCache(PAGE), capacityTokens: CAPACITY, timing: TIMING_PRESETS["h200-7b"], pageSize: PAGE, schedule: loop.schedule });
    const big = { tokens: Array.from({ length: CAPACITY }, (_, i) => 1 + i), output: [1] };
    expect(() => worker.submit({ req: big, r: { ttft: NaN }, onPrefilled: () => {}, onFinished: () => {} }, 0)).toThrow(RangeError);
  });
});
