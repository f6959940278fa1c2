/**
 * The whole relay (startRelay) against real sockets: a fake worker (HTTP + ZMQ PUB + replay
 * ROUTER) and a fake index (ws server verifying the relay token). Checks the session protocol
 * (hello → welcome → dump → events), reconnects, resync, fail-safe on lost history, worker
 * down/up (new epoch) and startup refusals; and the session's liveness deadline (IndexSession alone
 * against a bare ws server that stops answering or reading without closing).
 */
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { localBlockHash } from "../../../src/blocks/block-hash.ts";
import { localHashToHex, RelayMessageSchema, type RelayMessage } from "../../../src/relay-wire/relay-protocol.ts";
import { backoffDelay, IndexSession, MAX_SEND_BACKLOG_BYTES, relayUrl, type IndexSessionOptions } from "../../../services/relay/index-session.ts";
import { silentLogger } from "../../../services/relay/log.ts";
import type { RelayOptionsInput } from "../../../services/relay/options.ts";
import { startRelay, type Relay } from "../../../services/relay/relay.ts";
import { RelayStartupError } from "../../../services/relay/worker-info.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { WebSocketServer, type WebSocket } from "ws";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { checkTestToken, FakeIndex, FakeWorker, indexView, storeEvents, testCredential, testRelayOptions, waitFor, type IndexConn } from "./fakes.ts";

const SECRET = "test-secret";
const B = 4;

/** An index session for worker w1 of model m at `url`, with short test timings; `extra` overrides. */
function sessionOptions(url: string, extra: Partial<IndexSessionOptions> = {}): IndexSessionOptions {
  return {
    url,
    token: testCredential(SECRET),
    hello: () => ({ type: "hello", workerId: "w1", url: "http://127.0.0.1:1", blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }),
    snapshot: () => ({ epoch: 1, seq: 0, blocks: [] }),
    downReason: () => null,
    flushIntervalMs: 1,
    flushBlocks: 1000,
    backoffBaseMs: 20,
    backoffCapMs: 100,
    welcomeTimeoutMs: 2000,
    dumpChunkBlocks: 1000,
    pingIntervalMs: 1000,
    log: silentLogger,
    ...extra,
  };
}
beforeAll(() => initHashing());

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

const toks = (n: number, start: number): number[] => Array.from({ length: n }, (_, i) => start + i);

const relayView = (r: Relay): Map<string, { p: string | null; l: string }> =>
  new Map(r.blockSet.dumpBlocks().map((b) => [b.h, { p: b.p, l: b.l }]));
const types = (c: IndexConn): string[] => c.messages.map((m) => m.type);

async function fleet(
  opts: { worker?: FakeWorker; index?: FakeIndex; extra?: Partial<RelayOptionsInput> } = {},
): Promise<{ worker: FakeWorker; index: FakeIndex; relay: Relay }> {
  const worker = opts.worker ?? (await FakeWorker.create());
  const index = opts.index ?? (await FakeIndex.create(SECRET));
  open.push(worker, index);
  const relay = await startRelay(testRelayOptions(worker, index, SECRET, opts.extra), silentLogger);
  open.push(relay);
  return { worker, index, relay };
}

describe("session helpers", () => {
  it("builds the relay URL and bounded jittered backoff", () => {
    const u = new URL(relayUrl("ws://127.0.0.1:8787", "w1", "Qwen/Qwen3-VL-8B-Instruct"));
    expect(u.pathname).toBe("/v1/relay");
    expect(u.searchParams.get("worker")).toBe("w1");
    expect(u.searchParams.get("model")).toBe("Qwen/Qwen3-VL-8B-Instruct");
    expect(backoffDelay(0, 100, 5000, () => 0)).toBe(50);
    expect(backoffDelay(0, 100, 5000, () => 1)).toBe(100);
    expect(backoffDelay(3, 100, 5000, () => 1)).toBe(800);
    expect(backoffDelay(40, 100, 5000, () => 1)).toBe(5000);
    expect(backoffDelay(40, 100, 5000, () => 0)).toBe(2500);
  });
});

