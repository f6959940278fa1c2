/**
 * Inside workerd: a DP-attention worker's rank sessions through the edge (`/v1/relay?…&rank=r`).
 * The pool object names each session `<worker>#<rank>`; its hello must claim that rank; the index
 * routes to the rank holding the prefix; a malformed rank is refused before any object is asked.
 */
import { SELF, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { issueRelayKey, messageWhere, TEST_WORKER_URL } from "./ws-helpers.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { initHashing } from "../../src/util/hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const WORKER = "w-dp";

async function connectRank(credential: string, rank: string): Promise<Response> {
  const token = await mintRelayToken(credential, WORKER, MODEL, { url: TEST_WORKER_URL });
  return SELF.fetch(`https://edge/v1/relay?worker=${WORKER}&model=${encodeURIComponent(MODEL)}&rank=${rank}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
}

describe("DP rank sessions through the edge", () => {
  it("registers each rank as <worker>#<rank>, refuses a hello of another rank, and routes to the rank that holds the prefix", async () => {
    await initHashing();
    const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), WORKER, { dpSize: 2 });
    const hello = (rank: number) => JSON.stringify({ type: "hello", workerId: WORKER, url: TEST_WORKER_URL, blockSize: 16, epoch: 1, modelName: MODEL, dpSize: 2, dpRank: rank });

    const res1 = await connectRank(credential, "1");
    expect(res1.status).toBe(101);
    const ws1 = res1.webSocket!;
    ws1.accept();
    const welcome = messageWhere(ws1, (m) => m.type === "welcome");
    ws1.send(hello(1));
    expect(await welcome).toMatchObject({ type: "welcome", workerId: `${WORKER}#1` });

    const tokens = Array.from({ length: 64 }, (_, i) => 3000 + i);
    const locals = localBlockHashes(tokens, 16);
    const blocks = locals.map((l, i) => ({ h: String(-300 - i), p: i === 0 ? null : String(-299 - i), l: localHashToHex(l) }));
    const ack = messageWhere(ws1, (m) => m.type === "ack");
    ws1.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks }));
    await ack;

    // A session connected as rank 0 that says hello as rank 1 is refused.
    const res0 = await connectRank(credential, "0");
    expect(res0.status).toBe(101);
    const ws0 = res0.webSocket!;
    ws0.accept();
    const refused = messageWhere(ws0, (m) => m.type === "error");
    ws0.send(hello(1));
    expect(await refused).toMatchObject({ type: "error" });

    const d = await env.ROUTING_INDEX.getByName(MODEL).route({ localHashes: locals, isl: 64 });
    expect(d).toMatchObject({ workerId: `${WORKER}#1`, overlapBlocks: 4, url: TEST_WORKER_URL });
    ws1.close();
  });

  it("opens no more rank targets than the key grants: a rank past it is refused before any object, a hello claiming more is closed", async () => {
    const single = await issueRelayKey((u, i) => SELF.fetch(u, i), "w-dp-one");
    const refusal = async (credential: string, worker: string, rank: string) => {
      const token = await mintRelayToken(credential, worker, MODEL, { url: TEST_WORKER_URL });
      const r = await SELF.fetch(`https://edge/v1/relay?worker=${worker}&model=${encodeURIComponent(MODEL)}&rank=${rank}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
      const text = await r.text();
      if (r.status !== 400) throw new Error(`${worker} rank ${rank}: ${r.status} ${text}`);
      return { status: r.status, error: (JSON.parse(text) as { error: { code: string; param: string; message: string } }).error };
    };
    // A key issued without dpSize is a single-rank worker's: no rank target at all.
    expect(await refusal(single, "w-dp-one", "0")).toMatchObject({ status: 400, error: { code: "rank_not_granted", param: "rank" } });
    const two = await issueRelayKey((u, i) => SELF.fetch(u, i), "w-dp-two", { dpSize: 2 });
    const past = await refusal(two, "w-dp-two", "2");
    expect(past).toMatchObject({ status: 400, error: { code: "rank_not_granted" } });
    expect(past.error.message).toMatch(/outside the 2 DP ranks/);

    // Rank 1 of the two granted, saying hello with a DP size of 64: closed with the reason.
    const token = await mintRelayToken(two, "w-dp-two", MODEL, { url: TEST_WORKER_URL });
    const res = await SELF.fetch(`https://edge/v1/relay?worker=w-dp-two&model=${encodeURIComponent(MODEL)}&rank=1`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    ws.accept();
    const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.addEventListener("close", (e) => resolve({ code: e.code, reason: e.reason })));
    const error = messageWhere(ws, (m) => m.type === "error");
    ws.send(JSON.stringify({ type: "hello", workerId: "w-dp-two", url: TEST_WORKER_URL, blockSize: 16, epoch: 1, modelName: MODEL, dpSize: 64, dpRank: 1 }));
    expect(await error).toMatchObject({ message: expect.stringMatching(/dp size 64 is more than the 2 rank\(s\) this relay key grants/) });
    expect(await closed).toMatchObject({ code: 4003, reason: expect.stringMatching(/more than the 2 rank/) });
    const rows = (await env.ROUTING_INDEX.getByName(MODEL).workers()) as { workerId: string }[];
    expect(rows.map((w) => w.workerId).filter((id) => id.startsWith("w-dp-two"))).toEqual([]);
  });

  it("refuses a malformed rank parameter", async () => {
    const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), "w-dp-bad");
    const token = await mintRelayToken(credential, "w-dp-bad", MODEL, { url: TEST_WORKER_URL });
    const r = await SELF.fetch(`https://edge/v1/relay?worker=w-dp-bad&model=${encodeURIComponent(MODEL)}&rank=one`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { param: string } }).error.param).toBe("rank");
  });
});
