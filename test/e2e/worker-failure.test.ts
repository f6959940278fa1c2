/**
 * A simulated worker is SIGKILLed while requests are in flight through the edge:
 * - non-streaming requests (and streams that had not yet produced output) are retried on the
 *   other worker and succeed — nothing the client had not started receiving is lost;
 * - streams already producing output end with an OpenAI error event and [DONE], never a hang;
 * - the index drops the dead worker's blocks and later requests all go to the survivor.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { waitUntil } from "./reliability-helpers.ts";

let fleet: Fleet;

beforeAll(async () => {
  // h100-8b timing: ~14 ms per output token, so requests stay in flight long enough to be cut.
  fleet = await startFleet({ workers: 2, timingPreset: "h100-8b", log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

interface Outcome {
  kind: "nonstream" | "stream";
  status: number;
  worker: string | null;
  ok: boolean;
  /** Stream only: output had begun before the stream ended with an error event. */
  cutMidStream: boolean;
  attempts: number;
}

async function one(i: number, stream: boolean, model: string, edge: string): Promise<Outcome> {
  const body = { model, messages: [{ role: "user", content: `Request ${i}: ${"tell me about routing ".repeat(40)}` }], max_tokens: 40, stream, ignore_eos: true };
  const r = await fetch(`${edge}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const worker = r.headers.get("x-kvedge-worker");
  const attempts = Number(r.headers.get("x-kvedge-attempts") ?? "1");
  if (!stream) {
    const j = (await r.json()) as { choices?: { message: { content: string } }[] };
    return { kind: "nonstream", status: r.status, worker, ok: r.status === 200 && !!j.choices?.[0], cutMidStream: false, attempts };
  }
  const text = await r.text();
  const sawContent = /"delta":\{[^}]*"content":"[^"]+/.test(text);
  const sawError = text.includes('"error"');
  expect(text.trimEnd().endsWith("data: [DONE]"), "every stream terminates with [DONE]").toBe(true);
  return { kind: "stream", status: r.status, worker, ok: r.status === 200 && !sawError, cutMidStream: sawError && sawContent, attempts };
}

describe("worker killed mid-run", () => {
  it("retries what had not started, ends started streams cleanly, and drops the dead worker", async () => {
    const outcomes: Outcome[] = [];
    let i = 0;
    let stop = false;
    const loop = async (stream: boolean) => {
      while (!stop) outcomes.push(await one(i++, stream, fleet.model, fleet.edgeUrl));
    };
    const loops = [loop(false), loop(false), loop(true), loop(true)];
    await new Promise((r) => setTimeout(r, 1500));
    await fleet.killWorker(0);
    await new Promise((r) => setTimeout(r, 2500));
    stop = true;
    await Promise.all(loops);

    // Nothing that had not started streaming was lost.
    for (const o of outcomes) {
      if (o.kind === "nonstream") expect(o, JSON.stringify(o)).toMatchObject({ ok: true });
      else expect(o.ok || o.cutMidStream, JSON.stringify(o)).toBe(true);
    }
    expect(outcomes.length).toBeGreaterThan(8);

    // The relay reports the worker down (its publisher gone, or two missed health checks) over its
    // own connection, asynchronously: wait for it (bounded), then check what the index holds.
    type Row = { workerId: string; status: string; blocks: number };
    let dead: Row | undefined;
    await waitUntil(
      async () => {
        const workers = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: Row[] };
        dead = workers.workers.find((w) => w.workerId === "w1");
        return dead?.status === "down" && dead.blocks === 0;
      },
      15_000,
      () => JSON.stringify(dead),
      100,
    );
    expect(dead!.status).toBe("down");
    expect(dead!.blocks).toBe(0);

    const after = await Promise.all(Array.from({ length: 6 }, (_, k) => one(10_000 + k, k % 2 === 0, fleet.model, fleet.edgeUrl)));
    for (const o of after) expect(o).toMatchObject({ ok: true, worker: "w2" });
    const retried = outcomes.filter((o) => o.attempts > 1).length;
    console.log(`e2e worker kill: ${outcomes.length} requests during the run, ${retried} retried on the survivor, ${outcomes.filter((o) => o.cutMidStream).length} streams cut mid-output`);
  });
});
