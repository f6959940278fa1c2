/**
 * The short CI variant of the edge heap soak (scripts/soak-heap.ts; the 50k-request run and its
 * curve are in docs/reliability.md): multi-turn load through the local edge, the isolate's V8 heap
 * read after a full GC through its inspector. Fails when the heap passes the stated bound (64 MB)
 * or a request fails.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { runHeapSoak } from "../../scripts/soak-heap.ts";

const REQUESTS = Number(process.env.KVEDGE_HEAP_REQUESTS ?? 1500);
const BOUND = 64 * 1024 * 1024;

let fleet: Fleet;
beforeAll(async () => {
  fleet = await startFleet({ workers: 2, timingPreset: "instant", inspector: true });
});
afterAll(async () => {
  await fleet?.stop();
});

describe("edge isolate heap", () => {
  it(`${REQUESTS} multi-turn requests: no errors, heap after GC under 64 MB`, async () => {
    const r = await runHeapSoak(fleet, { requests: REQUESTS, clients: 8, sampleEvery: 250 });
    const peak = r.peakHeap ?? NaN;
    console.log(`edge heap: ${JSON.stringify({ requests: r.requests, errors: r.errors, peakMb: +(peak / 1048576).toFixed(1), finalMb: +((r.finalHeap ?? NaN) / 1048576).toFixed(1) })}`);
    expect(r.errors).toBe(0);
    expect(r.samples.length).toBeGreaterThan(3);
    expect(peak).toBeLessThan(BOUND);
  });
});
