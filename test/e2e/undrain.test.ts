/**
 * Undrain on the local fleet: an operator puts a drained worker back without restarting it
 * (POST /admin/workers/<id>/undrain), and it serves again; an up worker is left up, an unknown one
 * is 404, and the route is the admin token's only.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

function adminPost(path: string, token = fleet.adminToken): Promise<Response> {
  return fetch(`${fleet.edgeUrl}${path}?model=${encodeURIComponent(fleet.model)}`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
}

/** The workers that served `count` distinct chat requests. */
async function servedBy(count: number): Promise<Set<string>> {
  const workers = new Set<string>();
  for (let i = 0; i < count; i++) {
    const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: `Request ${i} ${Math.random()}: ${simOutputMarker("ok")}` }], max_tokens: 5 }),
    });
    expect(r.status).toBe(200);
    workers.add(r.headers.get("x-kvedge-worker")!);
    await r.text();
  }
  return workers;
}

describe("undrain", () => {
  it("a drained worker is put back without a restart and serves again", async () => {
    const drained = await adminPost("/admin/workers/w1/drain");
    expect(((await drained.json()) as { worker: { status: string } }).worker.status).toBe("draining");
    expect(await servedBy(6)).toEqual(new Set(["w2"]));

    const back = await adminPost("/admin/workers/w1/undrain");
    expect(back.status).toBe(200);
    expect(((await back.json()) as { worker: { workerId: string; status: string } }).worker).toMatchObject({ workerId: "w1", status: "up" });
    // With the other drained, every request goes to the one put back.
    await adminPost("/admin/workers/w2/drain");
    expect(await servedBy(4)).toEqual(new Set(["w1"]));
    await adminPost("/admin/workers/w2/undrain");
  });

  it("an up worker stays up; an unknown worker is 404; without the admin token 401", async () => {
    const up = await adminPost("/admin/workers/w2/undrain");
    expect(((await up.json()) as { worker: { status: string } }).worker.status).toBe("up");
    const unknown = await adminPost("/admin/workers/no-such-worker/undrain");
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("worker_not_found");
    expect((await adminPost("/admin/workers/w1/undrain", "not-the-admin-token-000")).status).toBe(401);
  });
});
