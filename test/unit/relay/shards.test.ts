/**
 * Relay fan-out to a sharded routing index (docs/scale.md §3), against real sockets: a fake worker
 * (HTTP + ZMQ) and a fake index whose welcome says `shards: N` and which checks each socket's token
 * against its own shard object's name. Every block must reach exactly the shard of its chain's
 * root, in dumps and in event batches, through resyncs, re-sharding, down/up and approximate mode.
 */
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { RelayMessageSchema, type RelayMessage } from "../../../src/relay-wire/relay-protocol.ts";
import { shardOfHex } from "../../../src/relay-wire/chain-shards.ts";
import { shardObjectName } from "../../../src/routing-index/pool-address.ts";
import { relayUrl, tokenAudience } from "../../../services/relay/index-session.ts";
import { createLogger } from "../../../services/relay/log.ts";
import type { RelayOptionsInput } from "../../../services/relay/options.ts";
import { startRelay, type Relay } from "../../../services/relay/relay.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { checkTestToken, FakeIndex, FakeWorker, indexView, storeEvents, testRelayOptions, waitFor, type IndexConn, type IndexView } from "./fakes.ts";

const SECRET = "shard-secret";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
beforeAll(() => initHashing());

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

const toks = (n: number, start: number): number[] => Array.from({ length: n }, (_, i) => start + i);
const types = (c: IndexConn | undefined): string[] => (c?.messages ?? []).map((m) => m.type);
const dumps = (c: IndexConn | undefined): Extract<RelayMessage, { type: "dump" }>[] =>
  (c?.messages ?? []).filter((m): m is Extract<RelayMessage, { type: "dump" }> => m.type === "dump");
const relayView = (r: Relay): IndexView => new Map(r.blockSet.dumpBlocks().map((b) => [b.h, { p: b.p, l: b.l }]));

/** The shard of a block's chain: its root's local hash, jump-hashed over `n` shards. */
function rootShard(view: IndexView, h: string, n: number): number {
  let e = view.get(h)!;
  while (e.p !== null) e = view.get(e.p)!;
  return shardOfHex(e.l, n);
}

/** The relay's view cut by root shard: what shard k's index should hold. */
function share(r: Relay, n: number, k: number): IndexView {
  const all = relayView(r);
  return new Map([...all].filter(([h]) => rootShard(all, h, n) === k));
}

/** The union of the shards' views; throws if a block sits in two shards. */
function union(views: IndexView[]): IndexView {
  const out: IndexView = new Map();
  for (const v of views) {
    for (const [h, e] of v) {
      if (out.has(h)) throw new Error(`block ${h} in two shards`);
      out.set(h, e);
    }
  }
  return out;
}

interface LogLine {
  level: string;
  msg: string;
  [k: string]: unknown;
}

async function fleet(
  opts: { index?: FakeIndex; shards?: number; extra?: Partial<RelayOptionsInput> } = {},
): Promise<{ worker: FakeWorker; index: FakeIndex; relay: Relay; logs: LogLine[] }> {
  const worker = await FakeWorker.create();
  const index = opts.index ?? (await FakeIndex.create(SECRET));
  if (opts.shards !== undefined) index.shards = opts.shards;
  open.push(worker, index);
  const logs: LogLine[] = [];
  const relay = await startRelay(
    testRelayOptions(worker, index, SECRET, { model: MODEL, ...opts.extra }),
    createLogger({}, "debug", (line) => logs.push(JSON.parse(line) as LogLine)),
  );
  open.push(relay);
  return { worker, index, relay, logs };
}

/** Nine two-block root chains plus three one-block extensions: roots spread over the shards. */
async function publishChains(worker: FakeWorker): Promise<{ leaves: bigint[] }> {
  const roots: bigint[][] = [];
  for (let i = 0; i < 9; i++) {
    const c = storeEvents(toks(8, 1000 * (i + 1)));
    roots.push(c.hashes);
    await worker.pub.publish(c.events);
  }
  const leaves: bigint[] = [];
  for (let i = 0; i < 3; i++) {
    const ext = storeEvents(toks(4, 50_000 + 10 * i), roots[i]![1]!);
    leaves.push(ext.hashes[0]!);
    await worker.pub.publish(ext.events);
  }
  return { leaves };
}

