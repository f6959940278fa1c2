/**
 * The routing index (the real Durable Object in workerd) hears only a worker's newest relay
 * session. A relay that reconnects leaves an older socket behind that the index may never see
 * close (half-open) and whose frames may arrive late; neither may count as the relay. And a relay
 * that announces a life the pool refuses, while no session of the registered life is open, ends
 * that life instead of leaving its blocks routed.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../src/util/hash.ts";
import { issueRelayKey, nextMessage, TEST_WORKER_URL } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";
const B = 16;
const tokens = (n: number, start: number) => Array.from({ length: n }, (_, i) => start + i);
const chain = (t: number[], base: number) =>
  localBlockHashes(t, B).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));

async function open(id: string, credential: string): Promise<WebSocket> {
  const token = await mintRelayToken(credential, id, MODEL, { url: TEST_WORKER_URL });
  const res = await SELF.fetch(`https://edge/v1/relay?worker=${id}&model=${encodeURIComponent(MODEL)}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  return ws;
}

/** The close code the index sends, or -1 when it has not closed the socket within 5 s. */
function closed(ws: WebSocket): Promise<number> {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(-1), 5_000);
    ws.addEventListener("close", (ev) => (clearTimeout(t), resolve(ev.code)), { once: true });
  });
}

async function helloAndDump(ws: WebSocket, id: string, epoch: number, seq: number, blocks: unknown[]): Promise<void> {
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify({ type: "hello", workerId: id, url: TEST_WORKER_URL, blockSize: B, epoch, modelName: MODEL, kvEvents: true }));
  await welcome;
  const ack = nextMessage(ws, "ack");
  ws.send(JSON.stringify({ type: "dump", epoch, seq, blocks }));
  await ack;
}

async function row(id: string): Promise<{ status: string; synced: boolean; approximate: boolean; blocks: number }> {
  const r = await SELF.fetch(`https://edge/admin/workers?model=${encodeURIComponent(MODEL)}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  const w = ((await r.json()) as { workers: { workerId: string; status: string; synced: boolean; approximate: boolean; blocks: number }[] }).workers.find((x) => x.workerId === id)!;
  return { status: w.status, synced: w.synced, approximate: w.approximate, blocks: w.blocks };
}

/** A worker registered by a relay session at `epoch` with 4 blocks; its key for more connects. */
async function registered(id: string, epoch: number): Promise<{ credential: string; s1: WebSocket }> {
  await initHashing();
  const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), id);
  const s1 = await open(id, credential);
  await helloAndDump(s1, id, epoch, 5, chain(tokens(64, 1), 100));
  return { credential, s1 };
}

/** Says hello at `epoch` on `ws`; the index's `error` answer. */
function refusedHello(ws: WebSocket, id: string, epoch: number): Promise<{ type: string; [k: string]: unknown }> {
  const refused = nextMessage(ws, "error");
  ws.send(JSON.stringify({ type: "hello", workerId: id, url: TEST_WORKER_URL, blockSize: B, epoch, modelName: MODEL, kvEvents: true }));
  return refused;
}

/** Waits until `check` holds (the index handles socket events asynchronously). */
async function until<T>(read: () => Promise<T>, check: (v: T) => boolean): Promise<T> {
  for (let i = 0; i < 100; i++) {
    const v = await read();
    if (check(v)) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  return read();
}

describe("relay sessions", () => {
  it("a newer session closes the older socket; when the newer one closes the worker is no longer synced", async () => {
    await initHashing();
    const id = "w-sessions-1";
    const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), id);
    const blocks = chain(tokens(64, 1), 100);
    const s1 = await open(id, credential);
    const s1Closed = closed(s1);
    await helloAndDump(s1, id, 1, 5, blocks);
    // The relay reconnects (its side of s1 is gone; the index never saw s1 close).
    const s2 = await open(id, credential);
    await helloAndDump(s2, id, 1, 9, blocks);
    expect(await s1Closed).toBe(4009);
    expect(await row(id)).toMatchObject({ status: "up", synced: true, blocks: 4 });
    // The relay dies: its only session ends, and the index says it no longer mirrors the worker.
    s2.close(1001, "relay died");
    expect(await until(() => row(id), (r) => !r.synced)).toMatchObject({ synced: false, approximate: true, blocks: 4 });
  });

  it("a frame arriving late on a superseded socket is not applied", async () => {
    await initHashing();
    const id = "w-sessions-2";
    const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), id);
    const kept = chain(tokens(64, 1), 100);
    const evicted = chain(tokens(64, 5000), 900);
    const s1 = await open(id, credential);
    await helloAndDump(s1, id, 1, 5, kept);
    const s2 = await open(id, credential);
    // The worker stored `evicted` at seq 10 and evicted it at seq 11: the new dump is without it.
    await helloAndDump(s2, id, 1, 11, kept);
    try {
      s1.send(JSON.stringify({ type: "events", epoch: 1, seq: 10, events: [{ t: "stored", parent: null, blocks: evicted.map(({ h, l }) => ({ h, l })) }] }));
    } catch {
      // The index has closed s1 already: nothing can arrive on it.
    }
    // A frame on the live session after it: once it is applied, the late one has been handled too.
    s2.send(JSON.stringify({ type: "events", epoch: 1, seq: 12, events: [] }));
    await new Promise((r) => setTimeout(r, 100));
    expect(await row(id)).toMatchObject({ status: "up", synced: true, approximate: false, blocks: 4 });
    s2.close();
  });

  it("a refused hello of another life ends the registered life when no session of it is open", async () => {
    const id = "w-sessions-3";
    const { credential, s1 } = await registered(id, 1_700_000_100_000);
    s1.close(1001, "worker restarted");
    await until(() => row(id), (r) => !r.synced);
    // The restarted worker's relay has a clock behind: its epoch is lower, and the pool refuses it.
    const s2 = await open(id, credential);
    // The index ends the old life and tells the relay the epoch to say hello above.
    expect(await refusedHello(s2, id, 1_700_000_099_000)).toMatchObject({ message: expect.stringMatching(/stale epoch/), indexEpoch: 1_700_000_100_000 });
    expect(await until(() => row(id), (r) => r.status === "down")).toMatchObject({ status: "down", blocks: 0 });
    const s3 = await open(id, credential);
    await helloAndDump(s3, id, 1_700_000_100_001, 1, chain(tokens(32, 7), 500));
    expect(await row(id)).toMatchObject({ status: "up", synced: true, blocks: 2 });
    s3.close();
  });

  it("a refused hello while the registered life's relay is connected changes nothing (a late relay of an old life)", async () => {
    const id = "w-sessions-4";
    const { credential, s1 } = await registered(id, 1_700_000_100_000);
    const old = await open(id, credential);
    expect((await refusedHello(old, id, 1_700_000_000_000)).indexEpoch).toBeUndefined(); // never an epoch to climb past a live relay
    expect(await row(id)).toMatchObject({ status: "up", synced: true, blocks: 4 });
    s1.close();
  });
});
