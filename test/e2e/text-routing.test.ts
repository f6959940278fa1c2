/**
 * End to end on the real local fleet (2 simulated SGLang workers + relays + the edge under Miniflare):
 * 20 distinct ~3k-token prompts, each sent 3 times, interleaved. Every repeat must land on the
 * worker that served its first copy, with cached/prompt ≥ 0.9. The same workload under round-robin
 * (sent straight to the workers, as a naive balancer would) is the control.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

/** ~3k tokens of distinct English-ish text per prompt (seeded, so reruns are identical). */
function promptText(seed: number, words = 2400): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "video", "image", "edge", "index", "latency", "throughput", "model", "prompt", "answer", "system", "page", "event", "relay", "hash"];
  let x = seed * 2654435761 >>> 0;
  const out: string[] = [`Document ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]! + (x % 7 === 0 ? "." : ""));
  }
  return out.join(" ");
}

/** Seeded shuffle, so each round interleaves the prompts in a different order. */
function order(n: number, seed: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  let x = seed >>> 0;
  for (let i = n - 1; i > 0; i--) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    const j = x % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

interface Result {
  worker: string;
  promptTokens: number;
  cachedTokens: number;
}

/** `workerKey`: the worker's SGLang API key, for a request straight to a worker. */
async function ask(url: string, text: string, viaEdge: boolean, model: string, workerKey?: string): Promise<Result> {
  const body = JSON.stringify({ model, messages: [{ role: "user", content: text }], max_tokens: 4 });
  const headers: Record<string, string> = { "content-type": "application/json", ...(workerKey ? { authorization: `Bearer ${workerKey}` } : {}) };
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers, body });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }; error?: unknown };
  expect(r.status, JSON.stringify(json)).toBe(200);
  return {
    worker: viaEdge ? (r.headers.get("x-kvedge-worker") ?? "?") : url,
    promptTokens: json.usage!.prompt_tokens,
    cachedTokens: json.usage!.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

describe("text KV routing end to end", () => {
  it("repeats land on the worker that holds their prefix (round-robin control in the same test)", async () => {
    const prompts = Array.from({ length: 20 }, (_, i) => promptText(i + 1));
    const first = new Map<number, string>();
    const ratios: number[] = [];
    for (let round = 0; round < 3; round++) {
      for (const i of order(prompts.length, 7 + round)) {
        const r = await ask(fleet.edgeUrl, prompts[i]!, true, fleet.model);
        expect(r.promptTokens).toBeGreaterThan(2500);
        if (round === 0) first.set(i, r.worker);
        else {
          expect(r.worker, `prompt ${i} round ${round}`).toBe(first.get(i));
          ratios.push(r.cachedTokens / r.promptTokens);
        }
      }
    }
    const kvMean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
    expect(kvMean).toBeGreaterThanOrEqual(0.9);

    // Control: fresh prompts, round-robin over the workers directly.
    const rrRatios: number[] = [];
    const rrPrompts = Array.from({ length: 20 }, (_, i) => promptText(1000 + i));
    let k = 0;
    for (let round = 0; round < 3; round++) {
      for (const i of order(rrPrompts.length, 7 + round)) {
        const w = fleet.workers[k++ % fleet.workers.length]!;
        const r = await ask(w.url, rrPrompts[i]!, false, fleet.model, w.apiKey);
        if (round > 0) rrRatios.push(r.cachedTokens / r.promptTokens);
      }
    }
    const rrMean = rrRatios.reduce((a, b) => a + b, 0) / rrRatios.length;
    console.log(`e2e text routing: kvedge mean cached/prompt over repeats = ${kvMean.toFixed(3)}, round-robin = ${rrMean.toFixed(3)}`);
    expect(rrMean).toBeLessThan(0.75);
    expect(kvMean).toBeGreaterThan(rrMean + 0.2);
  });

  it("a streaming request stops counting as queued prefill once its first output arrives", async () => {
    const body = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: promptText(5000, 800) }], max_tokens: 1500, ignore_eos: true, stream: true });
    const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    expect(r.status).toBe(200);
    const worker = r.headers.get("x-kvedge-worker")!;
    const reader = r.body!.getReader();
    await reader.read(); // first output: prefill is over
    type Row = { workerId: string; activeRequests: number; activePrefillTokens: number };
    let row: Row | undefined;
    // The stream decodes for seconds (1500 tokens), so the edge's prefill-done mark is seen while it
    // is still counted, even with another file's fleet sharing the cores.
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      const { workers } = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: Row[] };
      row = workers.find((w) => w.workerId === worker);
      if (row && row.activeRequests === 1 && row.activePrefillTokens === 0) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    // Still decoding (counted as a request and decode blocks), no longer queueing anyone's prefill.
    expect(row).toMatchObject({ activeRequests: 1, activePrefillTokens: 0 });
    while (!(await reader.read()).done);
  });
});

describe("unstreamed requests", () => {
  it("stop counting as queued prefill once the worker's KV events show their prompt cached, while the answer is still being generated", async () => {
    // Nothing reaches the edge before the whole answer: only the worker's own stored blocks (relayed
    // to the index) can tell that its prefill is over (src/routing-index/prefill-watch.ts).
    // ~32k tokens: a prefill of ~320 ms at the fleet's timing, then ~2 s of decode, so the polls below
    // (each an admin request, slow when another file's fleet shares the cores) see both phases. With
    // 800 words the prefill lasted ~10 ms, and a loaded CI run once saw the request only after it.
    const body = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: promptText(7000, 24_000) }], max_tokens: 1000, ignore_eos: true });
    const answer = fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    type Row = { workerId: string; activeRequests: number; activePrefillTokens: number };
    const seen: Row[] = [];
    let done = false;
    void answer.finally(() => (done = true));
    while (!done) {
      const { workers } = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: Row[] };
      const busy = workers.find((w) => w.activeRequests === 1);
      if (busy) seen.push(busy);
      if (busy?.activePrefillTokens === 0) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    const r = await answer;
    expect(r.status).toBe(200);
    const json = (await r.json()) as { usage: { completion_tokens: number } };
    expect(json.usage.completion_tokens).toBe(1000);
    // Counted with its prefill first, then still active (decoding) with none.
    expect(seen.some((w) => w.activePrefillTokens > 0)).toBe(true);
    expect(seen.at(-1)).toMatchObject({ activeRequests: 1, activePrefillTokens: 0 });
  });
});