describe("relay session", () => {
  it("hello → welcome → dump (incl. history from replay) → events, with the relay token", async () => {
    const worker = await FakeWorker.create();
    const a = storeEvents(toks(8, 1));
    await worker.pub.publish(a.events); // before the relay exists: only replay can deliver it
    const { index, relay } = await fleet({ worker });

    await waitFor(() => (index.last?.messages.length ?? 0) >= 2, "hello + dump");
    const conn = index.last!;
    const now = Math.floor(Date.now() / 1000);
    const model = "Qwen/Qwen3-VL-8B-Instruct";
    expect(await checkTestToken(SECRET, conn.headers.authorization ?? null, { workerId: "w1", model, nowSeconds: now })).toMatchObject({ ok: true });
    expect(conn.url.pathname).toBe("/v1/relay");
    expect(conn.url.searchParams.get("worker")).toBe("w1");
    for (const m of conn.messages) expect(RelayMessageSchema.safeParse(m).success).toBe(true);
    const [hello, dump] = conn.messages as [RelayMessage, RelayMessage];
    expect(hello).toMatchObject({
      type: "hello",
      workerId: "w1",
      url: worker.url,
      blockSize: B,
      epoch: 1_700_000_000_500,
      modelName: "Qwen/Qwen3-VL-8B-Instruct",
      contract: null,
      kvEvents: true,
      incrementalStreaming: false,
      kvCapacityTokens: 8192,
    });
    expect(dump).toEqual({
      type: "dump",
      epoch: 1_700_000_000_500,
      seq: 0,
      blocks: [
        { h: a.hashes[0]!.toString(), p: null, l: localHashToHex(localBlockHash(toks(4, 1))) },
        { h: a.hashes[1]!.toString(), p: a.hashes[0]!.toString(), l: localHashToHex(localBlockHash(toks(4, 5))) },
      ],
    });

    // Live events stream as `events` messages (the SUB may miss the first ones: replay covers).
    const b = storeEvents(toks(8, 100), a.hashes[1]!);
    await worker.pub.publish(b.events);
    await worker.pub.publish([["BlockRemoved", [b.hashes[1]!], "GPU"]]);
    await worker.pub.publish([["BlockStored", [77], null, [1, 2, 3], 3, null, "GPU"]]); // wrong size: dropped
    await waitFor(() => relay.stats().lastSeq === 3, "live batches");
    await waitFor(() => indexView(conn).size === 3, "events reach the index");
    expect(indexView(conn)).toEqual(relayView(relay));
    expect(conn.messages.slice(2).every((m) => m.type === "events")).toBe(true);
    const st = relay.stats();
    expect(st.blocks).toBe(3);
    expect(st.dropped["wrong_block_size"]).toBe(1);
    expect(st.session.state).toBe("streaming");
  });

  it("opens its socket without per-message compression, even to an index that would deflate", async () => {
    // Compressed sends queue behind the relay's KV-batch decoding: a heavy event stream left the
    // index seconds behind the worker (index-session.ts, open()).
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: true });
    open.push({ close: () => new Promise((r) => wss.close(r)) });
    await new Promise<void>((r) => (wss.address() ? r() : wss.once("listening", () => r())));
    const seen: { offered: string | undefined; negotiated: string }[] = [];
    wss.on("connection", (ws, req) => seen.push({ offered: req.headers["sec-websocket-extensions"], negotiated: ws.extensions }));
    const s = new IndexSession(sessionOptions(relayUrl(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, "w1", "m")));
    open.push(s);
    s.start();
    await waitFor(() => seen.length === 1, "the relay's connect");
    expect(seen[0]).toEqual({ offered: undefined, negotiated: "" });
  });

  it("sends nothing but hello until welcomed", async () => {
    const index = await FakeIndex.create(SECRET);
    index.autoWelcome = false;
    const { worker, relay } = await fleet({ index });
    await waitFor(() => index.last?.messages.length === 1, "hello");
    await worker.pub.publish(storeEvents(toks(4, 1)).events);
    await waitFor(() => relay.stats().blocks === 1, "block applied");
    expect(types(index.last!)).toEqual(["hello"]);
    index.welcome(index.last!);
    await waitFor(() => index.last!.messages.length === 2, "dump");
    expect(index.last!.messages[1]).toMatchObject({ type: "dump", blocks: [{ p: null }] });
  });

  it("a hello refused as older than a life the index has ended (error indexEpoch): hello again above it", async () => {
    const index = await FakeIndex.create(SECRET);
    index.autoWelcome = false;
    const { relay } = await fleet({ index });
    await waitFor(() => index.last?.messages.length === 1, "hello");
    const first = index.last!.messages[0] as { type: string; epoch: number };
    // An error without indexEpoch (the life is still held by a live relay) changes nothing.
    index.last!.ws.send(JSON.stringify({ type: "error", message: `stale epoch ${first.epoch} < ${first.epoch + 5000}` }));
    await new Promise((r) => setTimeout(r, 100));
    expect(index.conns).toHaveLength(1);
    index.last!.ws.send(JSON.stringify({ type: "error", message: `stale epoch ${first.epoch} < ${first.epoch + 5000}`, indexEpoch: first.epoch + 5000 }));
    await waitFor(() => index.conns.length === 2 && index.last!.messages.length === 1, "a new session's hello");
    expect(index.last!.messages[0]).toMatchObject({ type: "hello", epoch: first.epoch + 5001 });
    index.welcome(index.last!);
    await waitFor(() => relay.stats().session.state === "streaming", "streaming");
    expect(relay.stats().epoch).toBe(first.epoch + 5001);
  });

  it("reconnects after the index drops it and sends hello + a fresh dump again", async () => {
    const { worker, index, relay } = await fleet();
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await waitFor(() => indexView(index.conns[0]).size === 2, "first view");
    index.conns[0]!.ws.terminate();
    const c = storeEvents(toks(4, 500));
    await worker.pub.publish(c.events); // while disconnected (or just after)
    await waitFor(() => index.conns.length === 2 && types(index.conns[1]!).includes("dump"), "second session");
    await waitFor(() => relay.stats().blocks === 3 && indexView(index.conns[1]!).size === 3, "state converged");
    const second = index.conns[1]!;
    expect(types(second).slice(0, 2)).toEqual(["hello", "dump"]);
    // A fresh single-use token per connect.
    expect(second.headers.authorization).not.toBe(index.conns[0]!.headers.authorization);
    expect(await checkTestToken(SECRET, second.headers.authorization ?? null, { workerId: "w1", model: "Qwen/Qwen3-VL-8B-Instruct", nowSeconds: Math.floor(Date.now() / 1000) })).toMatchObject({ ok: true });
    expect(indexView(second)).toEqual(relayView(relay));
    expect(relay.stats().session.connects).toBe(2);
  });

  it("keeps retrying with backoff when the index refuses its token", async () => {
    const index = await FakeIndex.create("a-different-secret");
    await fleet({ index });
    await waitFor(() => index.rejected >= 3, "three refused attempts");
    expect(index.conns).toHaveLength(0);
  });

  it("splits a large dump: the first chunk as `dump`, the rest as stored events, parents first", async () => {
    const worker = await FakeWorker.create();
    await worker.pub.publish(storeEvents(toks(20, 1)).events); // 5 blocks
    const { index, relay } = await fleet({ worker, extra: { dumpChunkBlocks: 2 } });
    await waitFor(() => indexView(index.last).size === 5, "chunked dump");
    const conn = index.last!;
    expect(types(conn)).toEqual(["hello", "dump", "events", "events"]);
    // The dump says how many blocks follow, so the index does not report the worker synced before them.
    expect(conn.messages[1]).toMatchObject({ type: "dump", seq: 0, continues: 3 });
    expect((conn.messages[1] as { blocks: unknown[] }).blocks).toHaveLength(2);
    for (const m of conn.messages) expect(RelayMessageSchema.safeParse(m).success).toBe(true);
    expect(indexView(conn)).toEqual(relayView(relay));
  });

  it("answers resync with a fresh dump", async () => {
    const { worker, index, relay } = await fleet();
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await waitFor(() => indexView(index.last!).size === 2, "view");
    const dumps = (): number => types(index.last!).filter((t) => t === "dump").length;
    const before = dumps();
    index.last!.ws.send(JSON.stringify({ type: "resync", reason: "test" }));
    await waitFor(() => dumps() === before + 1, "resync dump");
    const lastDump = [...index.last!.messages].reverse().find((m) => m.type === "dump")!;
    expect(lastDump).toMatchObject({ type: "dump", blocks: relay.blockSet.dumpBlocks() });
    expect(relay.stats().session.resyncRequests).toBe(1);
  });

  it("a malformed index frame (null, not JSON, a known type with bad fields) ends the session with a logged reason; it reconnects; an unknown type is ignored", async () => {
    const { worker, index, relay } = await fleet();
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await waitFor(() => indexView(index.last!).size === 2, "view");
    // A newer index's message type: ignored, the session stays.
    index.conns[0]!.ws.send(JSON.stringify({ type: "shard_moved", to: 3 }));
    index.conns[0]!.ws.send(JSON.stringify({ type: "resync", reason: "still here" }));
    await waitFor(() => relay.stats().session.resyncRequests === 1, "the session still reads");
    expect(index.conns).toHaveLength(1);
    const frames: [string, RegExp][] = [
      ["null", /bad index message \(no type: message: /],
      ["{not json", /bad index message \(not JSON\)/],
      [JSON.stringify({ type: "resync" }), /bad index message \(resync: reason: /],
      [JSON.stringify({ type: "welcome", workerId: "w1", epoch: -1, poolBlockSize: B }), /bad index message \(welcome: epoch: /],
    ];
    for (const [i, [frame, reason]] of frames.entries()) {
      await waitFor(() => index.conns.length === i + 1 && types(index.conns[i]!).includes("dump"), `session ${i + 1}`);
      index.conns[i]!.ws.send(frame);
      await waitFor(() => index.conns.length === i + 2 && types(index.conns[i + 1]!).includes("dump"), `reconnect after ${frame}`);
      expect(relay.stats().session.lastError).toMatch(reason);
    }
    expect(relay.stats().session.connects).toBe(frames.length + 1);
    expect(indexView(index.last!)).toEqual(relayView(relay));
  });

  it("on an unrecoverable gap keeps its view, says it is approximate, and is exact again after AllBlocksCleared", async () => {
    const { worker, index, relay } = await fleet();
    const a = storeEvents(toks(8, 1));
    await worker.pub.publish(a.events);
    await waitFor(() => indexView(index.last!).size === 2, "view");
    // A batch lost everywhere (not even in the replay buffer), then an extension of the lost
    // state and a brand-new root prompt.
    const lost = storeEvents(toks(4, 9), a.hashes[1]!);
    await worker.pub.publish(lost.events, { live: false, buffer: false });
    const child = storeEvents(toks(4, 13), lost.hashes[0]!);
    const fresh = storeEvents(toks(4, 900));
    const last = await worker.pub.publish([...child.events, ...fresh.events]);
    await waitFor(() => relay.stats().lastSeq === last, "resumed");
    await waitFor(() => indexView(index.last!).size === 3, "index view after loss");
    const conn = index.last!;
    const dumps = conn.messages.filter((m) => m.type === "dump");
    // The kept view (which may now hold evicted blocks) goes out flagged: never as an exact mirror.
    expect(dumps[dumps.length - 1]).toMatchObject({ approximate: true });
    expect([...indexView(conn).keys()].sort()).toEqual([...a.hashes, fresh.hashes[0]!].map(String).sort());
    const st = relay.stats();
    expect(st.historyLost).toBe(1);
    expect(st.approximate).toMatch(/history lost/);
    expect(st.dropped["unknown_parent"]).toBe(1);

    // The worker's cache is reset (flush_cache): the view is exact again, and the index sees the same event.
    const cleared = await worker.pub.publish([["AllBlocksCleared"]]);
    await waitFor(() => relay.stats().lastSeq === cleared, "cleared applied");
    expect(relay.stats().approximate).toBeNull();
    await waitFor(() => indexView(index.last!).size === 0, "index cleared");
  });

  it("worker down → status down + empty dump; back as a new process → hello with a new epoch", async () => {
    const { worker, index, relay } = await fleet();
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await waitFor(() => indexView(index.last!).size === 2, "view");

    worker.healthy = false;
    await waitFor(() => types(index.last!).includes("status"), "status down");
    const conn = index.last!;
    const i = types(conn).lastIndexOf("dump");
    expect(conn.messages[i]).toMatchObject({ type: "dump", blocks: [] });
    expect(conn.messages.find((m) => m.type === "status")).toMatchObject({ status: "down", epoch: 1_700_000_000_500 });
    expect(relay.stats().worker).toBe("down");
    expect(relay.blockSet.size).toBe(0);

    // A new process: seq restarts at 0, new start time, some history already in its buffer.
    worker.pub.restart();
    worker.startTime += 60;
    const n = storeEvents(toks(4, 300));
    await worker.pub.publish(n.events);
    worker.healthy = true;
    await waitFor(() => index.conns.length === 2 && types(index.conns[1]!).includes("dump"), "new session");
    const second = index.conns[1]!;
    expect(second.messages[0]).toMatchObject({ type: "hello", epoch: 1_700_000_060_500 });
    await waitFor(() => indexView(second).size === 1, "new life's blocks");
    expect([...indexView(second).keys()]).toEqual([n.hashes[0]!.toString()]);
    expect(relay.stats()).toMatchObject({ worker: "up", epoch: 1_700_000_060_500, workerDowns: 1, newLives: 1 });
  });
});

/**
 * An index that welcomes and records, and answers pings only while `answerPings` is set; it never
 * closes a connection itself (a dead path: nothing arrives, nothing is closed). `stopReading`
 * also stops reading the socket (an index that no longer consumes what the relay sends).
 */
class SilentIndex {
  answerPings = true;
  /** Stop reading a connection once its hello is welcomed: all the relay sends after stays in its buffer. */
  stopReadingAfterWelcome = false;
  readonly conns: { ws: WebSocket; messages: RelayMessage[]; closed: boolean }[] = [];
  private readonly wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });

  constructor() {
    this.wss.on("connection", (ws) => {
      const conn = { ws, messages: [] as RelayMessage[], closed: false };
      this.conns.push(conn);
      ws.on("close", () => (conn.closed = true));
      ws.on("message", (data) => {
        const msg = JSON.parse(data.toString()) as RelayMessage;
        conn.messages.push(msg);
        if (msg.type === "hello") ws.send(JSON.stringify({ type: "welcome", workerId: msg.workerId, epoch: msg.epoch, poolBlockSize: B }));
        if (msg.type === "hello" && this.stopReadingAfterWelcome) this.stopReading(this.conns.indexOf(conn));
        if (msg.type === "ping" && this.answerPings) ws.send(JSON.stringify({ type: "pong", t: msg.t }));
      });
    });
  }

  ready(): Promise<void> {
    return new Promise((r) => (this.wss.address() ? r() : this.wss.once("listening", () => r())));
  }

  get url(): string {
    return `ws://127.0.0.1:${(this.wss.address() as AddressInfo).port}`;
  }

  stopReading(i: number): void {
    (this.conns[i]!.ws as unknown as { _socket: Socket })._socket.pause();
  }

  private readonly slowReads: NodeJS.Timeout[] = [];

  /** Reads what arrived once every `everyMs`, then pauses again: an index that keeps reading, slower than the relay sends. */
  readSlowly(i: number, everyMs: number): void {
    const socket = (this.conns[i]!.ws as unknown as { _socket: Socket })._socket;
    socket.pause();
    this.slowReads.push(
      setInterval(() => {
        socket.resume();
        setImmediate(() => socket.pause());
      }, everyMs),
    );
  }

  async close(): Promise<void> {
    for (const t of this.slowReads) clearInterval(t);
    for (const c of this.conns) c.ws.terminate();
    await new Promise((r) => this.wss.close(r));
  }
}

