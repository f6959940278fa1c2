/**
 * `lastSeen` in /admin/workers is the time of the relay's last message of any kind (here a ping
 * with no block change), kept in memory by the index (written to SQLite lazily), not the time of
 * the last hello or status row.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";
import { nextMessage, openRelay } from "./ws-helpers.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";

async function lastSeen(workerId: string): Promise<number> {
  const r = await SELF.fetch(`https://edge/admin/workers?model=${encodeURIComponent(MODEL)}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  const { workers } = (await r.json()) as { workers: { workerId: string; lastSeen: number }[] };
  return workers.find((w) => w.workerId === workerId)!.lastSeen;
}

describe("lastSeen", () => {
  it("moves with every relay message, pings included", async () => {
    await initHashing();
    const ws = await openRelay((u, i) => SELF.fetch(u, i), "seen-w1", { model: MODEL, hello: { epoch: 3 }, emptyDump: true });
    const first = await lastSeen("seen-w1");
    await new Promise((r) => setTimeout(r, 30));
    const pong = nextMessage(ws, "pong");
    ws.send(JSON.stringify({ type: "ping", t: 1 }));
    await pong;
    const second = await lastSeen("seen-w1");
    expect(second).toBeGreaterThan(first);
    expect(Date.now() - second).toBeLessThan(5_000);
    ws.close();
  });
});
