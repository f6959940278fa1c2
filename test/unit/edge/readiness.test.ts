import { describe, expect, it } from "vitest";
import { poolReady, readinessResponse, type ReadinessRow } from "../../../src/edge/readiness.ts";

const row = (over: Partial<ReadinessRow> = {}): ReadinessRow => ({ status: "up", synced: true, quarantined: false, ...over });

describe("readiness", () => {
  it("a pool is ready only with a worker that is up, synced and not quarantined", () => {
    expect(poolReady([])).toBe(false);
    expect(poolReady([row({ synced: false })])).toBe(false);
    expect(poolReady([row({ status: "down" })])).toBe(false);
    expect(poolReady([row({ status: "draining" })])).toBe(false);
    expect(poolReady([row({ quarantined: true })])).toBe(false);
    expect(poolReady([row({ synced: false }), row()])).toBe(true);
  });

  it("503 naming no pool until every pool is ready, then 200", async () => {
    const pools: Record<string, ReadinessRow[]> = { a: [row()], b: [] };
    const waiting = await readinessResponse(["a", "b"], async (m) => pools[m]!);
    expect(waiting.status).toBe(503);
    expect(waiting.headers.get("cache-control")).toBe("no-store");
    expect(await waiting.json()).toEqual({ status: "not_ready", poolsWithoutWorkers: 1, pools: 2 });
    pools.b = [row()];
    const ready = await readinessResponse(["a", "b"], async (m) => pools[m]!);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready" });
  });
});
