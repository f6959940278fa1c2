import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { TIMING_PRESETS, decodeStepMs, prefillMs } from "../../../services/sglang-sim/timing.ts";

// The calibrated preset's scheduling, end to end over HTTP: a prefill that arrives while a request
// decodes runs first (SGLang schedules a new prefill batch before the next decode step), so the
// decoding request's latency includes it. The bounds are lower bounds taken from the cost model:
// a slow machine only makes latencies longer, and without the stall the decoding request finishes
// in well under the bound on any machine that runs the suite.
describe("simulated worker, calibrated timing (h200-7b)", () => {
  let w: SimulatedWorker;
  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "h200-7b", pageSize: 16, capacityTokens: 200_000, contextLength: 65_536 });
  });
  afterAll(async () => {
    await w.close();
  });

  const gen = (inputIds: number[], maxNew: number) =>
    fetch(`${w.url}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input_ids: inputIds, sampling_params: { max_new_tokens: maxNew, ignore_eos: true } }),
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as { meta_info: { e2e_latency: number } } }));

  it("stalls a decoding request while a long prefill runs", async () => {
    const t = TIMING_PRESETS["h200-7b"];
    const longPrefillMs = prefillMs(t, 16_384, 0); // two 8 192-token chunks
    expect(longPrefillMs).toBeGreaterThan(500);
    const decoding = gen(Array.from({ length: 64 }, (_, i) => 1000 + i), 60);
    await new Promise((r) => setTimeout(r, 60)); // A is decoding by now (its prefill is ~8 ms)
    const long = gen(Array.from({ length: 16_384 }, (_, i) => 5000 + (i % 90_000)), 1);
    const [a, b] = await Promise.all([decoding, long]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    const aloneMs = 60 * decodeStepMs(t, 2, 2 * 64);
    expect(aloneMs).toBeLessThan(600);
    expect(a.body.meta_info.e2e_latency * 1000).toBeGreaterThan(aloneMs + 0.8 * longPrefillMs);
    expect(b.body.meta_info.e2e_latency * 1000).toBeGreaterThan(0.9 * longPrefillMs);
  });
});
