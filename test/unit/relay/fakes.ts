/**
 * Test doubles for the relay tests, all real sockets on 127.0.0.1: a KV-event publisher (ZMQ PUB +
 * replay ROUTER), a worker's HTTP surface (/server_info, /health) and an index (ws server).
 */
import { encode } from "@msgpack/msgpack";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer, type WebSocket } from "ws";
import * as zmq from "zeromq";
import { decodeSeq, encodeSeq } from "../../../src/engine-events/event-decode.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { createHash } from "node:crypto";
import { checkRelayToken, formatRelayCredential, parseRelayCredential, type RelayTokenCheck } from "../../../src/relay-wire/relay-auth.ts";
import type { RelayMessage } from "../../../src/relay-wire/relay-protocol.ts";
import { shardObjectName } from "../../../src/routing-index/pool-address.ts";
import type { RelayOptionsInput } from "../../../services/relay/options.ts";

export class FakePublisher {
  pub = new zmq.Publisher({ linger: 0 });
  router = new zmq.Router({ linger: 0 });
  buffer: { seq: number; payload: Uint8Array }[] = [];
  nextSeq = 0;
  answerReplay = true;
  replayRequests: number[] = [];

  static async create(): Promise<FakePublisher> {
    const p = new FakePublisher();
    await p.pub.bind("tcp://127.0.0.1:*");
    await p.router.bind("tcp://127.0.0.1:*");
    void p.serveReplay();
    return p;
  }

  get endpoint(): string {
    return this.pub.lastEndpoint!;
  }
  get replayEndpoint(): string {
    return this.router.lastEndpoint!;
  }

  /** Publishes one batch; `live: false` keeps it only in the replay buffer (a lost message). */
  async publish(events: unknown[] = [], opts: { live?: boolean; buffer?: boolean } = {}): Promise<number> {
    const seq = this.nextSeq++;
    const payload = encode([Date.now() / 1000, events, 0], { useBigInt64: true });
    if (opts.buffer ?? true) this.buffer.push({ seq, payload });
    if (opts.live ?? true) await this.pub.send([new Uint8Array(0), encodeSeq(seq), payload]);
    return seq;
  }

  /** A new publisher process: seq restarts at 0, buffer empty. */
  restart(): void {
    this.nextSeq = 0;
    this.buffer = [];
  }

  /**
   * A new publisher process on the same endpoints: the old sockets close (subscribers see the
   * connection go), new ones bind the same ports, the buffer is empty and seq starts at `seqFrom`.
   */
  async reopen(seqFrom = 0): Promise<void> {
    const [pubAt, routerAt] = [this.endpoint, this.replayEndpoint];
    this.close();
    this.pub = new zmq.Publisher({ linger: 0 });
    this.router = new zmq.Router({ linger: 0 });
    // The closed sockets give their ports back on ZMQ's I/O thread, a moment later.
    await bindWhenFree(this.pub, pubAt);
    await bindWhenFree(this.router, routerAt);
    void this.serveReplay();
    this.nextSeq = seqFrom;
    this.buffer = [];
  }

  private async serveReplay(): Promise<void> {
    try {
      for await (const [id, , seqFrame] of this.router) {
        const start = decodeSeq(seqFrame!)!;
        this.replayRequests.push(start);
        if (!this.answerReplay) continue;
        for (const b of this.buffer) {
          if (b.seq >= start) await this.router.send([id!, new Uint8Array(0), encodeSeq(b.seq), b.payload]);
        }
        await this.router.send([id!, new Uint8Array(0), encodeSeq(-1), new Uint8Array(0)]);
      }
    } catch {
      // closed
    }
  }

  close(): void {
    this.pub.close();
    this.router.close();
  }
}