const conns = (index: FakeIndex, n: number): IndexConn[] => Array.from({ length: n }, (_, k) => index.lastOf(k)!);
const converged = (index: FakeIndex, relay: Relay, n: number) => (): boolean => {
  const cs = conns(index, n);
  if (cs.some((c) => c === undefined)) return false;
  try {
    const u = union(cs.map(indexView));
    return u.size === relay.blockSet.size && relay.blockSet.size > 0;
  } catch {
    return false;
  }
};

describe("shard URLs and token audiences", () => {
  it("shard 0 keeps today's URL and model audience; shard k adds &shard=k and signs for <model>#k", () => {
    const u0 = relayUrl("ws://127.0.0.1:8787", "w1", MODEL);
    expect(relayUrl("ws://127.0.0.1:8787", "w1", MODEL, 0)).toBe(u0);
    expect(new URL(u0).searchParams.has("shard")).toBe(false);
    expect(tokenAudience(u0)).toBe(MODEL);
    const u2 = relayUrl("ws://127.0.0.1:8787", "w1", MODEL, 2);
    expect(new URL(u2).searchParams.get("shard")).toBe("2");
    expect(new URL(u2).searchParams.get("model")).toBe(MODEL);
    expect(tokenAudience(u2)).toBe(`${MODEL}#2`);
  });
});

