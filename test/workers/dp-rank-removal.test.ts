/**
 * Inside workerd: removing a DP-attention worker from the pool object removes every rank target
 * (`<worker>#<rank>`): their rows, their stored rows (gone after the object restarts) and their
 * relay sockets (closed 4004); removing one rank target leaves the others.
 */
import { SELF, env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { issueRelayKey, TEST_WORKER_URL } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";

async function rankSession(credential: string, worker: string, rank: number): Promise<WebSocket> {
  const token = await mintRelayToken(credential, worker, MODEL, { url: TEST_WORKER_URL });
  const res = await SELF.fetch(`https://edge/v1/relay?worker=${worker}&model=${encodeURIComponent(MODEL)}&rank=${rank}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const welcome = new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no welcome within 10 s")), 10_000);
    ws.addEventListener("message", (ev) => {
      if ((JSON.parse(String(ev.data)) as { type: string }).type === "welcome") {
        clearTimeout(t);
        resolve();
      }
    });
  });
  ws.send(JSON.stringify({ type: "hello", workerId: worker, url: TEST_WORKER_URL, blockSize: 16, epoch: 1, modelName: MODEL, dpSize: 2, dpRank: rank }));
  await welcome;
  return ws;
}

async function ids(): Promise<string[]> {
  const rows = (await env.ROUTING_INDEX.getByName(MODEL).workers()) as { workerId: string }[];
  return rows.map((w) => w.workerId).filter((id) => id.startsWith("w-rm")).sort();
}

describe("removing a DP worker", () => {
  it("removes all its rank targets, rows and sessions; a rank target alone only itself", async () => {
    const a = await issueRelayKey((u, i) => SELF.fetch(u, i), "w-rm", { dpSize: 2 });
    const b = await issueRelayKey((u, i) => SELF.fetch(u, i), "w-rm2", { dpSize: 2 });
    const sockets = [await rankSession(a, "w-rm", 0), await rankSession(a, "w-rm", 1), await rankSession(b, "w-rm2", 0), await rankSession(b, "w-rm2", 1)];
    expect(await ids()).toEqual(["w-rm#0", "w-rm#1", "w-rm2#0", "w-rm2#1"]);
    const closed = sockets.map((ws) => new Promise<number>((resolve) => ws.addEventListener("close", (ev) => resolve(ev.code))));

    const stub = env.ROUTING_INDEX.getByName(MODEL);
    expect(await stub.removeWorker("w-rm2#1")).toBe(true);
    expect(await stub.removeWorker("w-rm")).toBe(true);
    expect(await ids()).toEqual(["w-rm2#0"]);
    expect(await Promise.all([closed[0], closed[1], closed[3]])).toEqual([4004, 4004, 4004]);
    expect(await stub.removeWorker("w-rm")).toBe(false);

    // Their stored rows are gone too: a restarted object does not bring them back.
    sockets[2]!.close();
    await evictDurableObject(env.ROUTING_INDEX.getByName(MODEL));
    expect((await ids()).filter((id) => id.startsWith("w-rm#"))).toEqual([]);
  });
});
