/**
 * Admission on the local fleet: simulated workers with a small KV pool (--capacity-tokens, which
 * their relays report as kvCapacityTokens) and a burst of distinct prompts well past what they hold.
 * Requests past the bound wait at the edge and are served as workers free room; those that cannot
 * be served within the pool's maxWaitMs get 429 with Retry-After in the OpenAI error shape. No
 * request fails any other way, none is served twice, and the signals show both.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({
    workers: 2,
    timingPreset: "h100-8b",
    workerArgs: [
      ["--capacity-tokens", "1024"],
      ["--capacity-tokens", "1024"],
    ],
    vars: { KVEDGE_ROUTING: JSON.stringify({ admission: { maxWaitMs: 1500 } }) },
    log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined,
  });
});
afterAll(async () => {
  await fleet?.stop();
});

/** A burst on another route: answered 200 or 429 (pool_overloaded with Retry-After), nothing else; the admission counters move by exactly that. */
async function burstThrough(path: string, bodyOf: (i: number) => Record<string, unknown>) {
  const counters = async () => {
    const text = await (await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: `Bearer ${fleet.adminToken}` } })).text();
    const sum = (name: string, labels: string) => Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
    const m = `model="${fleet.model}",band="default"`;
    return { queued: sum("kvedge_admission_admitted_total", `${m},wait="queued"`), refused: sum("kvedge_admission_refused_total", `${m},reason="deadline"`) };
  };
  const before = await counters();
  const results = await Promise.all(
    Array.from({ length: 60 }, async (_, i) => {
      const r = await fetch(`${fleet.edgeUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(bodyOf(i)) });
      return { status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text() };
    }),
  );
  const after = await counters();
  expect(results.filter((r) => r.status !== 200 && r.status !== 429), JSON.stringify(results.find((r) => r.status !== 200 && r.status !== 429))).toEqual([]);
  const refused = results.filter((r) => r.status === 429);
  expect(refused.length).toBeGreaterThan(0);
  for (const r of refused) {
    expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    expect((JSON.parse(r.body) as { error: unknown }).error).toMatchObject({ type: "rate_limit_error", code: "pool_overloaded" });
  }
  expect(after.queued).toBeGreaterThan(before.queued);
  expect(after.refused - before.refused).toBe(refused.length);
  return results;
}

async function one(i: number): Promise<{ status: number; retryAfter: string | null; body: string; requestId: string | null }> {
  const body = { model: fleet.model, messages: [{ role: "user", content: `${i} ${"admission keeps the workers' queues short ".repeat(40)}` }], max_tokens: 30, ignore_eos: true };
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text(), requestId: r.headers.get("x-request-id") };
}

describe("admission on the local fleet", () => {
  it("queues past the workers' KV bound, serves in turn, and refuses past the wait with 429 and Retry-After", async () => {
    const started = Date.now();
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => one(i)));
    const elapsed = Date.now() - started;
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 429);
    expect(results.filter((r) => r.status !== 200 && r.status !== 429), JSON.stringify(results.find((r) => r.status !== 200 && r.status !== 429))).toEqual([]);
    expect(ok.length).toBeGreaterThan(6);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of ok) expect((JSON.parse(r.body) as { choices: unknown[] }).choices).toHaveLength(1);
    for (const r of refused) {
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
      expect((JSON.parse(r.body) as { error: unknown }).error).toMatchObject({ type: "rate_limit_error", code: "pool_overloaded", param: null });
    }
    expect(new Set(ok.map((r) => r.requestId)).size).toBe(ok.length);

    const text = await (await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: `Bearer ${fleet.adminToken}` } })).text();
    const sample = (name: string, labels: string) => Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
    const m = `model="${fleet.model}",band="default"`;
    const immediate = sample("kvedge_admission_admitted_total", `${m},wait="immediate"`);
    const queued = sample("kvedge_admission_admitted_total", `${m},wait="queued"`);
    expect(immediate + queued).toBe(ok.length);
    expect(queued).toBeGreaterThan(0);
    expect(sample("kvedge_admission_refused_total", `${m},reason="deadline"`)).toBe(refused.length);
    expect(sample("kvedge_admission_queue_depth", m)).toBe(0);
    // The workers were never handed more than their KV holds: each ran at most a few at once.
    expect(immediate).toBeLessThanOrEqual(12);

    // The pool drains: a request now is served at once.
    expect((await one(1000)).status).toBe(200);
    console.log(`e2e admission: 60 requests in ${elapsed} ms: ${immediate} at once, ${queued} after waiting, ${refused.length} refused (429)`);
  });

  it("/v1/completions and /v1/responses wait in the same queue and are refused the same way", async () => {
    // Each answer runs to max tokens (the simulator's scripted output is longer), as ignore_eos makes the chat burst's.
    const text = (i: number) => `${i} ${"admission keeps the workers' queues short ".repeat(40)} ${simOutputMarker("word ".repeat(60))}`;
    const completions = await burstThrough("/v1/completions", (i) => ({ model: fleet.model, prompt: text(i), max_tokens: 30 }));
    for (const r of completions.filter((x) => x.status === 200)) expect((JSON.parse(r.body) as { object: string }).object).toBe("text_completion");
    const responses = await burstThrough("/v1/responses", (i) => ({ model: fleet.model, input: text(i + 100), max_output_tokens: 30, store: false }));
    for (const r of responses.filter((x) => x.status === 200)) expect((JSON.parse(r.body) as { object: string }).object).toBe("response");
  });
});
