/**
 * The relay's outbound WebSocket session with its pool's routing index (src/relay-wire/relay-protocol.ts).
 * Per connection: hello → wait for welcome → full dump → streamed `events` batches. Events produced
 * while not streaming are not queued: the dump sent after the next welcome already contains them.
 * Reconnects with jittered exponential backoff; answers `resync` with a fresh dump. Each connect
 * mints a new single-use token (a captured one is worthless once used or after a minute).
 * Liveness: a connection the index no longer answers (half-open TCP, blackholed path, an index that
 * stopped reading) is terminated and reconnected like a dropped one (see `pongTimeoutMs`); so is
 * one that reads slower than the relay sends (MAX_SEND_BACKLOG_BYTES).
 * One session feeds one shard of the pool's index (services/relay/shard-fanout.ts, docs/scale.md §3).
 */
import type { IncomingMessage } from "node:http";
import WebSocket from "ws";
import type { DumpBlock } from "./worker-block-set.ts";
import {
  INDEX_TO_RELAY_TYPES,
  IndexToRelaySchema,
  MAX_RELAY_MESSAGE_BYTES,
  type IndexToRelay,
  type RelayDump,
  type RelayEvent,
  type RelayEvents,
  type RelayHello,
  type RelayMessage,
  type WorkerStatus,
} from "../../src/relay-wire/relay-protocol.ts";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { shardObjectName } from "../../src/routing-index/pool-address.ts";
import { errorMessage, type Logger } from "./log.ts";

export interface IndexSessionOptions {
  /** Full ws(s) URL of the relay endpoint, query included. */
  url: string;
  /**
   * The worker's relay credential `kvr1.<key id>.<key>` (src/relay-wire/relay-auth.ts). Never sent: every connect
   * presents a fresh single-use token signed with it for the URL's worker and shard object
   * (`shardObjectName(model, shard)`; the plain model for shard 0).
   */
  token: string;
  hello(): RelayHello;
  /**
   * Called on every `welcome`, before the dump: the relay may re-shard here, and the dump that
   * follows already uses the new layout.
   */
  onWelcome?(welcome: WelcomeInfo): void;
  /** The index refused our hello as older than a life it has ended (error `indexEpoch`). */
  onEpochBehind?(indexEpoch: number): void;
  /** The worker's current view, taken synchronously (so it is consistent with the event stream). */
  snapshot(): { epoch: number; seq: number; blocks: DumpBlock[]; approximate?: boolean };
  /** Non-null while the worker is down: sent as `status: down` after each dump. */
  downReason(): string | null;
  flushIntervalMs: number;
  flushBlocks: number;
  backoffBaseMs: number;
  backoffCapMs: number;
  welcomeTimeoutMs: number;
  /** Blocks in the `dump` message itself; the rest follow as `stored` events (see docs/relay.md). */
  dumpChunkBlocks: number;
  pingIntervalMs: number;
  /**
   * Liveness deadline (default DEFAULT_PONG_TIMEOUT_MS): after a `ping` has left the relay's send
   * buffer, a `pong` (or any other message from the index) must arrive within this time, else the
   * socket is terminated and the session reconnects (hello, full dump). While the ping is still
   * queued behind the relay's own data (a large dump on a slow path), the deadline is extended only
   * as long as that data keeps draining: a send buffer that stops moving for this long counts as
   * dead too.
   */
  pongTimeoutMs?: number;
  log: Logger;
}

/**
 * Twice the welcome timeout: the index answers a ping in order, after whatever the relay sent
 * before it (a queued dump), and it may be busy with other relays' dumps after its own restart. With
 * the 30 s ping, a dead path is noticed within ≈ 50 s (70 s if the send buffer had to fill first).
 */
export const DEFAULT_PONG_TIMEOUT_MS = 20_000;

/**
 * Most bytes the send buffer may hold beyond the connection's latest dump: four of the largest
 * messages the index accepts, so a few full batches may queue on a slow path. Streamed events run
 * at ~200 KB/s under heavy load (docs/relay.md), so a buffer this far over its dump means the index
 * is minutes behind while still reading (which liveness does not catch): the socket is terminated
 * and the next connection's dump carries the state, keeping the relay's memory bounded.
 */
