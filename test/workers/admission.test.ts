/**
 * Admission in the real pool object (workerd): a request past every worker's KV bound waits as
 * one pending RPC, answered when another RPC settles a request on that worker; a deadline fires
 * from the object's own timer; a client that leaves gets its call answered and leaves nothing.
 * The relay connects straight to a pool object of its own (the edge's checks are tested elsewhere).
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { relayConnectRequest, type AdmitResult } from "../../src/routing-index/front-door.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { initHashing } from "../../src/util/hash.ts";
import { nextMessage } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const POOL = "admission-test-pool";
const BS = 16;

async function worker(id: string, kvCapacityTokens: number) {
  const stub = env.ROUTING_INDEX.getByName(POOL);
  const res = await stub.fetch(
    relayConnectRequest({ workerId: id, nonce: crypto.randomUUID(), expiresAt: Math.floor(Date.now() / 1000) + 60, keyId: "k", url: `https://${id}.invalid`, pool: POOL, shard: 0, blockSize: BS, dpSize: 1, storageGroup: null }),
  );
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify({ type: "hello", workerId: id, url: `https://${id}.invalid`, blockSize: BS, epoch: 1, modelName: POOL, kvEvents: true, kvCapacityTokens }));
  await welcome;
  return { stub, ws };
}

const prompt = (seed: number) => Array.from({ length: 4 * BS }, (_, i) => seed * 1000 + i + 1);
let seq = 0;
function request(seed: number, maxWaitMs?: number) {
  const tokens = prompt(seed);
  const ticket = `adm-${seq++}`;
  return {
    ticket,
    req: {
      localHashes: BigUint64Array.from(localBlockHashes(tokens, BS)),
      isl: tokens.length,
      admission: { ticket, band: 1, tenant: "t", decodeBudget: 16, ...(maxWaitMs !== undefined ? { maxWaitMs } : {}) },
    },
  };
}

/** The call's answer, or "pending" if none came within `ms`. */
async function within(p: Promise<AdmitResult>, ms: number): Promise<AdmitResult | "pending"> {
  return Promise.race([p, new Promise<"pending">((r) => setTimeout(() => r("pending"), ms))]);
}

describe("admission in the pool object (workerd)", () => {
  it("holds a request past the bound in one pending call, answered by the settle that frees room", async () => {
    await initHashing();
    const { stub, ws } = await worker("adm-w1", 4 * BS); // room for one 4-block prompt
    const first = await stub.admit(request(1).req);
    expect(first).toMatchObject({ kind: "routed", decision: { workerId: "adm-w1" } });
    const second = request(2);
    const waiting = stub.admit(second.req);
    // Briefly: the pool's default wait is 1 s, and the settle below must come within it.
    expect(await within(waiting, 100)).toBe("pending");
    if (first.kind !== "routed") throw new Error("unreachable");
    await stub.settle({ receiptId: first.decision.receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" });
    const admitted = await within(waiting, 5_000);
    expect(admitted).toMatchObject({ kind: "routed", decision: { workerId: "adm-w1" } });

    // Full again: a short deadline is refused by the object's timer, with a Retry-After.
    const late = await within(stub.admit(request(3, 200).req), 5_000);
    expect(late).toMatchObject({ kind: "refused", reason: "deadline" });
    if (late !== "pending" && late.kind === "refused") expect(late.retryAfterSeconds).toBeGreaterThanOrEqual(1);

    // A client that leaves: its call is answered "left", and the next settle admits nobody for it.
    const gone = request(4);
    const goneCall = stub.admit(gone.req);
    expect(await within(goneCall, 100)).toBe("pending");
    expect(await stub.leaveQueue(gone.ticket)).toBe(true);
    expect(await within(goneCall, 5_000)).toEqual({ kind: "left" });
    if (admitted === "pending" || admitted.kind !== "routed") throw new Error("unreachable");
    await stub.settle({ receiptId: admitted.decision.receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" });
    expect((await stub.shardInfo()).activeRequests).toBe(0);
    ws.close();
  });
});