describe("index liveness (no pong within the deadline)", () => {
  const PING_MS = 100;
  const PONG_TIMEOUT_MS = 300;

  async function session(extra: Partial<IndexSessionOptions> = {}, index = new SilentIndex()): Promise<{ index: SilentIndex; session: IndexSession; epochs: number[] }> {
    await index.ready();
    open.push(index);
    let epoch = 1;
    const epochs: number[] = [];
    const s = new IndexSession(
      sessionOptions(relayUrl(index.url, "w1", "m"), {
        hello: () => ({ type: "hello", workerId: "w1", url: "http://127.0.0.1:1", blockSize: B, epoch, modelName: "m", contract: null, kvEvents: true }),
        snapshot: () => {
          epochs.push(epoch);
          return { epoch, seq: 0, blocks: [{ h: "1", p: null, l: "00000000000000aa" }] };
        },
        backoffCapMs: 200,
        pingIntervalMs: PING_MS,
        pongTimeoutMs: PONG_TIMEOUT_MS,
        ...extra,
      }),
    );
    open.push(s);
    s.start();
    epoch = 2; // a later hello is a new one
    return { index, session: s, epochs };
  }
  const kinds = (c: { messages: RelayMessage[] }): string[] => c.messages.map((m) => m.type);

  it("terminates a connection the index stopped answering (never closed) and reconnects with hello + a fresh dump", async () => {
    const { index, session: s } = await session();
    await waitFor(() => index.conns.length === 1 && kinds(index.conns[0]!).includes("dump"), "first dump");
    index.answerPings = false; // the path goes dead: nothing comes back, nothing is closed
    s.pushEvents(1, 1, [{ t: "stored", parent: "1", blocks: [{ h: "2", l: "00000000000000bb" }] }]);
    await waitFor(() => index.conns.length === 2 && kinds(index.conns[1]!).includes("dump"), "second session's dump", 5000);
    const [first, second] = index.conns as [(typeof index.conns)[0], (typeof index.conns)[0]];
    expect(kinds(first)).toContain("ping"); // it did ping, and heard nothing back
    await waitFor(() => first.closed, "the dead connection is gone");
    expect(kinds(second).slice(0, 2)).toEqual(["hello", "dump"]);
    expect(second.messages[0]).toMatchObject({ type: "hello", epoch: 2 });
    expect(s.stats()).toMatchObject({ connects: 2, welcomes: 2, dumpsSent: 2, livenessTimeouts: 1 });
    expect(s.stats().lastError).toMatch(/no pong within 300 ms/);

    // The new connection is answered: it stays.
    index.answerPings = true;
    const pings = (): number => kinds(second).filter((t) => t === "ping").length;
    await waitFor(() => pings() >= 4, "pings answered on the new connection");
    expect(index.conns).toHaveLength(2);
    expect(s.stats()).toMatchObject({ state: "streaming", livenessTimeouts: 1 });
  });

  it("keeps a connection whose pings are answered", async () => {
    const { index, session: s } = await session();
    await waitFor(() => index.conns.length === 1 && kinds(index.conns[0]!).filter((t) => t === "ping").length >= 8, "8 pings answered");
    // 8 pings span ≥ 2.5 deadlines: an unanswered connection would have been dropped by now.
    expect(index.conns).toHaveLength(1);
    expect(index.conns[0]!.closed).toBe(false);
    expect(s.stats()).toMatchObject({ state: "streaming", connects: 1, livenessTimeouts: 0 });
  });

  it("treats an index that stopped reading (send buffer stalled, ping stuck behind it) as dead", async () => {
    const { index, session: s } = await session();
    await waitFor(() => index.conns.length === 1 && kinds(index.conns[0]!).includes("dump"), "first dump");
    index.stopReading(0);
    // Far more than the socket buffers hold (yet under the backlog cap): the relay's own send buffer
    // fills and stops draining.
    const stored = Array.from({ length: 1000 }, (_, i) => ({ t: "stored" as const, parent: null, blocks: [{ h: String(1000 + i), l: "00000000000000cc" }] }));
    const batchBytes = JSON.stringify({ type: "events", epoch: 1, seq: 1, events: stored }).length;
    for (let i = 0; i < (0.7 * MAX_SEND_BACKLOG_BYTES) / batchBytes; i++) s.pushEvents(1, i + 1, stored);
    await waitFor(() => index.conns.length === 2 && kinds(index.conns[1]!).includes("dump"), "second session's dump", 5000);
    expect(s.stats().livenessTimeouts).toBe(1);
    expect(s.stats().lastError).toMatch(/send buffer stalled/);
  });

  it("terminates a connection whose send buffer keeps growing while the index still reads, slower than the relay sends", async () => {
    // Liveness alone keeps such a socket: its buffer drains, just less than it fills.
    const { index, session: s } = await session({ pongTimeoutMs: 60_000 });
    await waitFor(() => index.conns.length === 1 && kinds(index.conns[0]!).includes("dump"), "first dump");
    index.readSlowly(0, 50);
    // ~1.5 MB of events every 10 ms, until the relay gives the connection up (or 3× the cap was offered).
    const stored = Array.from({ length: 1000 }, (_, i) => ({ t: "stored" as const, parent: null, blocks: [{ h: String(1000 + i), l: "00000000000000cc" }] }));
    const batchBytes = JSON.stringify({ type: "events", epoch: 1, seq: 1, events: stored }).length;
    let seq = 0;
    const feed = setInterval(() => {
      for (let i = 0; i < 20 && s.stats().connects === 1 && seq * batchBytes < 3 * MAX_SEND_BACKLOG_BYTES; i++) s.pushEvents(1, ++seq, stored);
    }, 10);
    try {
      await waitFor(() => index.conns.length === 2 && kinds(index.conns[1]!).includes("dump"), "second session's dump", 30_000);
    } finally {
      clearInterval(feed);
    }
    await waitFor(() => index.conns[0]!.closed, "the backlogged connection is gone");
    expect(kinds(index.conns[1]!).slice(0, 2)).toEqual(["hello", "dump"]);
    expect(s.stats()).toMatchObject({ connects: 2, welcomes: 2, backlogOverflows: 1, livenessTimeouts: 0 });
    expect(s.stats().lastError).toMatch(/send backlog/);
    // It did not wait for a stall: the index had read part of what was sent by then.
    expect(index.conns[0]!.messages.filter((m) => m.type === "events").length).toBeGreaterThan(0);
  });

  it("lets a dump larger than the backlog cap queue whole, and counts only what follows it against the cap", async () => {
    const blocks = Array.from({ length: 600_000 }, (_, i) => ({ h: String(10_000_000 + i), p: i === 0 ? null : String(10_000_000 + i - 1), l: "00000000000000dd" }));
    const index = new SilentIndex();
    index.stopReadingAfterWelcome = true; // the whole dump stays in the relay's buffer
    const { session: s } = await session({ pongTimeoutMs: 60_000, dumpChunkBlocks: 50_000, snapshot: () => ({ epoch: 1, seq: 0, blocks }) }, index);
    await waitFor(() => s.stats().dumpsSent === 1, "dump queued");
    const stored = [{ t: "stored" as const, parent: null, blocks: [{ h: "7", l: "00000000000000ee" }] }];
    for (let i = 0; i < 10; i++) s.pushEvents(1, i + 1, stored);
    s.flush();
    await new Promise((r) => setTimeout(r, 200));
    expect(s.stats().bytesSent).toBeGreaterThan(MAX_SEND_BACKLOG_BYTES);
    expect(s.stats()).toMatchObject({ lastError: null, state: "streaming", connects: 1, backlogOverflows: 0 });
  });
});