export const MAX_SEND_BACKLOG_BYTES = 4 * MAX_RELAY_MESSAGE_BYTES;

/** What a `welcome` says about the index layout (both absent from an unsharded index). */
export interface WelcomeInfo {
  shards: number | undefined;
  shard: number | undefined;
}

export type SessionState = "idle" | "connecting" | "awaiting_welcome" | "streaming" | "backoff" | "closed";

export interface IndexSessionStats {
  state: SessionState;
  connects: number;
  welcomes: number;
  dumpsSent: number;
  eventMessagesSent: number;
  eventsSent: number;
  resyncRequests: number;
  bytesSent: number;
  /** Connections terminated because the index stopped answering (no pong within the deadline). */
  livenessTimeouts: number;
  /** Connections terminated because the send buffer outgrew the dump by MAX_SEND_BACKLOG_BYTES. */
  backlogOverflows: number;
  lastError: string | null;
}

/** The pong awaited for one ping (at most one at a time; any message from the index ends it). */
interface PongWait {
  ws: WebSocket;
  timer: NodeJS.Timeout;
  /** When the ping left the send buffer (its write callback); null while still queued. */
  pingOutAt: number | null;
  /** Messages written out on the socket at the last check: progress while the ping is queued. */
  written: number;
  /** The socket's buffered bytes at the last check: a multi-MB dump chunk drains in bytes long before it counts as a message. */
  buffered: number;
}

/**
 * The relay endpoint of one shard; shard 0 carries no `shard` parameter (today's URL). A DP-attention
 * rank's session names its rank (`rank`; src/routing-index/rank-target.ts); a single-rank worker's none.
 */
export function relayUrl(indexUrl: string, workerId: string, model: string, shard = 0, rank: number | null = null): string {
  const u = new URL(indexUrl);
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/v1/relay";
  u.searchParams.set("worker", workerId);
  u.searchParams.set("model", model);
  if (rank !== null) u.searchParams.set("rank", String(rank));
  else u.searchParams.delete("rank");
  if (shard !== 0) u.searchParams.set("shard", String(shard));
  else u.searchParams.delete("shard");
  return u.toString();
}

/** The Durable Object name a session URL's token must be signed for. */
export function tokenAudience(url: string): string {
  const q = new URL(url).searchParams;
  return shardObjectName(q.get("model") ?? "", Number(q.get("shard") ?? "0"));
}

/** Delay before reconnect attempt `attempt` (0-based): half fixed, half random ("equal jitter"). */
export function backoffDelay(attempt: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(attempt, 30));
  return ceiling / 2 + random() * (ceiling / 2);
}

export class IndexSession {
  private readonly opts: IndexSessionOptions;
  private ws: WebSocket | null = null;
  private state: SessionState = "idle";
  private attempt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private welcomeTimer: NodeJS.Timeout | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private pingTimer: NodeJS.Timeout | null = null;
  private pongWait: PongWait | null = null;
  /** Messages of the current socket written out (handed to the OS): whether its buffer drains. */
  private written = 0;
  /** Bytes of the current socket's latest dump (all its messages): the send buffer may hold them on top of the backlog cap. */
  private dumpBytes = 0;
  private pending: RelayEvent[] = [];
  private pendingBlocks = 0;
  private pendingEpoch = 0;
  private pendingSeq = 0;
  /** Bumped per connect attempt: a token minted for an abandoned attempt is not used. */
  private connectGen = 0;
  private readonly counters = {
    connects: 0,
    welcomes: 0,
    dumpsSent: 0,
    eventMessagesSent: 0,
    eventsSent: 0,
    resyncRequests: 0,
    bytesSent: 0,
    livenessTimeouts: 0,
    backlogOverflows: 0,
    lastError: null as string | null,
  };

  constructor(opts: IndexSessionOptions) {
    this.opts = opts;
  }

  get streaming(): boolean {
    return this.state === "streaming";
  }

