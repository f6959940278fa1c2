import { beforeAll, describe, expect, it } from "vitest";
import { initHashing } from "../../../src/util/hash.ts";
import { PagedRadixCache } from "../../../services/sglang-sim/radix-cache.ts";
import { TIMING_PRESETS, encodeItemMs, prefillChunkMs, COST_TABLES, type CostTable, type MediaCostItem, type Timing } from "../../../services/sglang-sim/timing.ts";
import { EventLoop } from "../../../bench/lib/event-loop.mjs";
import { CalibratedWorker, LinearWorker } from "../../../bench/lib/worker-model.mjs";

// The routing replay's workers charge a prompt's vision-encoder time with its prefill, by the
// simulator's rule (timing.ts encoderMs): in the first prefill batch of a request whose media reaches
// past its radix match, nothing once the media is in the cached prefix.
const PAGE = 16;
// No committed table charges the tower now (the H100 run timed a launch-bound per-window loop, which
// derive.mjs leaves out), so the rule runs on the H100 table plus a tower fit of the test's own (the
// left-out fit's figures), registered under a name of its own.
const table: CostTable = { ...COST_TABLES["h100-qwen2_5-vl-7b"], vision: { baseMs: 38.5, perThousandTokensMs: 95, perMillionTokenSliceTokensMs: 1 } };
(COST_TABLES as Record<string, CostTable>)["test-h100-with-tower"] = table;
const t = { ...TIMING_PRESETS["h100-7b"], calibration: "test-h100-with-tower" } as unknown as Timing;
const image: MediaCostItem = { modality: "image", end: 1_100, padCount: 1_024, sliceTokens: 1_024 };
const prompt = Array.from({ length: 1_200 }, (_, i) => 10 + i);

type Req = { at: number; tokens: number[]; output: number[]; media?: MediaCostItem[] | undefined };

function replay(Worker: typeof CalibratedWorker | typeof LinearWorker, reqs: Req[]): number[] {
  const loop = new EventLoop();
  const worker = new Worker({ cache: new PagedRadixCache(PAGE), capacityTokens: 100_000, timing: t, pageSize: PAGE, schedule: loop.schedule });
  const ttft: number[] = [];
  loop.run(reqs, (req, now) => {
    const r = { ttft: NaN };
    worker.submit({ req, r, onPrefilled: () => {}, onFinished: () => ttft.push(r.ttft) }, now);
  });
  return ttft;
}

describe("routing-replay workers: vision-encoder time", () => {
  beforeAll(initHashing);
  const first = { at: 0, tokens: prompt, output: [1, 2], media: [image] };
  // Long after the first finished: the same prompt again, its image now inside the cached prefix.
  const again = { ...first, at: 60_000 };

  it("calibrated worker: the first batch pays the encoder, a request whose media is cached does not", () => {
    const [a, b] = replay(CalibratedWorker, [first, again]);
    expect(a).toBeCloseTo(prefillChunkMs(table, 1_200, 0) + encodeItemMs(t, 1_024, 1_024), 6);
    expect(encodeItemMs(t, 1_024, 1_024)).toBeGreaterThan(10);
    // matched ids[:-1] to whole pages: 1 184 cached, 16 prefilled, no encoder
    expect(b).toBeCloseTo(prefillChunkMs(table, 16, 1_184), 6);
    const [plain] = replay(CalibratedWorker, [{ ...first, media: undefined }]);
    expect(plain).toBeCloseTo(prefillChunkMs(table, 1_200, 0), 6);
  });

  it("linear-lane worker: the same rule on its serial lane", () => {
    const [a, b] = replay(LinearWorker, [first, again]);
    const [plainA] = replay(LinearWorker, [{ ...first, media: undefined }]);
    expect(a! - plainA!).toBeCloseTo(encodeItemMs(t, 1_024, 1_024), 6);
    const [plainB] = replay(LinearWorker, [{ ...first, media: undefined }, { ...again, media: undefined }]).slice(1);
    expect(b).toBeCloseTo(plainB!, 6);
  });
});
