/**
 * A sharded pool end to end on the real local fleet: the edge with KVEDGE_SHARDS=3, two
 * simulated SGLang workers, relays fanning out to the three shard objects. Distinct prompts spread
 * over the shards (x-kvedge-shard), every repeat returns to the worker that cached it, the union of
 * the shards equals each worker's true block set, and load flows between the shards (lag reported).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { waitParity, waitUntil, words } from "./reliability-helpers.ts";

const SHARDS = 3;
let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, vars: { KVEDGE_SHARDS: String(SHARDS) }, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

interface Sent {
  /** Predicted overlap / total blocks (x-kvedge-overlap-blocks, x-kvedge-total-blocks). */
  overlap: string;
  worker: string;
  shard: number;
  promptTokens: number;
  cachedTokens: number;
}

/** One chat request through the edge; streamed ones read usage from the final chunk. */
async function ask(text: string, stream = false): Promise<Sent> {
  const body = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: text }], max_tokens: 4, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const raw = await r.text();
  expect(r.status, raw).toBe(200);
  type Usage = { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  let usage: Usage | undefined;
  if (stream) {
    expect(raw).toContain("data: [DONE]");
    for (const line of raw.split("\n")) {
      if (!line.startsWith("data: {")) continue;
      const chunk = JSON.parse(line.slice(6)) as { usage?: Usage | null };
      if (chunk.usage) usage = chunk.usage;
    }
  } else usage = (JSON.parse(raw) as { usage?: Usage }).usage;
  return {
    overlap: `${r.headers.get("x-kvedge-overlap-blocks")}/${r.headers.get("x-kvedge-total-blocks")}`,
    worker: r.headers.get("x-kvedge-worker") ?? "?",
    shard: Number(r.headers.get("x-kvedge-shard") ?? "0"),
    promptTokens: usage!.prompt_tokens,
    cachedTokens: usage!.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

interface ShardRow {
  shard: number;
  shards: number;
  indexedBlocks: number;
  workers: number;
  loadSync: { opsSent: number; opsReceived: number; opsApplied: number; sendFailures: number; lag: { samples: number; p50Ms: number | null; p99Ms: number | null; maxMs: number | null } };
}

describe("sharded pool (3 shard objects)", () => {
  it("spreads prompts over the shards, keeps repeats sticky, mirrors each worker's cache across shards", async () => {
    const prompts = Array.from({ length: 18 }, (_, i) => `Shard test ${i}. ${words(500 + i, 700)}`);
    const first: Sent[] = [];
    for (const p of prompts) first.push(await ask(p));
    const repeats: { first: Sent; again: Sent }[] = [];
    // Round 2 streams: its end, too, waits until the release reached every shard.
    for (let round = 0; round < 2; round++)
      for (let i = prompts.length - 1; i >= 0; i--) repeats.push({ first: first[i]!, again: await ask(prompts[i]!, round === 1) });

    const shardsUsed = new Set(first.map((s) => s.shard));
    expect(shardsUsed.size, `shards used: ${[...shardsUsed].join(",")}`).toBeGreaterThanOrEqual(2);
    for (const r of repeats) {
      expect(r.again.shard).toBe(r.first.shard);
      expect(r.again.worker, JSON.stringify(r)).toBe(r.first.worker);
    }
    const ratio = repeats.reduce((a, r) => a + r.again.cachedTokens / r.again.promptTokens, 0) / repeats.length;
    expect(ratio).toBeGreaterThan(0.9);
    expect(new Set(first.map((s) => s.worker)).size).toBe(2);

    // The shards together hold exactly each worker's cache (parity with the simulator's own dump).
    for (let i = 0; i < fleet.workers.length; i++) await waitParity(fleet, i);

    // Every release reached every shard before its answer (release before reply), so the ops sent
    // are final; wait until they have all been received: an add and a release per request, a
    // "prefill done" per streamed one (its first output), and one per first-round request whose
    // prompt the worker's KV events showed cached before it ended (repeats were cached already).
    const baseOps = prompts.length * 3 * 2 + prompts.length;
    let shards: ShardRow[] = [];
    const total = (f: (s: ShardRow) => number) => shards.reduce((a, s) => a + f(s), 0);
    await waitUntil(
      async () => {
        shards = ((await fleet.admin(`/admin/shards?model=${encodeURIComponent(fleet.model)}`)) as { shards: ShardRow[] }).shards;
        return total((s) => s.loadSync.opsSent) >= baseOps && total((s) => s.loadSync.opsReceived) === total((s) => s.loadSync.opsSent) * (SHARDS - 1);
      },
      10_000,
      () => JSON.stringify(shards.map((s) => s.loadSync)),
    );
    expect(total((s) => s.loadSync.opsSent)).toBeLessThanOrEqual(baseOps + prompts.length);
    expect(shards.map((s) => s.shard)).toEqual([0, 1, 2]);
    for (const s of shards) {
      expect(s.shards).toBe(SHARDS);
      expect(s.workers).toBe(2);
      expect(s.loadSync.sendFailures).toBe(0);
    }
    for (const k of shardsUsed) expect(shards[k]!.indexedBlocks).toBeGreaterThan(0);
    // Every shard that routed sent its load changes; every other shard applied them.
    const sent = total((s) => s.loadSync.opsSent);
    const received = total((s) => s.loadSync.opsReceived);
    expect(total((s) => s.loadSync.opsApplied)).toBe(received);
    const lags = shards.filter((s) => s.loadSync.lag.samples > 0).map((s) => s.loadSync.lag);
    console.log(
      `e2e sharded: ${prompts.length} prompts over shards ${[...shardsUsed].sort().join(",")}, repeats cached/prompt ${ratio.toFixed(3)}, ` +
        `blocks per shard ${shards.map((s) => s.indexedBlocks).join("/")}, load ops sent ${sent}, received ${received}, ` +
        `lag p50/p99/max ms ${lags.map((l) => `${l.p50Ms}/${l.p99Ms}/${l.maxMs}`).join(" ")}`,
    );
  });
});
