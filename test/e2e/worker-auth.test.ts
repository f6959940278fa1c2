/**
 * The edge → worker credential on the local fleet (docs/security.md): every simulated worker runs
 * with its own SGLang --api-key, derived as the edge derives it from KVEDGE_WORKER_KEY_SECRET and the
 * worker's URL. The worker refuses anyone without it (401 on generation and info, /health open); the
 * edge's requests are served. An edge holding a different secret, so the wrong key for that worker,
 * is refused by the worker and its client gets a worker error, never an answer.
 */
import { afterEach, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.stop();
  fleet = null;
});

const log = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
const ask = (f: Fleet) =>
  fetch(`${f.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: f.model, max_tokens: 2, messages: [{ role: "user", content: "Hello." }] }) });

describe("edge → worker credential on the local fleet", () => {
  it("the worker refuses callers without its key and serves the edge, which holds it", async () => {
    fleet = await startFleet({ workers: 1, log });
    const w = fleet.workers[0]!;
    const generate = (headers: Record<string, string>) =>
      fetch(`${w.url}/generate`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ text: "hi", sampling_params: { max_new_tokens: 1 } }) });
    expect((await generate({})).status).toBe(401);
    expect((await generate({ authorization: "Bearer not-the-key-0123456789" })).status).toBe(401);
    expect((await fetch(`${w.url}/server_info`)).status).toBe(401);
    expect((await fetch(`${w.url}/health`)).status).toBe(200);
    expect((await generate({ authorization: `Bearer ${w.apiKey}` })).status).toBe(200);
    const r = await ask(fleet);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-kvedge-worker")).toBe("w1");
  });

  it("an edge with another key secret holds the wrong key: the worker refuses it, the client gets no answer", async () => {
    // The fleet keys its workers with its own secret; the edge is given a different one.
    fleet = await startFleet({ workers: 1, vars: { KVEDGE_WORKER_KEY_SECRET: "another-worker-key-secret-0123456789abcdef" }, log });
    const r = await ask(fleet);
    const body = (await r.json()) as { error?: { code: string } };
    expect(r.status).toBeGreaterThanOrEqual(500);
    expect(body.error?.code).toBe("worker_unavailable");
  });
});