describe("relay without KV events (approximate mode)", () => {
  it("--no-kv-events: hello kvEvents=false with region and prefill rate, empty dumps, published events ignored", async () => {
    const { worker, index, relay } = await fleet({ extra: { kvEvents: "off", region: "eu", prefillTokensPerSec: 9000 } });
    await waitFor(() => index.last !== undefined && types(index.last).includes("dump"), "dump");
    const conn = index.last!;
    expect(conn.messages[0]).toMatchObject({ type: "hello", kvEvents: false, region: "eu", prefillTokensPerSec: 9000 });
    expect(conn.messages[1]).toMatchObject({ type: "dump", seq: -1, blocks: [] });
    // The worker does publish events, but the relay has no subscription: nothing reaches the index.
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await new Promise((r) => setTimeout(r, 100));
    expect(types(conn)).not.toContain("events");
    expect(relay.stats()).toMatchObject({ kvEvents: false, blocks: 0, lastSeq: null, feed: { liveBatches: 0 } });
    expect(relay.info.kvEndpoint).toBeNull();
  });

  it("--allow-no-kv-events on a worker without kv_events: starts in approximate mode; down/up still works", async () => {
    const worker = await FakeWorker.create();
    worker.kvEvents = false;
    worker.incrementalStreaming = true; // the hello also says how the worker streams
    worker.maxTotalNumTokens = null; // and its KV capacity only when /server_info has one
    const { index, relay } = await fleet({ worker, extra: { kvEvents: "auto" } });
    await waitFor(() => index.last !== undefined && types(index.last).includes("dump"), "dump");
    expect(index.last!.messages[0]).toMatchObject({ type: "hello", kvEvents: false, incrementalStreaming: true, epoch: 1_700_000_000_500 });
    expect(index.last!.messages[0]).not.toHaveProperty("region");
    expect(index.last!.messages[0]).not.toHaveProperty("kvCapacityTokens");

    worker.healthy = false;
    await waitFor(() => types(index.last!).includes("status"), "status down");
    expect(index.last!.messages.find((m) => m.type === "status")).toMatchObject({ status: "down" });
    expect(relay.stats().worker).toBe("down");

    worker.startTime += 60;
    worker.healthy = true;
    await waitFor(() => index.conns.length === 2 && types(index.conns[1]!).includes("dump"), "new session");
    expect(index.conns[1]!.messages[0]).toMatchObject({ type: "hello", kvEvents: false, epoch: 1_700_000_060_500 });
    expect(index.conns[1]!.messages[1]).toMatchObject({ type: "dump", blocks: [] });
    expect(relay.stats()).toMatchObject({ worker: "up", newLives: 1, kvEvents: false });
  });

  it("--allow-no-kv-events on a worker with events follows them as usual", async () => {
    const { worker, index, relay } = await fleet({ extra: { kvEvents: "auto" } });
    await waitFor(() => index.last !== undefined && types(index.last).includes("dump"), "dump");
    expect(index.last!.messages[0]).toMatchObject({ type: "hello", kvEvents: true });
    await worker.pub.publish(storeEvents(toks(8, 1)).events);
    await waitFor(() => indexView(index.last!).size === 2, "events");
    expect(relay.stats().kvEvents).toBe(true);
  });
});