describe("relay fan-out to a sharded index", () => {
  it("opens one socket per shard with its own token, and places every block in its root's shard", async () => {
    const { worker, index, relay } = await fleet({ shards: 3 });
    await waitFor(() => [0, 1, 2].every((k) => types(index.lastOf(k)).includes("dump")), "three shard sessions");
    expect(index.conns).toHaveLength(3);
    expect(index.rejected).toBe(0);
    const [c0, c1, c2] = conns(index, 3) as [IndexConn, IndexConn, IndexConn];
    expect(c0.url.searchParams.has("shard")).toBe(false);
    expect(c1.url.searchParams.get("shard")).toBe("1");
    expect(c2.url.searchParams.get("shard")).toBe("2");
    // Each token opens its own shard object and no other.
    const now = Math.floor(Date.now() / 1000);
    for (const c of [c0, c1, c2]) {
      for (let k = 0; k < 3; k++) {
        const check = await checkTestToken(SECRET, c.headers.authorization ?? null, { workerId: "w1", model: shardObjectName(MODEL, k), nowSeconds: now });
        expect(check.ok, `socket of shard ${c.shard} with audience shard ${k}`).toBe(k === c.shard);
      }
      expect(c.messages[0]).toMatchObject({ type: "hello", workerId: "w1" });
    }

    const { leaves } = await publishChains(worker);
    await waitFor(converged(index, relay, 3), "shards hold the whole set");
    expect(relay.blockSet.size).toBe(21);
    const all = relayView(relay);
    const views = [c0, c1, c2].map(indexView);
    expect(union(views)).toEqual(all);
    views.forEach((v, k) => {
      expect(v.size, `shard ${k} holds something`).toBeGreaterThan(0);
      expect(v).toEqual(share(relay, 3, k));
      for (const h of v.keys()) expect(rootShard(all, h, 3)).toBe(k);
    });
    for (const c of [c0, c1, c2]) for (const m of c.messages) expect(RelayMessageSchema.safeParse(m).success).toBe(true);

    // Removals reach the shard that holds the block, and only that one.
    const before = relay.stats().removedBlocks;
    await worker.pub.publish([["BlockRemoved", leaves, "GPU"]]);
    await waitFor(() => relay.stats().removedBlocks === before + 3 && converged(index, relay, 3)(), "removals applied");
    const removedAt = (h: bigint): number[] =>
      [c0, c1, c2].filter((c) => c.messages.some((m) => m.type === "events" && m.events.some((e) => e.t === "removed" && e.hashes.includes(h.toString())))).map((c) => c.shard);
    for (const h of leaves) expect(removedAt(h)).toEqual([rootShard(all, h.toString(), 3)]);
    [c0, c1, c2].forEach((c, k) => expect(indexView(c)).toEqual(share(relay, 3, k)));

    // AllBlocksCleared goes to every shard.
    await worker.pub.publish([["AllBlocksCleared"]]);
    await waitFor(() => [c0, c1, c2].every((c) => c.messages.some((m) => m.type === "events" && m.events.some((e) => e.t === "cleared"))), "cleared everywhere");
    expect([c0, c1, c2].map((c) => indexView(c).size)).toEqual([0, 0, 0]);

    const st = relay.stats();
    expect(st.shards).toBe(3);
    expect(st.shardSessions.map((s) => s.state)).toEqual(["streaming", "streaming", "streaming"]);
    expect(st.session).toEqual(st.shardSessions[0]);
  });

  it("a resync from one shard re-dumps only that shard's part", async () => {
    const { worker, index, relay } = await fleet({ shards: 3 });
    await publishChains(worker);
    await waitFor(converged(index, relay, 3), "shards hold the whole set");
    const cs = conns(index, 3);
    const before = cs.map((c) => dumps(c).length);
    cs[2]!.ws.send(JSON.stringify({ type: "resync", reason: "test" }));
    await waitFor(() => dumps(cs[2]).length === before[2]! + 1, "shard 2 re-dumps");
    await new Promise((r) => setTimeout(r, 100));
    expect(cs.map((c) => dumps(c).length)).toEqual([before[0], before[1], before[2]! + 1]);
    const again = dumps(cs[2]).pop()!;
    // Exactly shard 2's part, in the set's dump order (parents first).
    const all = relayView(relay);
    expect(again.blocks).toEqual(relay.blockSet.dumpBlocks().filter((b) => rootShard(all, b.h, 3) === 2));
    expect(again.blocks.length).toBeGreaterThan(0);
    expect(relay.stats().shardSessions.map((s) => s.resyncRequests)).toEqual([0, 0, 1]);
  });

  it("grows 1 → 2 when shard 0's next welcome says so: opens shard 1, both dump their part", async () => {
    const { worker, index, relay, logs } = await fleet();
    await publishChains(worker);
    await waitFor(() => indexView(index.lastOf(0)).size === 21, "unsharded view");
    expect(index.conns).toHaveLength(1);
    expect(dumps(index.conns[0]).at(-1)!.blocks.length).toBeGreaterThan(0);
    expect(relay.stats()).toMatchObject({ shards: 1, shardSessions: [{ state: "streaming" }] });

    index.shards = 2;
    index.conns[0]!.ws.terminate(); // the index restarted with two shards: shard 0 reconnects first
    await waitFor(() => index.lastOf(1) !== undefined && types(index.lastOf(1)).includes("dump"), "shard 1 session");
    await waitFor(converged(index, relay, 2), "two shards hold the set");
    const [c0, c1] = conns(index, 2) as [IndexConn, IndexConn];
    expect(c0).not.toBe(index.conns[0]);
    expect(types(c0).slice(0, 2)).toEqual(["hello", "dump"]);
    expect(types(c1).slice(0, 2)).toEqual(["hello", "dump"]);
    expect(indexView(c0)).toEqual(share(relay, 2, 0));
    expect(indexView(c1)).toEqual(share(relay, 2, 1));
    expect(indexView(c0).size).toBeGreaterThan(0);
    expect(indexView(c1).size).toBeGreaterThan(0);
    expect(logs.filter((l) => l.msg === "shards_changed")).toEqual([expect.objectContaining({ from: 1, to: 2 })]);
    expect(relay.stats()).toMatchObject({ shards: 2, shardSessions: [{ state: "streaming" }, { state: "streaming" }] });

    // New events go by root shard from now on.
    const c = storeEvents(toks(8, 777_000));
    await worker.pub.publish(c.events);
    await waitFor(() => relay.blockSet.size === 23 && converged(index, relay, 2)(), "new chain placed");
    expect(indexView(conns(index, 2)[shardOfHex(relayView(relay).get(c.hashes[0]!.toString())!.l, 2)]).has(c.hashes[1]!.toString())).toBe(true);
  });

  it("2 → 3 re-dumps the open shard 1; 3 → 1 closes shards 1 and 2 and shard 0 takes everything", async () => {
    const { worker, index, relay } = await fleet({ shards: 2 });
    await publishChains(worker);
    await waitFor(converged(index, relay, 2), "two shards hold the set");
    const s1 = index.lastOf(1)!;
    const s1Dumps = dumps(s1).length;

    index.shards = 3;
    index.lastOf(0)!.ws.terminate();
    await waitFor(() => types(index.lastOf(2)).includes("dump") && dumps(s1).length === s1Dumps + 1, "shard 2 opened, shard 1 re-dumped");
    await waitFor(converged(index, relay, 3), "three shards hold the set");
    expect(index.lastOf(1)).toBe(s1); // same socket: only its share changed
    conns(index, 3).forEach((c, k) => expect(indexView(c)).toEqual(share(relay, 3, k)));
    expect(indexView(index.lastOf(2)).size).toBeGreaterThan(0);

    index.shards = undefined; // an unsharded index says nothing
    const [, c1, c2] = conns(index, 3);
    index.lastOf(0)!.ws.terminate();
    await waitFor(() => c1!.ws.readyState === c1!.ws.CLOSED && c2!.ws.readyState === c2!.ws.CLOSED, "shards 1 and 2 closed");
    await waitFor(() => indexView(index.lastOf(0)).size === relay.blockSet.size, "shard 0 holds all");
    expect(indexView(index.lastOf(0))).toEqual(relayView(relay));
    expect(relay.stats()).toMatchObject({ shards: 1 });
    expect(relay.stats().shardSessions).toHaveLength(1);
    const conns0 = index.conns.length;
    await new Promise((r) => setTimeout(r, 150));
    expect(index.conns).toHaveLength(conns0); // the closed shards do not reconnect
  });

  it("logs a shard that disagrees about the count and keeps shard 0's number", async () => {
    const index = await FakeIndex.create(SECRET);
    index.shardsSaid = (k) => (k === 1 ? 5 : 2);
    const { worker, relay, logs } = await fleet({ index });
    await publishChains(worker);
    await waitFor(converged(index, relay, 2), "two shards hold the set");
    expect(logs.find((l) => l.msg === "shard_count_disagrees")).toMatchObject({ level: "warn", shard: 1, says: 5, shard0: 2 });
    expect(index.conns).toHaveLength(2);
    expect(relay.stats().shards).toBe(2);
  });

  it("worker down and a new life reach every shard; lost history empties every shard", async () => {
    const { worker, index, relay } = await fleet({ shards: 3 });
    await publishChains(worker);
    await waitFor(converged(index, relay, 3), "three shards hold the set");
    const first = conns(index, 3);

    worker.healthy = false;
    await waitFor(() => first.every((c) => types(c).includes("status")), "status down on every shard");
    for (const c of first) {
      expect(dumps(c).at(-1)!.blocks).toEqual([]);
      expect(c.messages.find((m) => m.type === "status")).toMatchObject({ status: "down" });
      expect(indexView(c).size).toBe(0);
    }

    worker.pub.restart();
    worker.startTime += 60;
    const n = storeEvents(toks(8, 300));
    await worker.pub.publish(n.events);
    worker.healthy = true;
    await waitFor(() => [0, 1, 2].every((k) => index.lastOf(k) !== first[k] && types(index.lastOf(k)).includes("dump")), "new sessions");
    for (let k = 0; k < 3; k++) expect(index.lastOf(k)!.messages[0]).toMatchObject({ type: "hello", epoch: 1_700_000_060_500 });
    await waitFor(() => relay.blockSet.size === 2 && converged(index, relay, 3)(), "new life's blocks");
    const home = shardOfHex(relayView(relay).get(n.hashes[0]!.toString())!.l, 3);
    expect(indexView(index.lastOf(home)).size).toBe(2);

    // A batch lost for good: every shard gets a dump of its share of the kept view, marked approximate.
    const second = conns(index, 3);
    const before = second.map((c) => dumps(c).length);
    await worker.pub.publish(storeEvents(toks(4, 9000)).events, { live: false, buffer: false });
    await worker.pub.publish(storeEvents(toks(4, 9100)).events);
    await waitFor(() => relay.stats().historyLost === 1, "history lost");
    await waitFor(() => second.every((c, k) => dumps(c).length === before[k]! + 1), "empty dump on every shard");
    for (const c of second) expect(dumps(c).at(-1)).toMatchObject({ approximate: true });
    expect(dumps(second[home]!).at(-1)!.blocks).toHaveLength(2);
    await waitFor(converged(index, relay, 3), "shards follow the live block");
    expect(relay.blockSet.size).toBe(3);
  });

  it("approximate mode: every shard gets hello kvEvents=false and an empty dump", async () => {
    const { index, relay } = await fleet({ shards: 3, extra: { kvEvents: "off" } });
    await waitFor(() => [0, 1, 2].every((k) => types(index.lastOf(k)).includes("dump")), "three shard sessions");
    for (const c of conns(index, 3)) {
      expect(c.messages[0]).toMatchObject({ type: "hello", kvEvents: false });
      expect(c.messages[1]).toMatchObject({ type: "dump", seq: -1, blocks: [] });
    }
    expect(relay.stats()).toMatchObject({ kvEvents: false, shards: 3 });
  });
});
