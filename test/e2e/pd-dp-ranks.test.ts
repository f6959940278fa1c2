/**
 * DP ranks inside a prefill/decode pool end to end (scripts/local-fleet.ts shape "pd", 2 ranks a
 * worker): w1, w2 prefill, w3, w4 decode, each `--dp-size 2`. The index picks the prefill rank that
 * holds the prefix; the edge takes a bootstrap room that agrees with it (room % dp_size, which a
 * SGLang prefill follows and checks), sends routed_dp_rank to the prefill and disagg_prefill_dp_rank
 * for the decode, which pulls the KV from that rank. A room that disagreed would fail at the prefill
 * ("follow_bootstrap_room conflict") and a decode asking another rank would time out.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 4, shape: "pd", dpSize: 2, log: logs });
});
afterAll(async () => {
  await fleet?.stop();
});

function longPrompt(seed: number, words = 1600): string {
  const vocab = ["rank", "room", "prefill", "decode", "bootstrap", "cache", "prefix", "worker", "edge", "index"];
  let x = (seed * 2246822519) >>> 0;
  const out: string[] = [`Ledger ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]!);
  }
  return out.join(" ");
}

async function chat(content: string) {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: fleet.model, max_tokens: 8, messages: [{ role: "user", content }] }),
  });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }; error?: { message: string } };
  return {
    status: r.status,
    error: json.error?.message ?? null,
    worker: r.headers.get("x-kvedge-worker"),
    decode: r.headers.get("x-kvedge-decode-worker"),
    attempts: Number(r.headers.get("x-kvedge-attempts") ?? "0"),
    promptTokens: json.usage?.prompt_tokens ?? 0,
    cachedTokens: json.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

describe("a PD pool whose workers run 2 DP ranks", () => {
  it("serves every request on its first pair, and a repeat on the prefill rank that holds it with cached_tokens ≥ 0.95", async () => {
    const seeds = [11, 12, 13, 14, 15, 16];
    const first = [];
    for (const s of seeds) first.push(await chat(longPrompt(s)));
    for (const r of first) {
      expect(r, JSON.stringify(r)).toMatchObject({ status: 200, attempts: 1 });
      expect(r.worker).toMatch(/^w[12]#[01]$/);
      expect(r.decode).toMatch(/^w[34]#[01]$/);
    }
    // Spread over more than one rank: the room had to follow ranks other than 0.
    expect(new Set(first.map((r) => r.worker)).size).toBeGreaterThan(1);
    for (const [i, s] of seeds.entries()) {
      const again = await chat(longPrompt(s));
      expect(again, JSON.stringify(again)).toMatchObject({ status: 200, attempts: 1, worker: first[i]!.worker });
      expect(again.cachedTokens / again.promptTokens).toBeGreaterThanOrEqual(0.95);
    }
  });
});
