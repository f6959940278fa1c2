/**
 * A pool split over 3 shard objects inside workerd (this project runs with KVEDGE_SHARDS=3):
 * relay sockets per shard with tokens bound to the shard, welcome naming the layout, blocks living
 * only in their chain root's shard, the edge reading one shard per request, load replicated between
 * the shard objects (with its measured lag), and the operator views merging the shards.
 */
import { SELF, env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { shardForRequest, shardObjectName } from "../../src/routing-index/pool-address.ts";
import { initHashing } from "../../src/util/hash.ts";
import { issueRelayKey, nextMessage } from "../workers/ws-helpers.ts";

const urlOf = (worker: string) => `https://${worker}.invalid`;

/** One issued relay credential per worker id (a worker's relay holds only its own). */
const credentials = new Map<string, Promise<string>>();
function credentialOf(worker: string): Promise<string> {
  if (!credentials.has(worker)) credentials.set(worker, issueRelayKey((u, i) => SELF.fetch(u, i), worker, { url: urlOf(worker) }));
  return credentials.get(worker)!;
}
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";
const SHARDS = 3;
const B = 16;

beforeAll(() => initHashing());

function relayUrl(worker: string, shard: number | string | null): string {
  const s = shard === null ? "" : `&shard=${shard}`;
  return `https://edge/v1/relay?worker=${worker}&model=${encodeURIComponent(MODEL)}${s}`;
}

async function tokenFor(worker: string, shard: number): Promise<string> {
  return mintRelayToken(await credentialOf(worker), worker, shardObjectName(MODEL, shard), { url: urlOf(worker) });
}

async function connect(worker: string, shard: number): Promise<{ ws: WebSocket; welcome: Record<string, unknown> }> {
  const res = await SELF.fetch(relayUrl(worker, shard === 0 ? null : shard), {
    headers: { upgrade: "websocket", authorization: `Bearer ${await tokenFor(worker, shard)}` },
  });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify({ type: "hello", workerId: worker, url: urlOf(worker), blockSize: B, epoch: 1, modelName: MODEL }));
  return { ws, welcome: await welcome };
}

async function admin(path: string): Promise<any> {
  const r = await SELF.fetch(`https://edge${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return r.json();
}

/** A prompt whose first block falls in `shard`. */
function promptInShard(shard: number, seed: number): { tokens: number[]; locals: bigint[] } {
  for (let s = seed; ; s++) {
    const tokens = Array.from({ length: 8 * B }, (_, i) => 1000 + ((s * 7919 + i * 31) % 50_000));
    const locals = localBlockHashes(tokens, B);
    if (shardForRequest(locals, SHARDS) === shard) return { tokens, locals };
  }
}

function dumpRows(locals: bigint[], base: number): { h: string; p: string | null; l: string }[] {
  return locals.map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out: ${what}`);
}