/** Binds `endpoint`, retrying while the port is still held by a socket just closed. */
async function bindWhenFree(socket: zmq.Publisher | zmq.Router, endpoint: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      return await socket.bind(endpoint);
    } catch (e) {
      if (i >= 100 || !/in use/i.test((e as Error).message)) throw e;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

export async function waitFor(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}


/** The HTTP side of a worker: /server_info pointing at a FakePublisher, and a switchable /health. */
export class FakeWorker {
  healthy = true;
  kvEvents = true;
  /** /server_info `incremental_streaming_output` (SGLang's --incremental-streaming-output). */
  incrementalStreaming = false;
  /** /server_info `max_total_num_tokens` (the KV pool size); null: the field is absent. */
  maxTotalNumTokens: number | null = 8192;
  pageSize = 4;
  startTime = 1_700_000_000.5; // seconds, like Python's time.time()
  /** POST /flush_cache calls answered 200; `flushBusy` more answer 400 first (requests running). */
  flushes = 0;
  flushBusy = 0;
  readonly pub: FakePublisher;
  private readonly server: Server;

  private constructor(pub: FakePublisher) {
    this.pub = pub;
    this.server = createServer((req, res) => {
      if (req.url === "/health") {
        res.writeHead(this.healthy ? 200 : 503).end();
      } else if (req.url === "/flush_cache" && req.method === "POST") {
        if (this.flushBusy > 0) {
          this.flushBusy--;
          res.writeHead(400).end("Cache not flushed: requests running\n");
        } else {
          this.flushes++;
          res.writeHead(200).end("Cache flushed.\n");
        }
      } else if (req.url === "/server_info") {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(this.serverInfo()));
      } else {
        res.writeHead(404).end();
      }
    });
  }

  static async create(): Promise<FakeWorker> {
    const w = new FakeWorker(await FakePublisher.create());
    await new Promise<void>((r) => w.server.listen(0, "127.0.0.1", r));
    return w;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  serverInfo(): Record<string, unknown> {
    const port = (ep: string): number => Number(ep.split(":").pop());
    const pubPort = port(this.pub.endpoint);
    return {
      model_path: "Qwen/Qwen3-VL-8B-Instruct",
      served_model_name: "Qwen/Qwen3-VL-8B-Instruct",
      page_size: this.pageSize,
      dp_size: 1,
      start_time: this.startTime,
      kv_events_config: this.kvEvents
        ? JSON.stringify({ publisher: "zmq", endpoint: `tcp://*:${pubPort}`, replay_endpoint: `tcp://*:${port(this.pub.replayEndpoint)}` })
        : null,
      kv_events: this.kvEvents
        ? { publisher: "zmq", endpoint_host: "*", endpoint_port_base: pubPort, topic: "", block_size: this.pageSize, dp_size: 1 }
        : null,
      incremental_streaming_output: this.incrementalStreaming,
      ...(this.maxTotalNumTokens !== null ? { max_total_num_tokens: this.maxTotalNumTokens } : {}),
      status: "ready",
    };
  }

  async close(): Promise<void> {
    this.pub.close();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}

export interface IndexConn {
  ws: WebSocket;
  url: URL;
  headers: IncomingHttpHeaders;
  messages: RelayMessage[];
  /** The `shard` query parameter (absent = 0). */
  shard: number;
}

/**
 * A routing index stand-in: accepts relays whose token verifies (for the shard object the URL
 * names, like the edge), answers hello with welcome. With `shards` set, welcome carries
 * `shards` (as `shardsSaid(shard)` tells, default `shards`) and `shard`, like a sharded index.
 */
export class FakeIndex {
  readonly conns: IndexConn[] = [];
  rejected = 0;
  autoWelcome = true;
  poolBlockSize = 4;
  shards: number | undefined = undefined;
  shardsSaid: (shard: number) => number | undefined = () => this.shards;
  private readonly wss: WebSocketServer;

  private constructor(secret: string) {
    const key = parseRelayCredential(testCredential(secret))!;
    this.wss = new WebSocketServer({
      host: "127.0.0.1",
      port: 0,
      verifyClient: (info, done) => {
        const q = new URL(info.req.url ?? "/", "ws://x").searchParams;
        const model = shardObjectName(q.get("model") ?? "", Number(q.get("shard") ?? "0"));
        const expect = { workerId: q.get("worker") ?? "", model, nowSeconds: Math.floor(Date.now() / 1000) };
        void checkRelayToken(key, info.req.headers.authorization ?? null, { ...expect, audience: expect.model }).then(({ ok }) => {
          if (!ok) this.rejected++;
          done(ok, 401, "Unauthorized");
        });
      },
    });
    this.wss.on("connection", (ws, req) => {
      const url = new URL(req.url ?? "/", "ws://x");
      const conn: IndexConn = { ws, url, headers: req.headers, messages: [], shard: Number(url.searchParams.get("shard") ?? "0") };
      this.conns.push(conn);
      ws.on("message", (data) => {
        const msg = JSON.parse(data.toString()) as RelayMessage;
        conn.messages.push(msg);
        if (msg.type === "hello" && this.autoWelcome) this.welcome(conn);
      });
    });
  }

  static async create(secret: string): Promise<FakeIndex> {
    const idx = new FakeIndex(secret);
    await new Promise<void>((r) => (idx.wss.address() ? r() : idx.wss.once("listening", () => r())));
    return idx;
  }

  get url(): string {
    return `ws://127.0.0.1:${(this.wss.address() as AddressInfo).port}`;
  }

  welcome(conn: IndexConn): void {
    const hello = conn.messages.find((m) => m.type === "hello");
    if (hello?.type !== "hello") throw new Error("no hello yet");
    const shards = this.shardsSaid(conn.shard);
    const layout = shards === undefined ? {} : { shards, shard: conn.shard };
    conn.ws.send(JSON.stringify({ type: "welcome", workerId: hello.workerId, epoch: hello.epoch, poolBlockSize: this.poolBlockSize, ...layout }));
  }

  get last(): IndexConn | undefined {
    return this.conns[this.conns.length - 1];
  }

  /** The latest connection to shard `shard`. */
  lastOf(shard: number): IndexConn | undefined {
    return this.conns.filter((c) => c.shard === shard).pop();
  }

  async close(): Promise<void> {
    for (const c of this.conns) c.ws.terminate();
    await new Promise((r) => this.wss.close(r));
  }
}

/**
 * The relay credential the fakes derive from a test seed (the edge issues real ones; what a relay
 * does with its credential does not depend on where it came from).
 */
export function testCredential(seed: string): string {
  const h = createHash("sha256").update(seed).digest();
  return formatRelayCredential(h.subarray(0, 16).toString("base64url"), h.toString("hex"));
}

/** Checks a connect token the way the edge does, with the test seed's credential. */
export function checkTestToken(seed: string, presented: string | null, expect: { workerId: string; model: string; nowSeconds: number }): Promise<RelayTokenCheck> {
  return checkRelayToken(parseRelayCredential(testCredential(seed))!, presented, { workerId: expect.workerId, audience: expect.model, nowSeconds: expect.nowSeconds });
}

/** Relay options for tests: the fake worker and index, short health and backoff timers. */
export function testRelayOptions(worker: FakeWorker, index: FakeIndex, secret: string, extra: Partial<RelayOptionsInput> = {}): RelayOptionsInput {
  return {
    workerUrl: worker.url,
    indexUrl: index.url,
    workerId: "w1",
    model: "Qwen/Qwen3-VL-8B-Instruct",
    credential: testCredential(secret),
    healthIntervalMs: 30,
    healthTimeoutMs: 1000,
    backoffBaseMs: 20,
    backoffCapMs: 200,
    startupTimeoutMs: 5000,
    ...extra,
  };
}

/** SGLang-style events for a prompt: one BlockStored per page, chained. */
export function storeEvents(tokens: number[], parent: bigint | null = null, blockSize = 4): { events: unknown[]; hashes: bigint[] } {
  const { hashes } = engineBlockHashes(tokens, blockSize);
  const events = hashes.map((h, i) => [
    "BlockStored",
    [h],
    i === 0 ? parent : hashes[i - 1]!,
    tokens.slice(i * blockSize, (i + 1) * blockSize),
    blockSize,
    null,
    "GPU",
  ]);
  return { events, hashes };
}

export type IndexView = Map<string, { p: string | null; l: string }>;

/** What an index would hold after applying a connection's messages in order. */
export function indexView(conn: IndexConn | undefined): IndexView {
  const view: IndexView = new Map();
  for (const m of conn?.messages ?? []) {
    if (m.type === "dump") {
      view.clear();
      for (const b of m.blocks) view.set(b.h, { p: b.p, l: b.l });
    } else if (m.type === "events") {
      for (const e of m.events) {
        if (e.t === "cleared") view.clear();
        else if (e.t === "removed") for (const h of e.hashes) view.delete(h);
        else {
          let p = e.parent;
          for (const b of e.blocks) {
            view.set(b.h, { p, l: b.l });
            p = b.h;
          }
        }
      }
    }
  }
  return view;
}
