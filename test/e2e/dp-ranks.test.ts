/**
 * DP-attention ranks end to end on the local fleet: 2 simulated SGLang workers × 2 attention-DP
 * ranks (`--dp-size 2 --enable-dp-attention`: a radix cache and a KV event stream per rank, on
 * port base + rank), one relay process per worker following both ranks, the edge under Miniflare.
 * Each rank is its own routing target (`<worker>#<rank>`); the edge sends SGLang's routed_dp_rank.
 * Every repeat must land on the rank that served its first copy with cached/prompt ≥ 0.95. The
 * rank-blind control sends each prompt once more to the right worker without a rank, as a router
 * that knows workers but not ranks does: the worker's controller picks a rank round robin.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, dpSize: 2, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
}, 120_000);
afterAll(async () => {
  await fleet?.stop();
});

/** ~3k tokens of distinct text per prompt (seeded). */
function promptText(seed: number, words = 2400): string {
  const vocab = ["rank", "cache", "prefix", "token", "block", "worker", "attention", "data", "parallel", "index", "latency", "scheduler", "model", "prompt", "answer", "radix", "page", "event", "relay", "hash"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`Report ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]! + (x % 7 === 0 ? "." : ""));
  }
  return out.join(" ");
}

interface Result {
  target: string;
  promptTokens: number;
  cachedTokens: number;
}

async function ask(url: string, text: string, model: string, workerKey?: string): Promise<Result> {
  const body = JSON.stringify({ model, messages: [{ role: "user", content: text }], max_tokens: 4 });
  const headers: Record<string, string> = { "content-type": "application/json", ...(workerKey ? { authorization: `Bearer ${workerKey}` } : {}) };
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers, body });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }; error?: unknown };
  expect(r.status, JSON.stringify(json)).toBe(200);
  return { target: r.headers.get("x-kvedge-worker") ?? url, promptTokens: json.usage!.prompt_tokens, cachedTokens: json.usage!.prompt_tokens_details?.cached_tokens ?? 0 };
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

describe("DP-attention ranks end to end", () => {
  it("registers every rank of every worker as its own synced target", async () => {
    const body = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { workerId: string; synced: boolean; status: string }[] };
    const ids = body.workers.map((w) => w.workerId).sort();
    expect(ids).toEqual(["w1#0", "w1#1", "w2#0", "w2#1"]);
    expect(body.workers.every((w) => w.synced && w.status === "up")).toBe(true);
  });

  it("sends repeats to the rank that holds their prefix (rank-blind control in the same test)", async () => {
    const prompts = Array.from({ length: 12 }, (_, i) => promptText(i + 1));
    const first = new Map<number, string>();
    const rankAware: number[] = [];
    for (let round = 0; round < 3; round++) {
      for (let k = 0; k < prompts.length; k++) {
        const i = (k * 5 + round * 7) % prompts.length; // a different interleaving each round
        const r = await ask(fleet.edgeUrl, prompts[i]!, fleet.model);
        expect(r.target).toMatch(/^w[12]#[01]$/);
        expect(r.promptTokens).toBeGreaterThan(2500);
        if (round === 0) first.set(i, r.target);
        else {
          expect(r.target, `prompt ${i} round ${round}`).toBe(first.get(i));
          expect(r.cachedTokens / r.promptTokens, `prompt ${i} round ${round}`).toBeGreaterThanOrEqual(0.95);
          rankAware.push(r.cachedTokens / r.promptTokens);
        }
      }
    }
    // New prompts are spread over the ranks, not piled on rank 0 of each worker.
    expect(new Set(first.values()).size).toBeGreaterThanOrEqual(3);

    // Rank-blind: the same worker, no rank; SGLang's controller picks one in turn. Sent in another
    // order than the first round, so the controller's turns do not replay the edge's spreading.
    const rankBlind: number[] = [];
    const blindOrder = [...first].sort(([a], [b]) => ((a * 7 + 3) % 12) - ((b * 7 + 3) % 12));
    for (const [i, target] of blindOrder) {
      const w = fleet.workers.find((x) => x.id === target.split("#")[0])!;
      const r = await ask(w.url, prompts[i]!, fleet.model, w.apiKey);
      rankBlind.push(r.cachedTokens / r.promptTokens);
    }
    const aware = mean(rankAware);
    const blind = mean(rankBlind);
    console.log(`[dp-ranks] cached/prompt on repeats: rank-aware ${aware.toFixed(3)} (${rankAware.length} requests), rank-blind ${blind.toFixed(3)} (${rankBlind.length} requests)`);
    expect(aware).toBeGreaterThanOrEqual(0.95);
    // Each blind request finds its prefix only when the controller's turn is the holding rank.
    expect(blind).toBeLessThan(0.95);
  });
});
