import { beforeAll, describe, expect, it } from "vitest";
import { initHashing } from "../../../src/util/hash.ts";
import { PagedRadixCache } from "../../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS, chunkSize } from "../../../services/sglang-sim/timing.ts";
import { EventLoop } from "../../../bench/lib/event-loop.mjs";
import { CalibratedWorker } from "../../../bench/lib/worker-model.mjs";

// What the routing replay's llm-d baseline reads from a calibrated worker, as SGLang reports it:
// KV in use = capacity − (free + evictable) (token_usage: locked cache, decoded output, finished
// chunks; not reservations nor the evictable cache) and the waiting queue (requests not yet in a
// prefill batch; num_queue_reqs).
const PAGE = 16;
const TIMING = TIMING_PRESETS["h200-7b"];
const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);

function worker(capacityTokens: number) {
  const loop = new EventLoop();
  const cache = new PagedRadixCache(PAGE);
  return { loop, cache, w: new CalibratedWorker({ cache, capacityTokens, timing: TIMING, pageSize: PAGE, schedule: loop.schedule }) };
}

describe("routing-replay calibrated worker: SGLang's load metrics", () => {
  beforeAll(initHashing);

  it("KV in use: the prompt once prefilled, plus each decoded token; nothing once finished though the cache keeps it", () => {
    const { loop, cache, w } = worker(200_000);
    const req = { at: 0, tokens: ids(2_000, 1), output: ids(6, 900_000) };
    const seen: number[] = [];
    let atFinish = NaN;
    loop.run([req], (r, now) => {
      w.submit(
        {
          req: r,
          r: { ttft: NaN },
          onPrefilled: (t) => {
            seen.push(w.kvUsedTokens());
            // Probe between the decode steps that follow.
            for (let k = 1; k <= 40; k++) loop.schedule(t + k * 2, () => seen.push(w.kvUsedTokens()));
          },
          onFinished: () => (atFinish = w.kvUsedTokens()),
        },
        now,
      );
    });
    expect(seen[0]).toBe(2_000);
    // Five decode steps after the first token (6 outputs): 2 000 … 2 005, in order.
    expect([...new Set(seen)].filter((x) => x > 0)).toEqual([2_000, 2_001, 2_002, 2_003, 2_004]);
    expect(atFinish).toBe(0);
    expect(cache.totalTokens).toBeGreaterThanOrEqual(2_000);
  });

  it("a prompt prefilled chunk by chunk counts its finished chunks", () => {
    const chunk = chunkSize(TIMING);
    const { loop, w } = worker(200_000);
    const req = { at: 0, tokens: ids(2 * chunk + 1_000, 1), output: ids(2, 900_000) };
    const before: number[] = [];
    let prefilled = false;
    const probe = (t: number) => {
      if (prefilled) return;
      before.push(w.kvUsedTokens());
      loop.schedule(t + 5, probe);
    };
    loop.run([req], (r, now) => {
      w.submit({ req: r, r: { ttft: NaN }, onPrefilled: () => (prefilled = true), onFinished: () => {} }, now);
      probe(now);
    });
    expect([...new Set(before)]).toEqual([0, chunk, 2 * chunk]);
  });

  it("waiting queue: requests that did not fit in the KV are queued, started ones are not", () => {
    const { loop, w } = worker(8_192);
    const reqs = Array.from({ length: 12 }, (_, k) => ({ at: 0, tokens: ids(2_000, 1 + k * 10_000), output: ids(64, 900_000) }));
    const queued: number[] = [];
    loop.run(reqs, (r, now) => {
      w.submit({ req: r, r: { ttft: NaN }, onPrefilled: () => {}, onFinished: () => queued.push(w.queuedRequests()) }, now);
      if (r === reqs[11]) queued.push(w.queuedRequests());
    });
    // The first arrival's batch held it alone: eleven wait for a batch. Then three fit at once
    // (3 × 2 064 ≤ 8 192 < 4 × 2 064): nine wait when the first finishes; the queue empties as they finish.
    expect(queued[0]).toBe(11);
    expect(queued[1]).toBe(9);
    expect(queued.at(-1)).toBe(0);
    expect(queued.slice(1).every((q, i) => q <= queued[i]!)).toBe(true);
  });
});
