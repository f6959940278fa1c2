/**
 * Inside workerd, the RoutingIndex Durable Object over Workers RPC: receipts carried by a route are
 * applied before it decides (the settled request's load is gone when the carrying request's is
 * added), and a `receipts` call applies its settlements and prefill-done marks in order
 * (src/routing-index/receipt-entries.ts; the edge's queue: src/edge/chat/receipt-outbox.ts).
 */
import { SELF, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import type { PoolStats, ReceiptEntry, WorkerRow } from "../../src/routing-index/front-door.ts";
import { initHashing } from "../../src/util/hash.ts";
import { openRelay } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const WORKER = "w-carried-receipts";

function relay(): Promise<WebSocket> {
  return openRelay((u, i) => SELF.fetch(u, i), WORKER, { model: MODEL, hello: { kvEvents: true }, emptyDump: true });
}

describe("receipts over Workers RPC (RoutingIndex object)", () => {
  it("a route applies the receipts it carries before it decides; a receipts call applies its entries in order", async () => {
    await initHashing();
    const ws = await relay();
    const stub = env.ROUTING_INDEX.getByName(MODEL);
    // Workers RPC types this stub's array answers as never (as prefill-watch.test.ts reads them).
    const load = async () => ((await stub.workers()) as WorkerRow[]).find((w) => w.workerId === WORKER)!;
    const settled = async () => ((await stub.stats()) as PoolStats).counters.settled;
    const settledBefore = await settled();
    const locals = localBlockHashes(Array.from({ length: 40 }, (_, i) => 31_000 + i), 16);
    const first = (await stub.route({ localHashes: locals, isl: 40, onlyWorkers: [WORKER] }))!;
    expect(await load()).toMatchObject({ activeRequests: 1, activePrefillTokens: 40 });

    const second = (await stub.route({
      localHashes: locals,
      isl: 40,
      onlyWorkers: [WORKER],
      receipts: [
        { kind: "prefill_done", receiptId: first.receiptId, ageMs: 2 },
        { kind: "settle", receiptId: first.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "ok" },
      ],
    }))!;
    expect(second.workerId).toBe(WORKER);
    // The first request's load left before the second's was added (which counts the first's
    // prefix as pending in its cache: its prefill is shorter).
    expect(await load()).toMatchObject({ activeRequests: 1 });

    await stub.receipts([
      { kind: "prefill_done", receiptId: second.receiptId, ageMs: 0 },
      { kind: "settle", receiptId: second.receiptId, promptTokens: 40, cachedTokens: 32, outcome: "ok" },
    ]);
    expect(await load()).toMatchObject({ activeRequests: 0, activePrefillTokens: 0 });
    expect((await settled()) - settledBefore).toBe(2);

    // Entries that do not match the wire schema are skipped and counted; the call's valid ones apply.
    const rejected = async () => ((await stub.stats()) as PoolStats).counters.receiptsRejected;
    const rejectedBefore = await rejected();
    const third = (await stub.route({ localHashes: locals, isl: 40, onlyWorkers: [WORKER] }))!;
    const bad = [
      { kind: "finished", receiptId: third.receiptId },
      { kind: "prefill_done", receiptId: third.receiptId, ageMs: Number.NaN },
      { kind: "settle", receiptId: third.receiptId, promptTokens: 40, cachedTokens: 0, outcome: "maybe" },
    ] as unknown as ReceiptEntry[];
    await stub.receipts(bad);
    expect(await load()).toMatchObject({ activeRequests: 1 });
    await stub.receipts([...bad, { kind: "settle", receiptId: third.receiptId, promptTokens: 40, cachedTokens: 32, outcome: "ok" }]);
    expect(await load()).toMatchObject({ activeRequests: 0 });
    // The single settle call reads through the same schema.
    await stub.settle({ receiptId: third.receiptId, promptTokens: -1, cachedTokens: 0, outcome: "ok" });
    expect((await rejected()) - rejectedBefore).toBe(7);
    ws.close();
  });
});