describe("startup checks", () => {
  it("refuses a worker without KV events", async () => {
    const worker = await FakeWorker.create();
    open.push(worker);
    worker.kvEvents = false;
    await expect(
      startRelay({ workerUrl: worker.url, indexUrl: "ws://127.0.0.1:1", workerId: "w1", credential: testCredential(SECRET) }, silentLogger),
    ).rejects.toThrow(/KV events are not configured/);
  });

  it("refuses a block size that disagrees with --block-size", async () => {
    const worker = await FakeWorker.create();
    open.push(worker);
    const p = startRelay(
      { workerUrl: worker.url, indexUrl: "ws://127.0.0.1:1", workerId: "w1", credential: testCredential(SECRET), blockSize: 16 },
      silentLogger,
    );
    await expect(p).rejects.toBeInstanceOf(RelayStartupError);
    await expect(p).rejects.toThrow(/block size 4 but --block-size 16/);
  });

  it("gives up when the worker never answers", async () => {
    await expect(
      startRelay(
        { workerUrl: "http://127.0.0.1:1", indexUrl: "ws://127.0.0.1:1", workerId: "w1", credential: testCredential(SECRET), startupTimeoutMs: 300 },
        silentLogger,
      ),
    ).rejects.toThrow(/unreachable/);
  });
});