describe("sharded routing index (3 shards)", () => {
  it("relay tokens open only their own shard; bad shard numbers are refused", async () => {
    const w = "w-auth";
    const t1 = await tokenFor(w, 1);
    const wrongShard = await SELF.fetch(relayUrl(w, 2), { headers: { upgrade: "websocket", authorization: `Bearer ${t1}` } });
    expect(wrongShard.status).toBe(401);
    const asPool = await SELF.fetch(relayUrl(w, null), { headers: { upgrade: "websocket", authorization: `Bearer ${t1}` } });
    expect(asPool.status).toBe(401);
    for (const bad of ["3", "-1", "x", "99999"]) {
      const r = await SELF.fetch(relayUrl(w, bad), { headers: { upgrade: "websocket", authorization: `Bearer ${t1}` } });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { param: string } }).error.param).toBe("shard");
    }
    const ok = await SELF.fetch(relayUrl(w, 1), { headers: { upgrade: "websocket", authorization: `Bearer ${t1}` } });
    expect(ok.status).toBe(101);
    ok.webSocket!.accept();
    ok.webSocket!.close();
    // Single use, as unsharded.
    const replay = await SELF.fetch(relayUrl(w, 1), { headers: { upgrade: "websocket", authorization: `Bearer ${t1}` } });
    expect(replay.status).toBe(401);
  });

  it("blocks live in their chain root's shard; each shard answers for its own requests; load replicates", async () => {
    const workers = ["w-a", "w-b"];
    const sockets: WebSocket[] = [];
    for (const w of workers)
      for (let k = 0; k < SHARDS; k++) {
        const { ws, welcome } = await connect(w, k);
        expect(welcome).toMatchObject({ shards: SHARDS, shard: k, poolBlockSize: B });
        sockets.push(ws);
      }
    // Worker a caches one chain per shard; b caches nothing.
    const chains = [0, 1, 2].map((k) => promptInShard(k, 100 * k + 1));
    for (let k = 0; k < SHARDS; k++) {
      const ws = sockets[k]!; // w-a's socket to shard k
      ws.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks: dumpRows(chains[k]!.locals, 10_000 * (k + 1)) }));
      await nextMessage(ws, "ack");
      const wsB = sockets[SHARDS + k]!;
      wsB.send(JSON.stringify({ type: "dump", epoch: 1, seq: 0, blocks: [] }));
      await nextMessage(wsB, "ack");
    }
    const shards = (await admin(`/admin/shards?model=${encodeURIComponent(MODEL)}`)).shards as { shard: number; indexedBlocks: number; shards: number }[];
    expect(shards.map((s) => [s.shard, s.indexedBlocks, s.shards])).toEqual([[0, 8, 3], [1, 8, 3], [2, 8, 3]]);
    const ws = (await admin(`/admin/workers?model=${encodeURIComponent(MODEL)}`)).workers as { workerId: string; blocks: number; blocksPerShard: number[]; synced: boolean }[];
    expect(ws.find((w) => w.workerId === "w-a")).toMatchObject({ blocks: 24, blocksPerShard: [8, 8, 8], synced: true });

    // Each shard sees a's overlap only for the chain rooted there.
    for (let k = 0; k < SHARDS; k++)
      for (let j = 0; j < SHARDS; j++) {
        const p = await env.ROUTING_INDEX.getByName(shardObjectName(MODEL, j)).peek({ localHashes: chains[k]!.locals, isl: 8 * B });
        expect(p.candidates.find((c) => c.workerId === "w-a")?.overlapBlocks).toBe(j === k ? 8 : 0);
      }

    // A route on shard 2 adds load there and, within loadSyncMs, on shards 0 and 1.
    const s2 = env.ROUTING_INDEX.getByName(shardObjectName(MODEL, 2));
    const d = (await s2.route({ localHashes: chains[2]!.locals, isl: 8 * B }))!;
    expect(d).toMatchObject({ workerId: "w-a", overlapBlocks: 8 });
    for (const k of [0, 1]) {
      const peer = env.ROUTING_INDEX.getByName(shardObjectName(MODEL, k));
      await until(async () => (await peer.shardInfo()).activeRequests === 1, `shard ${k} sees the load`);
      const info = await peer.shardInfo();
      expect(info.loadSync).toMatchObject({ opsReceived: 1, opsApplied: 1 });
      expect(info.loadSync.lag.samples).toBe(1);
    }
    // The replica steers a cold request on shard 0 away from the busy worker.
    const cold = promptInShard(0, 9_999);
    expect((await env.ROUTING_INDEX.getByName(MODEL).route({ localHashes: cold.locals, isl: 8 * B }))!.workerId).toBe("w-b");
    const s1 = env.ROUTING_INDEX.getByName(shardObjectName(MODEL, 1));
    await until(async () => (await s1.shardInfo()).activeRequests === 2, "shard 1 sees both requests");
    await s2.settle({ receiptId: d.receiptId, promptTokens: 8 * B, cachedTokens: 8 * B, outcome: "ok" });
    await until(async () => (await s1.shardInfo()).activeRequests === 1, "release reaches shard 1");
    expect((await s2.shardInfo()).loadSync).toMatchObject({ opsSent: 2, batchesSent: 2, sendFailures: 0 });
    const stats = await admin(`/admin/stats?model=${encodeURIComponent(MODEL)}`);
    expect(stats.shards).toHaveLength(3);
    const metrics = await (await SELF.fetch("https://edge/metrics", { headers: { authorization: `Bearer ${ADMIN}` } })).text();
    expect(metrics).toMatch(/kvedge_index_blocks\{[^}]*\} 24/);
    // Relays gone: every shard keeps its last copy but stops calling the workers synced (approximate).
    for (const s of sockets) s.close();
    await until(async () => {
      const ws = (await admin(`/admin/workers?model=${encodeURIComponent(MODEL)}`)).workers as { synced: boolean; approximate: boolean; blocks: number }[];
      return ws.some((w) => w.blocks > 0) && ws.every((w) => !w.synced && (w.approximate || w.blocks === 0));
    }, "workers with blocks approximate, none synced, after the relays left");
    const all = (await admin(`/admin/shards?model=${encodeURIComponent(MODEL)}`)).shards as { indexedBlocks: number }[];
    expect(all.reduce((a, x) => a + x.indexedBlocks, 0)).toBe(24);
  });
});
