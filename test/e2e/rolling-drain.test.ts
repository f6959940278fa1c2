/**
 * A rolling restart under load loses nothing: each worker in turn is drained through the admin API
 * (POST /admin/workers/<id>/drain), waited for until its running requests have finished, restarted
 * (a new life, which joins the pool up), and waited for until synced, while clients keep sending
 * streamed and unstreamed requests. Every request succeeds on its first attempt: none is sent to a
 * draining worker, none is cut by the restart.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet;

beforeAll(async () => {
  // h100-8b timing (~14 ms per output token): requests are in flight when each drain starts.
  fleet = await startFleet({ workers: 3, timingPreset: "h100-8b", log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

interface Outcome {
  status: number;
  ok: boolean;
  worker: string | null;
  attempts: number;
}

async function one(i: number, stream: boolean): Promise<Outcome> {
  const body = { model: fleet.model, messages: [{ role: "user", content: `Drain ${i}: ${"rolling restarts keep every request ".repeat(20)}` }], max_tokens: 30, stream, ignore_eos: true };
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${fleet.adminToken}` },
    body: JSON.stringify(body),
  });
  const worker = r.headers.get("x-kvedge-worker");
  const attempts = Number(r.headers.get("x-kvedge-attempts") ?? "0");
  const text = await r.text();
  const ok = r.status === 200 && (stream ? text.trimEnd().endsWith("data: [DONE]") && !text.includes('"error"') : (JSON.parse(text) as { choices?: unknown[] }).choices?.length === 1);
  return { status: r.status, ok, worker, attempts };
}

interface Row {
  workerId: string;
  status: string;
  synced: boolean;
  activeRequests: number;
}

async function row(workerId: string): Promise<Row> {
  const j = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: Row[] };
  return j.workers.find((w) => w.workerId === workerId)!;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("rolling drain", () => {
  it("drains and restarts every worker under load with 0 failed requests", async () => {
    const outcomes: Outcome[] = [];
    const sentWhileDraining: { worker: string; at: number }[] = [];
    let draining: string | null = null;
    let i = 0;
    let stop = false;
    const loop = async (stream: boolean) => {
      while (!stop) {
        const startedWhile = draining;
        const o = await one(i++, stream);
        outcomes.push(o);
        if (startedWhile !== null && o.worker === startedWhile) sentWhileDraining.push({ worker: o.worker, at: i });
      }
    };
    const loops = [loop(false), loop(false), loop(true), loop(true), loop(false), loop(true)];
    await new Promise((r) => setTimeout(r, 1000));
    for (let k = 0; k < fleet.workers.length; k++) {
      const id = `w${k + 1}`;
      const res = await fetch(`${fleet.edgeUrl}/admin/workers/${id}/drain?model=${encodeURIComponent(fleet.model)}`, { method: "POST", headers: { authorization: `Bearer ${fleet.adminToken}` } });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { worker: Row }).worker).toMatchObject({ workerId: id, status: "draining" });
      draining = id;
      await until(`${id}'s running requests to finish`, async () => (await row(id)).activeRequests === 0);
      // The drain window ends with the old process: the restarted worker is a new life and is up
      // as soon as its relay says hello, which can be before restartWorker returns.
      draining = null;
      await fleet.restartWorker(k, 200);
      await until(`${id} to rejoin`, async () => {
        const r = await row(id);
        return r.status === "up" && r.synced;
      });
      await new Promise((r) => setTimeout(r, 500));
    }
    stop = true;
    await Promise.all(loops);

    const failed = outcomes.filter((o) => !o.ok);
    expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
    expect(outcomes.every((o) => o.attempts === 1)).toBe(true);
    expect(sentWhileDraining).toEqual([]);
    // Every worker served again after its restart.
    const tail = await Promise.all(Array.from({ length: 12 }, (_, k) => one(100_000 + k, false)));
    expect(tail.every((o) => o.ok)).toBe(true);
    expect(outcomes.length).toBeGreaterThan(30);
    console.log(`e2e rolling drain: ${outcomes.length} requests while ${fleet.workers.length} workers were drained and restarted, 0 failed`);
  });
});
