/**
 * A worker's share of the index through the real Durable Object: the KV capacity its relay sends
 * in the hello bounds the blocks the index holds for it (kept across an eviction), and a relay
 * past its bound is refused and marked approximate while another worker of the pool stays synced.
 */
import { SELF, env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { nextMessage, openRelay } from "./ws-helpers.ts";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";

interface AdminWorker {
  workerId: string;
  blocks: number;
  synced: boolean;
  approximate: boolean;
}

async function adminWorker(id: string): Promise<AdminWorker | undefined> {
  const r = await SELF.fetch(`https://edge/admin/workers?model=${encodeURIComponent(MODEL)}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return ((await r.json()) as { workers: AdminWorker[] }).workers.find((w) => w.workerId === id);
}

/** A chain of `n` blocks, parents first, engine hashes from `base`. */
function chain(n: number, base: number) {
  return Array.from({ length: n }, (_, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: (base + i).toString(16).padStart(16, "0") }));
}

function connect(id: string, url: string, hello: Record<string, unknown>): Promise<WebSocket> {
  return openRelay((u, i) => SELF.fetch(u, i), id, { model: MODEL, url, hello: { kvEvents: true, ...hello } });
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("a worker's share of the index (real Durable Object)", () => {
  it("blocks past the worker's own KV capacity are refused; the other worker stays synced", async () => {
    await initHashing();
    const honest = await connect("w-share-honest", "https://127.0.0.1:9", { kvCapacityTokens: 16_000 });
    honest.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks: chain(50, 1_000) }));
    // 64 tokens at block size 16: 4 blocks of KV, 8 with headroom; the relay dumps 500.
    const flood = await connect("w-share-flood", "https://127.0.0.1:10", { kvCapacityTokens: 64 });
    flood.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks: chain(500, 900_000) }));
    await until("the flood dump", async () => (await adminWorker("w-share-flood"))?.blocks === 8);
    expect(await adminWorker("w-share-flood")).toMatchObject({ blocks: 8, approximate: true, synced: false });
    honest.send(JSON.stringify({ type: "events", epoch: 1, seq: 1, events: [{ t: "stored", parent: "1049", blocks: chain(20, 2_000).map(({ h, l }) => ({ h, l })) }] }));
    await until("the honest worker's events", async () => (await adminWorker("w-share-honest"))?.blocks === 70);
    expect(await adminWorker("w-share-honest")).toMatchObject({ blocks: 70, approximate: false, synced: true });

    // The capacity outlives an eviction: the relay's dump after the index restarts is bounded the same.
    const resync = nextMessage(flood, "resync");
    await evictDurableObject(env.ROUTING_INDEX.getByName(MODEL));
    await adminWorker("w-share-flood"); // wakes the index, which asks every relay for a dump
    await resync;
    flood.send(JSON.stringify({ type: "dump", epoch: 1, seq: 1, blocks: chain(500, 900_000) }));
    await until("the flood dump after eviction", async () => (await adminWorker("w-share-flood"))?.blocks === 8);
    honest.close();
    flood.close();
  });
});
