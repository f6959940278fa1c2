/**
 * `GET /admin/workers/<id>/local-hashes` against the real edge and routing index (workerd): pages of
 * at most `limit` (default 1 000, at most 10 000) in ascending order, a nextCursor until the last.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../src/util/hash.ts";
import { issueRelayKey, nextMessage, TEST_WORKER_URL } from "./ws-helpers.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";
const B = 16;

/** A worker whose relay dumped one chain of `n` blocks; their local hashes. */
async function workerWith(id: string, n: number): Promise<string[]> {
  await initHashing();
  const credential = await issueRelayKey((u, i) => SELF.fetch(u, i), id);
  const token = await mintRelayToken(credential, id, MODEL, { url: TEST_WORKER_URL });
  const res = await SELF.fetch(`https://edge/v1/relay?worker=${id}&model=${encodeURIComponent(MODEL)}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const locals = localBlockHashes(Array.from({ length: n * B }, (_, i) => i + 1), B).map(localHashToHex);
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify({ type: "hello", workerId: id, url: TEST_WORKER_URL, blockSize: B, epoch: 1, modelName: MODEL, kvEvents: true }));
  await welcome;
  const ack = nextMessage(ws, "ack");
  ws.send(JSON.stringify({ type: "dump", epoch: 1, seq: 1, blocks: locals.map((l, i) => ({ h: String(1000 + i), p: i === 0 ? null : String(999 + i), l })) }));
  await ack;
  return locals;
}

async function page(id: string, query: string): Promise<{ status: number; body: { localHashes?: string[]; nextCursor?: string | null; error?: { param: string | null } } }> {
  const r = await SELF.fetch(`https://edge/admin/workers/${id}/local-hashes?model=${encodeURIComponent(MODEL)}${query}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return { status: r.status, body: (await r.json()) as never };
}

describe("GET /admin/workers/<id>/local-hashes", () => {
  it("pages through every hash once, ascending, with a cursor until the last page", async () => {
    const locals = await workerWith("lh-1", 25);
    const seen: string[] = [];
    let cursor: string | null = null;
    const sizes: number[] = [];
    do {
      const p = await page("lh-1", `&limit=10${cursor ? `&cursor=${cursor}` : ""}`);
      expect(p.status).toBe(200);
      sizes.push(p.body.localHashes!.length);
      seen.push(...p.body.localHashes!);
      cursor = p.body.nextCursor!;
    } while (cursor !== null && sizes.length < 10);
    expect(sizes).toEqual([10, 10, 5]);
    expect(seen).toEqual([...locals].sort());
    // Default limit: all 25 in one page, no cursor.
    const all = await page("lh-1", "");
    expect(all.body).toMatchObject({ localHashes: [...locals].sort(), nextCursor: null });
  });

  it("refuses a limit out of 1…10 000 and a cursor that is not 16 hex digits", async () => {
    await workerWith("lh-2", 2);
    for (const [q, param] of [["&limit=0", "limit"], ["&limit=10001", "limit"], ["&limit=abc", "limit"], ["&cursor=zz", "cursor"], ["&cursor=00000000000000AB", "cursor"]] as const) {
      const p = await page("lh-2", q);
      expect(p.status, q).toBe(400);
      expect(p.body.error!.param).toBe(param);
    }
    expect((await page("lh-2", "&limit=10000")).status).toBe(200);
  });
});