  stats(): IndexSessionStats {
    return { state: this.state, ...this.counters };
  }

  start(): void {
    if (this.state !== "idle") return;
    this.connect();
  }

  async close(): Promise<void> {
    this.flush();
    this.state = "closed";
    this.clearTimers();
    const ws = this.ws;
    this.ws = null;
    if (!ws || ws.readyState === WebSocket.CLOSED) return;
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => ws.terminate(), 1000);
      ws.once("close", () => {
        clearTimeout(kill);
        resolve();
      });
      if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
      else ws.close(1000, "relay closing");
    });
  }

  /** Queues applied events; flushed after `flushIntervalMs` or at `flushBlocks` blocks. */
  pushEvents(epoch: number, seq: number, events: RelayEvent[]): void {
    if (this.state !== "streaming" || events.length === 0) return;
    if (this.pending.length > 0 && epoch !== this.pendingEpoch) this.flush();
    this.pending.push(...events);
    this.pendingEpoch = epoch;
    this.pendingSeq = seq;
    for (const e of events) this.pendingBlocks += e.t === "stored" ? e.blocks.length : e.t === "removed" ? e.hashes.length : 1;
    if (this.pendingBlocks >= this.opts.flushBlocks) this.flush();
    else this.flushTimer ??= setTimeout(() => this.flush(), this.opts.flushIntervalMs);
  }

  /** Sends everything queued now. */
  flush(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.pending.length === 0) return;
    const msg: RelayEvents = { type: "events", epoch: this.pendingEpoch, seq: this.pendingSeq, events: this.pending };
    this.counters.eventsSent += this.pending.length;
    this.counters.eventMessagesSent++;
    this.pending = [];
    this.pendingBlocks = 0;
    this.send(msg);
  }

  /** Replaces the index's view with a fresh dump (queued events are superseded by it). */
  resync(reason: string): void {
    if (this.state !== "streaming") return;
    this.opts.log.info("dump_resync", { reason });
    this.discardPending();
    this.sendDump();
  }

  sendStatus(status: WorkerStatus, reason?: string): void {
    if (this.state !== "streaming") return;
    this.flush();
    this.send({ type: "status", epoch: this.opts.hello().epoch, status, ...(reason ? { reason } : {}) });
  }

  /** Starts a new session right away (new epoch: hello must be sent again). */
  restart(reason: string): void {
    if (this.state === "closed" || this.state === "idle") return;
    this.opts.log.info("session_restart", { reason });
    this.discardPending();
    this.attempt = 0;
    const ws = this.ws;
    this.ws = null;
    this.clearTimers();
    if (ws) ws.terminate();
    this.connect();
  }

  private connect(): void {
    if (this.state === "closed") return;
    this.state = "connecting";
    this.counters.connects++;
    const gen = ++this.connectGen;
    const worker = new URL(this.opts.url).searchParams.get("worker") ?? "";
    mintRelayToken(this.opts.token, worker, tokenAudience(this.opts.url), { url: this.opts.hello().url }).then(
      (token) => {
        if (gen === this.connectGen && this.state === "connecting") this.open(token);
      },
      (err: unknown) => {
        // Cannot happen with a valid worker id; retry like a failed connect rather than stall.
        this.counters.lastError = errorMessage(err);
        this.opts.log.error("relay_token_failed", { error: this.counters.lastError });
        if (gen !== this.connectGen || this.state !== "connecting") return;
        this.state = "backoff";
        this.reconnectTimer = setTimeout(() => {
          this.reconnectTimer = null;
          this.connect();
        }, backoffDelay(this.attempt++, this.opts.backoffBaseMs, this.opts.backoffCapMs));
      },
    );
  }

  private open(token: string): void {
    const ws = new WebSocket(this.opts.url, {
      headers: { Authorization: `Bearer ${token}` },
      maxPayload: MAX_RELAY_MESSAGE_BYTES,
      handshakeTimeout: this.opts.welcomeTimeoutMs,
      // No per-message deflate (ws offers it by default, workerd accepts it). ws compresses one
      // message at a time, 16 KB of output per zlib thread-pool round trip, each needing an
      // event-loop turn; with the loop busy decoding KV batches (100k-token prefills on a full
      // cache) a round trip took 50–100 ms, the send queue reached 16 MB and the index lagged the
      // worker by 2 s. Deflate's ~4× saving comes from the JSON keys and the decimal/hex spelling
      // around the hashes' random bits; it is not worth that lag.
      perMessageDeflate: false,
    });
    this.ws = ws;
    this.written = 0;
    this.dumpBytes = 0;
    // A refused upgrade says why in its body (the edge's error, e.g. a rank the key does not grant).
    let refusal: string | null = null;
    ws.on("unexpected-response", (_req, res) => {
      void refusalOf(res).then((why) => {
        refusal = `index refused the connect: HTTP ${res.statusCode}${why ? `: ${why}` : ""}`;
        ws.terminate(); // "error" and "close" follow, which log the refusal and reconnect
      });
    });
    ws.on("open", () => {
      if (ws !== this.ws) return;
      this.state = "awaiting_welcome";
      this.send(this.opts.hello());
      this.welcomeTimer = setTimeout(() => {
        this.opts.log.warn("welcome_timeout", { ms: this.opts.welcomeTimeoutMs });
        ws.terminate();
      }, this.opts.welcomeTimeoutMs);
    });
    ws.on("message", (data, isBinary) => {
      if (ws !== this.ws) return; // a superseded socket proves nothing about the current one
      this.heardFromIndex();
      if (isBinary) return;
      this.onMessage(data.toString());
    });
    ws.on("error", (err) => {
      if (ws !== this.ws) return;
      this.counters.lastError = refusal ?? errorMessage(err);
      this.opts.log.debug("index_ws_error", { error: this.counters.lastError }); // "close" follows and logs it
    });
    ws.on("close", (code, reasonBuf) => {
      if (ws !== this.ws) return;
      this.ws = null;
      this.clearTimers();
      this.discardPending();
      if (this.state === "closed") return;
      const delay = backoffDelay(this.attempt++, this.opts.backoffBaseMs, this.opts.backoffCapMs);
      this.opts.log.info("index_disconnected", {
        code,
        reason: reasonBuf.toString() || this.counters.lastError,
        retryInMs: Math.round(delay),
      });
      this.state = "backoff";
      this.reconnectTimer = setTimeout(() => {
        this.reconnectTimer = null;
        this.connect();
      }, delay);
    });
  }

  private onMessage(text: string): void {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      return this.dropBadMessage("not JSON", text.length);
    }
    const type = typeof raw === "object" && raw !== null ? (raw as { type?: unknown }).type : undefined;
    // A type this relay does not know is a newer index's: ignored, as before.
    if (typeof type === "string" && !INDEX_TO_RELAY_TYPES.has(type)) return this.opts.log.debug("index_unknown_message", { type: type.slice(0, 64) });
    const parsed = IndexToRelaySchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return this.dropBadMessage(`${typeof type === "string" ? type : "no type"}: ${issue ? `${issue.path.join(".") || "message"}: ${issue.message}` : "invalid"}`, text.length);
    }
    const msg: IndexToRelay = parsed.data;
    switch (msg.type) {
      case "welcome": {
        if (this.state !== "awaiting_welcome") return;
        if (this.welcomeTimer) clearTimeout(this.welcomeTimer);
        this.welcomeTimer = null;
        const hello = this.opts.hello();
        if (msg.poolBlockSize !== hello.blockSize) {
          this.opts.log.error("pool_block_size_mismatch", { pool: msg.poolBlockSize, worker: hello.blockSize });
        }
        this.counters.welcomes++;
        this.attempt = 0;
        this.opts.log.info("index_welcome", {
          epoch: msg.epoch,
          poolBlockSize: msg.poolBlockSize,
          ...(msg.shards !== undefined ? { shards: msg.shards, shard: msg.shard } : {}),
        });
        // Before streaming: a re-shard triggered here resyncs the other sessions, not this one,
        // whose dump (next) is already cut for the new layout.
        this.opts.onWelcome?.({ shards: msg.shards, shard: msg.shard });
        if ((this.state as SessionState) !== "awaiting_welcome") return; // closed or restarted by the hook
        this.state = "streaming";
        this.sendDump();
        this.pingTimer = setInterval(() => this.ping(), this.opts.pingIntervalMs);
        this.pingTimer.unref();
        return;
      }
      case "resync":
        this.counters.resyncRequests++;
        this.resync(`index asked: ${msg.reason}`);
        return;
      case "error":
        this.opts.log.warn("index_error", { message: msg.message });
        if (this.state === "awaiting_welcome" && typeof msg.indexEpoch === "number" && Number.isSafeInteger(msg.indexEpoch)) this.opts.onEpochBehind?.(msg.indexEpoch);
        return;
      case "ack":
      case "pong":
        return;
    }
  }

  /** A frame that breaks the protocol: the session ends (logged with why) and reconnects with backoff. */
  private dropBadMessage(reason: string, bytes: number): void {
    const ws = this.ws;
    if (!ws) return;
    this.counters.lastError = `bad index message (${reason})`;
    this.opts.log.warn("index_bad_message", { reason, bytes });
    // As on the other protocol errors: "close" follows, logs lastError and reconnects.
    ws.terminate();
  }

  private sendDump(): void {
    const snap = this.opts.snapshot();
    const first = snap.blocks.slice(0, this.opts.dumpChunkBlocks);
    const rest = snap.blocks.length - first.length;
    const dump: RelayDump = { type: "dump", epoch: snap.epoch, seq: snap.seq, blocks: first, ...(snap.approximate ? { approximate: true } : {}), ...(rest > 0 ? { continues: rest } : {}) };
    this.dumpBytes = 0;
    this.send(dump, { dump: true });
    this.counters.dumpsSent++;
    // A dump larger than one message continues as stored events (parents already sent first).
    const seq = Math.max(0, snap.seq);
    for (let i = first.length; i < snap.blocks.length; i += this.opts.dumpChunkBlocks) {
      const events: RelayEvent[] = snap.blocks
        .slice(i, i + this.opts.dumpChunkBlocks)
        .map((b) => ({ t: "stored", parent: b.p, blocks: [{ h: b.h, l: b.l }], ...(b.tier !== undefined ? { tier: b.tier } : {}) }));
      this.send({ type: "events", epoch: snap.epoch, seq, events }, { dump: true });
      this.counters.eventMessagesSent++;
    }
    const down = this.opts.downReason();
    if (down !== null) this.send({ type: "status", epoch: snap.epoch, status: "down", reason: down });
  }

  /** `dump`: part of a dump, which the send buffer may hold in full on top of MAX_SEND_BACKLOG_BYTES. */
  private send(msg: RelayMessage, { written, dump = false }: { written?: () => void; dump?: boolean } = {}): void {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const text = JSON.stringify(msg);
    this.counters.bytesSent += text.length;
    // Called once the frame is handed to the OS (not while it waits in ws's or the socket's buffer).
    ws.send(text, (err) => {
      if (err || ws !== this.ws) return;
      this.written++;
      written?.();
    });
    if (dump) this.dumpBytes += text.length;
    else if (ws.bufferedAmount > this.dumpBytes + MAX_SEND_BACKLOG_BYTES) this.dropBacklog(ws);
  }

  /** The index reads slower than the relay sends: start over with a dump rather than queue without end. */
  private dropBacklog(ws: WebSocket): void {
    this.counters.backlogOverflows++;
    const bufferedBytes = ws.bufferedAmount;
    this.counters.lastError = `index send backlog: ${bufferedBytes} bytes buffered, over the dump's ${this.dumpBytes} + ${MAX_SEND_BACKLOG_BYTES}`;
    this.opts.log.warn("index_send_backlog", { bufferedBytes, dumpBytes: this.dumpBytes, maxBacklogBytes: MAX_SEND_BACKLOG_BYTES });
    // Not close(): its frame would queue behind the backlog. "close" follows and reconnects.
    ws.terminate();
  }

  /** Sends a ping and, unless one is already awaited, starts waiting for its pong. */
  private ping(): void {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN || this.state !== "streaming") return;
    if (this.pongWait !== null) {
      this.send({ type: "ping", t: Date.now() });
      return;
    }
    const wait: PongWait = { ws, timer: setTimeout(() => this.checkLiveness(wait), this.pongTimeoutMs()), pingOutAt: null, written: this.written, buffered: ws.bufferedAmount };
    wait.timer.unref();
    this.pongWait = wait;
    this.send({ type: "ping", t: Date.now() }, { written: () => (wait.pingOutAt = Date.now()) });
  }

  /** Any message from the index on the current socket: it is alive and read what came before. */
  private heardFromIndex(): void {
    if (this.pongWait) clearTimeout(this.pongWait.timer);
    this.pongWait = null;
  }

  private checkLiveness(wait: PongWait): void {
    if (wait !== this.pongWait || wait.ws !== this.ws || this.state !== "streaming") return;
    const timeoutMs = this.pongTimeoutMs();
    const rearm = (ms: number): void => {
      wait.timer = setTimeout(() => this.checkLiveness(wait), ms);
      wait.timer.unref();
    };
    if (wait.pingOutAt !== null) {
      // The ping left late (behind a dump): it still gets the whole deadline from then.
      const left = wait.pingOutAt + timeoutMs - Date.now();
      if (left > 0) {
        rearm(left);
        return;
      }
    } else if (this.written > wait.written || wait.ws.bufferedAmount < wait.buffered) {
      // Still queued behind our own data, which is moving (whole messages, or bytes of one): a slow
      // path, not a dead one. (Bytes already in the kernel's send buffer are not visible here: after
      // the ping has left, a path slower than that buffer per deadline, ~2 Mbit/s, reads as dead.)
      wait.written = this.written;
      wait.buffered = wait.ws.bufferedAmount;
      rearm(timeoutMs);
      return;
    }
    this.pongWait = null;
    this.counters.livenessTimeouts++;
    const pingQueued = wait.pingOutAt === null;
    this.counters.lastError = pingQueued
      ? `index liveness: send buffer stalled for ${timeoutMs} ms`
      : `index liveness: no pong within ${timeoutMs} ms`;
    this.opts.log.warn("index_liveness_timeout", { timeoutMs, pingQueued, bufferedBytes: wait.ws.bufferedAmount });
    // Not close(): a closing handshake cannot complete on a dead path. "close" follows and reconnects.
    wait.ws.terminate();
  }

  private pongTimeoutMs(): number {
    return this.opts.pongTimeoutMs ?? DEFAULT_PONG_TIMEOUT_MS;
  }

  private discardPending(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    this.pending = [];
    this.pendingBlocks = 0;
  }

  private clearTimers(): void {
    for (const t of [this.reconnectTimer, this.welcomeTimer, this.flushTimer]) if (t) clearTimeout(t);
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.reconnectTimer = this.welcomeTimer = this.flushTimer = this.pingTimer = null;
    if (this.pongWait) clearTimeout(this.pongWait.timer);
    this.pongWait = null;
  }
}

/** Most of a refused upgrade's body read for its reason. */
const MAX_REFUSAL_BYTES = 4096;
const REFUSAL_READ_MS = 2000;

/** The message of a refused upgrade's body (OpenAI's error shape, else its text), bounded in size and time. */
function refusalOf(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    const done = (): void => {
      clearTimeout(timer);
      res.destroy();
      let message: unknown;
      try {
        message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
      } catch {
        message = undefined;
      }
      resolve((typeof message === "string" ? message : text).trim().slice(0, 512));
    };
    const timer = setTimeout(done, REFUSAL_READ_MS);
    res.setEncoding("utf8");
    res.on("data", (chunk: string) => {
      text += chunk;
      if (text.length >= MAX_REFUSAL_BYTES) done();
    });
    res.once("end", done);
    res.once("error", done);
  });
}
