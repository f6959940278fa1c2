/**
 * Inside workerd, the RoutingIndex Durable Object: a request routed to a worker with KV events on an
 * exact chain is watched, and its prefill load ends when the worker's relay reports the chain's last
 * block stored, with no prefill-done call from the edge (src/routing-index/prefill-watch.ts; an
 * unstreamed request's only signal, a streamed one's backstop). A watched request that settles
 * before its block is stored leaves nothing behind; one whose relay disconnects first stops
 * counting as queued prefill at the disconnect.
 */
import { SELF, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import type { WorkerRow } from "../../src/routing-index/front-door.ts";
import { initHashing } from "../../src/util/hash.ts";
import { messageWhere, openRelay } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const WORKER = "w-prefill-watch";

function relay(worker = WORKER): Promise<WebSocket> {
  return openRelay((u, i) => SELF.fetch(u, i), worker, { model: MODEL, hello: { kvEvents: true }, emptyDump: true });
}

let seq = 1;
let engineHash = 1000;
/** The worker stores blocks below `parent` (an engine hash; null: from the chain's root) in one event; returns the last one's hash. */
async function store(ws: WebSocket, locals: bigint[], parent: string | null = null): Promise<string> {
  const blocks = locals.map((l) => ({ h: String(engineHash++), l: localHashToHex(l) }));
  const n = seq++;
  // Events get no ack: the pong to a ping sent after them says they were applied (one socket, in order).
  const pong = messageWhere(ws, (m) => m.type === "pong" && (m as { t?: number }).t === n);
  ws.send(JSON.stringify({ type: "events", epoch: 1, seq: n, events: [{ t: "stored", parent, blocks }] }));
  ws.send(JSON.stringify({ type: "ping", t: n }));
  await pong;
  return blocks.at(-1)!.h;
}

describe("prefill end from the worker's stored blocks (RoutingIndex object)", () => {
  it("a watched request's prefill load ends at its stored chain end, without the edge's call; one settled first leaves nothing", async () => {
    await initHashing();
    const ws = await relay();
    const stub = env.ROUTING_INDEX.getByName(MODEL);
    // Workers RPC types this stub's array answers as never (as dp-rank-removal.test.ts reads them).
    const load = async () => ((await stub.workers()) as WorkerRow[]).find((w) => w.workerId === WORKER)!;

    const tokens = Array.from({ length: 70 }, (_, i) => 5000 + i); // 4 full blocks and 6 tokens
    const locals = localBlockHashes(tokens, 16);
    const d = (await stub.route({ localHashes: locals, isl: tokens.length }))!;
    expect(d).toMatchObject({ workerId: WORKER, overlapBlocks: 0 });
    expect(await load()).toMatchObject({ activeRequests: 1, activePrefillTokens: 70 });
    const third = await store(ws, locals.slice(0, 3)); // the first chunk: not over yet
    expect((await load()).activePrefillTokens).toBe(70);
    await store(ws, locals.slice(3), third); // the whole chain: the prefill is over, the request still decodes
    expect(await load()).toMatchObject({ activeRequests: 1, activePrefillTokens: 0 });
    await stub.settle({ receiptId: d.receiptId, promptTokens: 70, cachedTokens: 0, outcome: "ok" });
    expect(await load()).toMatchObject({ activeRequests: 0, activePrefillTokens: 0 });

    // Settled (say, cut by the client) before the worker stored its chain: its later blocks free nothing twice.
    const other = localBlockHashes(Array.from({ length: 48 }, (_, i) => 9000 + i), 16);
    const early = (await stub.route({ localHashes: other, isl: 48 }))!;
    await stub.settle({ receiptId: early.receiptId, promptTokens: null, cachedTokens: null, outcome: "cancelled" });
    await store(ws, other);
    expect(await load()).toMatchObject({ activeRequests: 0, activePrefillTokens: 0 });

    // Fully cached: nothing to store, nothing to watch; the edge's call ends its (partial-block) prefill.
    const cached = (await stub.route({ localHashes: locals, isl: tokens.length }))!;
    expect(cached).toMatchObject({ overlapBlocks: 4 });
    await stub.settle({ receiptId: cached.receiptId, promptTokens: 70, cachedTokens: 64, outcome: "ok" });
    ws.close();
  });

  it("a watched request whose worker's relay disconnects before storing its chain stops counting as queued prefill", async () => {
    await initHashing();
    const gone = "w-prefill-watch-gone";
    const ws = await relay(gone);
    const stub = env.ROUTING_INDEX.getByName(MODEL);
    const load = async () => ((await stub.workers()) as WorkerRow[]).find((w) => w.workerId === gone)!;
    const locals = localBlockHashes(Array.from({ length: 70 }, (_, i) => 7000 + i), 16);
    const d = (await stub.route({ localHashes: locals, isl: 70, onlyWorkers: [gone] }))!;
    expect(d).toMatchObject({ workerId: gone });
    expect(await load()).toMatchObject({ activeRequests: 1, activePrefillTokens: 70 });
    ws.close(1001, "relay died");
    // The index hears of the close on its own time: wait for it (the worker's row says unsynced).
    let row = await load();
    for (let i = 0; i < 100 && row.synced; i++) {
      await new Promise((r) => setTimeout(r, 20));
      row = await load();
    }
    expect(row).toMatchObject({ synced: false, activeRequests: 1, activePrefillTokens: 0 });
    await stub.settle({ receiptId: d.receiptId, promptTokens: 70, cachedTokens: 0, outcome: "ok" });
    expect(await load()).toMatchObject({ activeRequests: 0, activePrefillTokens: 0 });
  });
});
