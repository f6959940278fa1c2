/**
 * Readiness on the real local fleet (edge under Miniflare, simulated SGLang, relays):
 * - a fleet's start resolves (`npm start` prints "kvedge is up") only once every worker is
 *   registered and synced: /readyz is 200 then and the very first chat request succeeds;
 * - before any worker has registered, /healthz (liveness) answers 200 but /readyz answers 503, and
 *   turns 200 once a relay has synced its worker, after which the first chat request succeeds.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { waitUntil } from "./reliability-helpers.ts";

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.stop();
  fleet = null;
});

async function chat(f: Fleet): Promise<{ status: number; body: string }> {
  const r = await fetch(`${f.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: f.model, messages: [{ role: "user", content: "Hello! What is KV-cache-aware routing?" }], max_tokens: 8 }),
  });
  return { status: r.status, body: await r.text() };
}

const readyz = async (f: Fleet): Promise<Response> => fetch(`${f.edgeUrl}/readyz`);

describe("readiness", () => {
  it("once the fleet is up, /readyz is 200 and the first request succeeds", async () => {
    fleet = await startFleet({ workers: 2 });
    const r = await readyz(fleet);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ status: "ready" });
    const first = await chat(fleet);
    expect(first.status, first.body).toBe(200);
  });

  it("/readyz is 503 while no worker is registered and synced, then 200; the first request after it succeeds", async () => {
    fleet = await startFleet({ workers: 1, relays: false });
    expect((await fetch(`${fleet.edgeUrl}/healthz`)).status).toBe(200);
    const before = await readyz(fleet);
    expect(before.status).toBe(503);
    expect(await before.json()).toEqual({ status: "not_ready", poolsWithoutWorkers: 1, pools: 1 });
    // What /readyz keeps a client from: a request now finds no worker.
    expect((await chat(fleet)).status).toBeGreaterThanOrEqual(500);
    await fleet.startRelay(0);
    const f = fleet;
    await waitUntil(async () => (await readyz(f)).status === 200, 30_000, async () => `readyz ${(await readyz(f)).status}`, 50);
    const first = await chat(fleet);
    expect(first.status, first.body).toBe(200);
  });
});