describe("a connect the index refuses before the upgrade", () => {
  it("keeps the refusal's reason from the answer's body, and retries", async () => {
    let refused = 0;
    const edge = http.createServer((_req, res) => res.writeHead(404).end());
    // The edge's answer to a rank the key does not grant: 400 with OpenAI's error shape.
    edge.on("upgrade", (_req, socket: Socket) => {
      // Node's server drops its own socket error handler on upgrade; the relay closing its end may reset this one.
      socket.on("error", () => {});
      refused++;
      const body = JSON.stringify({ error: { message: "Rank 2 is outside the 2 DP ranks worker w1's relay key grants (0…1).", code: "rank_not_granted", param: "rank" } });
      socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    });
    await new Promise<void>((r) => edge.listen(0, "127.0.0.1", r));
    open.push({ close: () => new Promise((r) => edge.close(r)) });
    const s = new IndexSession(sessionOptions(relayUrl(`ws://127.0.0.1:${(edge.address() as AddressInfo).port}`, "w1", "m", 0, 2), { pongTimeoutMs: 1000 }));
    open.push(s);
    s.start();
    await waitFor(() => refused >= 2, "a refused connect, then a retry");
    expect(s.stats().lastError).toBe("index refused the connect: HTTP 400: Rank 2 is outside the 2 DP ranks worker w1's relay key grants (0…1).");
  });
});
