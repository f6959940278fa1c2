/**
 * End to end on the local fleet with a mixed pool: w1 publishes KV events (relay follows them),
 * w2 publishes none (simulator and relay `--no-kv-events`: the index routes it in approximate
 * mode, assuming what it sent there is cached). Both relays announce a region and a prefill rate
 * and the pool runs with KVEDGE_REGIONS (edge pinned to eu, equal RTT to both regions, so cold
 * requests tie and cache overlap decides). Repeats must return to the worker that served them on
 * BOTH workers, with the simulator confirming the cache hit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet;

const REGIONS = { self: "eu", rttMs: { eu: { eu: 2, us: 2 } }, defaultRttMs: 150, defaultPrefillTokensPerSec: 10_000 };

beforeAll(async () => {
  fleet = await startFleet({
    workers: 2,
    workerArgs: [[], ["--no-kv-events"]],
    relayArgs: [
      ["--region", "eu", "--prefill-tokens-per-sec", "20000"],
      ["--no-kv-events", "--region", "us", "--prefill-tokens-per-sec", "20000"],
    ],
    vars: { KVEDGE_REGIONS: JSON.stringify(REGIONS) },
    log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined,
  });
});
afterAll(async () => {
  await fleet?.stop();
});

/** ~2k tokens of distinct text per prompt (seeded). */
function promptText(seed: number, words = 1600): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "edge", "index", "region", "relay", "event", "page"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`Mixed pool document ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]! + (x % 5 === 0 ? "," : ""));
  }
  return out.join(" ");
}

interface Result {
  worker: string;
  promptTokens: number;
  cachedTokens: number;
}

async function ask(text: string): Promise<Result> {
  const body = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: text }], max_tokens: 4 });
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  expect(r.status, JSON.stringify(json)).toBe(200);
  return {
    worker: r.headers.get("x-kvedge-worker") ?? "?",
    promptTokens: json.usage!.prompt_tokens,
    cachedTokens: json.usage!.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

interface AdminWorker {
  workerId: string;
  kvEvents: boolean;
  status: string;
  region: string | null;
  prefillTokensPerSec: number | null;
  blocks: number;
}

describe("mixed pool (KV events + approximate mode) with regions", () => {
  it("/admin/workers shows each worker's kvEvents, region and prefill rate", async () => {
    const body = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: AdminWorker[] };
    const byId = new Map(body.workers.map((w) => [w.workerId, w]));
    expect(byId.get("w1")).toMatchObject({ kvEvents: true, status: "up", region: "eu", prefillTokensPerSec: 20000 });
    expect(byId.get("w2")).toMatchObject({ kvEvents: false, status: "up", region: "us", prefillTokensPerSec: 20000 });
  });

  it("repeats return to the worker that served them, for the worker with events and the one without", async () => {
    const prompts = Array.from({ length: 16 }, (_, i) => promptText(i + 1));
    const first = new Map<number, string>();
    for (let i = 0; i < prompts.length; i++) {
      const r = await ask(prompts[i]!);
      expect(r.promptTokens).toBeGreaterThan(1500);
      first.set(i, r.worker);
    }
    // Cold requests tie on cost, so both workers get some (random tie-break; all 16 on one: p = 2^-15).
    const served = new Set(first.values());
    expect(served).toEqual(new Set(["w1", "w2"]));

    for (let round = 1; round <= 2; round++) {
      for (let i = prompts.length - 1; i >= 0; i--) {
        const r = await ask(prompts[i]!);
        expect(r.worker, `prompt ${i} round ${round}`).toBe(first.get(i));
        // The simulator's own cache confirms the hit (the router's assumption was right).
        expect(r.cachedTokens / r.promptTokens, `prompt ${i} round ${round} on ${r.worker}`).toBeGreaterThanOrEqual(0.9);
      }
    }

    // The index holds event-fed blocks for w1 only; w2's are assumptions (not in the block index).
    const body = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: AdminWorker[] };
    const byId = new Map(body.workers.map((w) => [w.workerId, w]));
    expect(byId.get("w1")!.blocks).toBeGreaterThan(0);
    expect(byId.get("w2")!.blocks).toBe(0);
  });
});
