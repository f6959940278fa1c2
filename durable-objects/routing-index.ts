/**
 * RoutingIndex: one Durable Object per model pool. Thin adapter around src/routing-index/routing-core.ts:
 * - SQLite keeps the worker registry (survives eviction and restarts);
 * - relays connect over hibernatable WebSockets (authenticated by the edge before the upgrade
 *   reaches us; the verified worker id is the socket's tag);
 * - the edge calls route / settle / quarantine over RPC.
 * The block index itself lives in memory and is rebuilt from relay dumps: on every construction
 * (first start, or waking after hibernation) all connected relays are asked to resync.
 */
import { DurableObject } from "cloudflare:workers";
import { RoutingCore, type RouteDecision, type RoutePreview, type RouteRequest, type SettleRequest, type WorkerRecord } from "../src/routing-index/routing-core.ts";
import type { PoolMetricsSnapshot } from "../src/metrics/pool-snapshot.ts";
import type { IndexToRelay } from "../src/relay-wire/relay-protocol.ts";
import { parseRelayMessage } from "../src/relay-wire/relay-message.ts";
import { MAX_RELAY_MESSAGE_BYTES } from "../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../src/util/hash.ts";
import { parseRegionsVar } from "../src/selection/regions.ts";

import { parseRoutingVar, shardCountOf } from "../src/config/config.ts";
import type { WorkerContract } from "../src/layout/index.ts";
import { shardObjectName } from "../src/block-index/shard.ts";
import { LoadOpBatchSchema, type LoadOpBatch, type LoadSyncStats } from "../src/load/load-replica.ts";
import { helloUrlMatchesKey, type RelayKeyRecord } from "../src/relay-wire/relay-auth.ts";
import { RelayKeyStore } from "./relay-key-store.ts";
import { RelaySessions, type RelayAttachment as Attachment } from "./relay-sessions.ts";

const SCHEMA_VERSION = 5;
const LAST_SEEN_FLUSH_MS = 30_000;


export interface RoutingIndexEnv {
  KVEDGE_ROUTING?: string;
  /** Regions and RTT table for region-aware selection (src/selection/regions.ts); unset = off. */
  KVEDGE_REGIONS?: string;
  /** Shard objects per pool (docs/scale.md §3); unset = 1. */
  KVEDGE_SHARDS?: string;
  /** This namespace: shards send each other their load changes. */
  ROUTING_INDEX?: DurableObjectNamespace<RoutingIndex>;
}

/** Which shard of which pool this object is (learned from the edge, kept in SQLite). */
interface ShardIdentity {
  model: string;
  shard: number;
}

export interface ShardInfo {
  model: string | null;
  shard: number | null;
  shards: number;
  indexedBlocks: number;
  activeRequests: number;
  workers: number;
  loadSync: LoadSyncStats;
}

export interface PoolProfile {
  blockSize: number | null;
  workers: number;
  workersUp: number;
  /** The cohort contract when every up worker publishes the same one; else why not. */
  cohort: { ok: true; contract: WorkerContract; digest: string } | { ok: false; reason: string; detail: string };
}

export class RoutingIndex extends DurableObject<RoutingIndexEnv> {
  readonly core: RoutingCore;
  /** Shards in this pool (KVEDGE_SHARDS); with 1 there is no load replication. */
  readonly #shards: number;
  readonly #loadSyncMs: number;
  #identity: ShardIdentity | null = null;
  #relayKeys!: RelayKeyStore;
  #loadSyncTimer: ReturnType<typeof setTimeout> | null = null;
  /** The last delivery in flight to each peer shard (deliveries to one peer are serialised). */
  readonly #peerSends = new Map<number, Promise<void>>();
  /** When each worker's lastSeen was last written to SQLite (#seen). */
  readonly #lastSeenFlushed = new Map<string, number>();
  /** Which socket speaks for each worker (relay-sessions.ts). */
  readonly #sessions = new RelaySessions((workerId) => this.ctx.getWebSockets(workerId));

  constructor(ctx: DurableObjectState, env: RoutingIndexEnv) {
    super(ctx, env);
    // The same zod schemas as the edge: an invalid var throws (ConfigError naming the field) here
    // too, so the index never runs on guessed defaults; the edge answers every request with it.
    const routing = parseRoutingVar(env.KVEDGE_ROUTING);
    this.#shards = shardCountOf(env.KVEDGE_SHARDS);
    this.#loadSyncMs = routing.loadSyncMs;
    this.core = new RoutingCore({
      blockSize: null,
      temperature: routing.temperature,
      decodeWeight: routing.decodeWeight,
      regions: parseRegionsVar(env.KVEDGE_REGIONS),
      cost: routing.cost,
      replicateLoad: this.#shards > 1,
      blockBudget: routing.blockBudget,
    });
    ctx.blockConcurrencyWhile(async () => {
      await initHashing(); // contract digests (blake3) are computed on hello
      this.#ensureSchema();
      this.#relayKeys = new RelayKeyStore(this.ctx.storage.sql);
      const id = this.ctx.storage.sql.exec<{ k: string; v: string }>("SELECT k, v FROM meta WHERE k IN ('pool_model', 'shard_index')").toArray();
      const model = id.find((r) => r.k === "pool_model")?.v;
      const shard = id.find((r) => r.k === "shard_index")?.v;
      if (model !== undefined && shard !== undefined) this.#identity = { model, shard: Number(shard) };
      const bs = this.ctx.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'block_size'").toArray()[0];
      if (bs) this.core.adoptBlockSize(Number(bs.v));
      for (const row of this.ctx.storage.sql.exec<WorkerRow>("SELECT * FROM workers")) this.core.restoreWorker(rowToRecord(row));
    });
    // Memory was lost if we are waking up with sockets still attached: ask every relay for a dump.
    for (const ws of ctx.getWebSockets()) this.#send(ws, { type: "resync", reason: "index restarted" });
  }

  #ensureSchema(): void {
    const sql = this.ctx.storage.sql;
    sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)");
    const row = sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'schema_version'").toArray()[0];
    const version = row ? Number(row.v) : 0;
    if (version < 1) {
      sql.exec(`CREATE TABLE IF NOT EXISTS workers (
        worker_id TEXT PRIMARY KEY, url TEXT NOT NULL, block_size INTEGER NOT NULL, epoch INTEGER NOT NULL,
        status TEXT NOT NULL, model_name TEXT NOT NULL, contract_json TEXT, contract_digest TEXT,
        kv_events INTEGER NOT NULL, last_seen INTEGER NOT NULL)`);
    }
    if (version < 2) {
      // Relay connect-token nonces seen within their validity window (replay refusal; relay-auth.ts).
      sql.exec("CREATE TABLE IF NOT EXISTS relay_nonces (nonce TEXT PRIMARY KEY, worker_id TEXT NOT NULL, expires_at INTEGER NOT NULL)");
    }
    if (version < 3) {
      // Region and prefill rate from the hello (region-aware selection survives an index restart).
      sql.exec("ALTER TABLE workers ADD COLUMN region TEXT");
      sql.exec("ALTER TABLE workers ADD COLUMN prefill_tokens_per_sec REAL");
    }
    if (version < 4) {
      // How the worker streams (the edge translates cumulative and incremental frames differently).
      sql.exec("ALTER TABLE workers ADD COLUMN incremental_streaming INTEGER NOT NULL DEFAULT 0");
    }
    if (version < 5) {
      // The worker's KV capacity bounds its share of the index after a restart too (block-shares.ts).
      sql.exec("ALTER TABLE workers ADD COLUMN kv_capacity_tokens INTEGER");
    }
    if (version < SCHEMA_VERSION)
      sql.exec("INSERT INTO meta (k, v) VALUES ('schema_version', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", String(SCHEMA_VERSION));
  }

  #persist(rec: WorkerRecord): void {
    this.#lastSeenFlushed.set(rec.workerId, rec.lastSeen);
    this.ctx.storage.sql.exec(
      `INSERT INTO workers (worker_id, url, block_size, epoch, status, model_name, contract_json, contract_digest, kv_events, last_seen,
         region, prefill_tokens_per_sec, incremental_streaming, kv_capacity_tokens)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(worker_id) DO UPDATE SET url = excluded.url, block_size = excluded.block_size, epoch = excluded.epoch,
         status = excluded.status, model_name = excluded.model_name, contract_json = excluded.contract_json,
         contract_digest = excluded.contract_digest, kv_events = excluded.kv_events, last_seen = excluded.last_seen,
         region = excluded.region, prefill_tokens_per_sec = excluded.prefill_tokens_per_sec,
         incremental_streaming = excluded.incremental_streaming, kv_capacity_tokens = excluded.kv_capacity_tokens`,
      rec.workerId,
      rec.url,
      rec.blockSize,
      rec.epoch,
      rec.status,
      rec.modelName,
      rec.contract === null || rec.contract === undefined ? null : JSON.stringify(rec.contract),
      rec.contractDigest,
      rec.kvEvents ? 1 : 0,
      rec.lastSeen,
      rec.region ?? null,
      rec.prefillTokensPerSec ?? null,
      rec.incrementalStreaming ? 1 : 0,
      rec.kvCapacityTokens ?? null,
    );
    if (this.core.blockSize !== null)
      this.ctx.storage.sql.exec("INSERT INTO meta (k, v) VALUES ('block_size', ?) ON CONFLICT(k) DO NOTHING", String(this.core.blockSize));
  }

  /**
   * Relay WebSocket upgrade. The edge has verified the token (signature, worker, freshness); it
   * passes the worker id and the token's nonce, which this pool's index accepts once: the single
   * place that sees every connect of the pool, with memory that survives restarts (SQLite).
   */
  override async fetch(request: Request): Promise<Response> {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") return new Response("expected websocket", { status: 426 });
    const workerId = request.headers.get("x-kvedge-worker");
    if (!workerId) return new Response("missing worker", { status: 400 });
    const nonce = request.headers.get("x-kvedge-relay-nonce");
    const expiresAt = Number(request.headers.get("x-kvedge-relay-expires"));
    if (!nonce || !Number.isSafeInteger(expiresAt)) return new Response("relay token nonce missing", { status: 401 });
    if (!this.#claimNonce(nonce, workerId, expiresAt)) return new Response("relay token already used", { status: 401 });
    this.#learnIdentity(request.headers.get("x-kvedge-pool"), Number(request.headers.get("x-kvedge-shard") ?? "0"));
    const poolBlockSize = Number(request.headers.get("x-kvedge-block-size"));
    if (this.core.blockSize === null && Number.isInteger(poolBlockSize) && poolBlockSize > 0) {
      this.core.adoptBlockSize(poolBlockSize);
      this.ctx.storage.sql.exec("INSERT INTO meta (k, v) VALUES ('block_size', ?) ON CONFLICT(k) DO NOTHING", String(poolBlockSize));
    }
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, [workerId]);
    const keyId = request.headers.get("x-kvedge-relay-key-id") ?? undefined;
    const boundUrl = request.headers.get("x-kvedge-relay-url") ?? undefined;
    server.serializeAttachment({ workerId, keyId, url: boundUrl } satisfies Attachment);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** The edge names the pool and shard on every relay connect; kept so peers are known after a restart. */
  #learnIdentity(model: string | null, shard: number): void {
    if (!model || !Number.isInteger(shard) || shard < 0) return;
    if (this.#identity?.model === model && this.#identity.shard === shard) return;
    this.#identity = { model, shard };
    const sql = this.ctx.storage.sql;
    sql.exec("INSERT INTO meta (k, v) VALUES ('pool_model', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", model);
    sql.exec("INSERT INTO meta (k, v) VALUES ('shard_index', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", String(shard));
  }

  /** Records a connect-token nonce; false if it was seen before (a replayed token). */
  #claimNonce(nonce: string, workerId: string, expiresAt: number): boolean {
    const sql = this.ctx.storage.sql;
    sql.exec("DELETE FROM relay_nonces WHERE expires_at < ?", Math.floor(Date.now() / 1000));
    if (sql.exec("SELECT 1 FROM relay_nonces WHERE nonce = ?", nonce).toArray().length > 0) {
      console.warn(JSON.stringify({ event: "relay_token_replayed", workerId }));
      return false;
    }
    sql.exec("INSERT INTO relay_nonces (nonce, worker_id, expires_at) VALUES (?, ?, ?)", nonce, workerId, expiresAt);
    return true;
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const att = ws.deserializeAttachment() as Attachment;
    const workerId = att.workerId;
    const size = typeof message === "string" ? message.length : message.byteLength;
    if (size > MAX_RELAY_MESSAGE_BYTES) return this.#reject(ws, "message too large");
    let raw: unknown;
    try {
      raw = JSON.parse(typeof message === "string" ? message : new TextDecoder().decode(message));
    } catch {
      return this.#reject(ws, "malformed JSON");
    }
    const parsed = parseRelayMessage(raw);
    if (!parsed.success) return this.#reject(ws, `invalid message: ${parsed.error.issues[0]?.message ?? "schema"}`);
    const msg = parsed.data;
    if (msg.type !== "hello") {
      if (!this.#sessions.isCurrent(att)) {
        // An older connection of a relay that has reconnected since: its frames are history.
        this.#reject(ws, "superseded by a newer relay session", "superseded_session");
        this.#sessions.refuse(ws);
        return;
      }
      this.#seen(workerId);
    }
    switch (msg.type) {
      case "hello": {
        // The worker URL is part of the relay key: a key cannot announce any other address.
        if (!helloUrlMatchesKey(msg.url, att.url)) {
          this.#send(ws, { type: "error", message: "hello url is not the URL this relay key is bound to" });
          ws.close(4003, "hello url not bound to relay key");
          return;
        }
        // Registered under the bound URL's one spelling (the edge appends /generate to it).
        const r = this.core.hello({ ...msg, url: att.url ?? msg.url }, workerId);
        if (!r.ok) {
          // Refused (an older epoch, another block size) while no session of the registered life is
          // open: that life is over, and its blocks must stop counting.
          // A session whose relay has been silent past the limit is a half-open socket, not a relay.
          const live = this.#sessions.hasLiveSession(workerId, ws) && !this.core.relaySilent(workerId);
          const fenced = live ? undefined : this.core.fenceRefusedLife(workerId, msg.epoch);
          if (fenced) {
            this.#persist(fenced);
            console.warn(JSON.stringify({ event: "worker_down", workerId, reason: `refused hello of another life: ${r.reason}` }));
          }
          // Only once that life is over may the relay take an epoch above it (never past a live relay).
          this.#send(ws, { type: "error", message: r.reason, ...(fenced && r.indexEpoch !== undefined ? { indexEpoch: r.indexEpoch } : {}) });
          ws.close(4003, r.reason.slice(0, 120));
          return;
        }
        this.#sessions.start(ws, att);
        this.#persist(r.record);
        this.#send(ws, {
          type: "welcome",
          workerId,
          epoch: msg.epoch,
          poolBlockSize: this.core.blockSize ?? msg.blockSize,
          shards: this.#shards,
          shard: this.#identity?.shard ?? 0,
        });
        return;
      }
      case "dump": {
        const r = this.core.applyDump(workerId, msg);
        if (!r.ok && r.reason === "unknown_worker") this.#send(ws, { type: "resync", reason: "say hello first" });
        else this.#send(ws, { type: "ack", seq: msg.seq });
        // Stored blocks can end routed requests' prefills: the other shards hear of it too.
        this.#scheduleLoadSync();
        return;
      }
      case "events": {
        const r = this.core.applyEvents(workerId, msg);
        if (!r.ok && r.resync) this.#send(ws, { type: "resync", reason: r.reason });
        this.#scheduleLoadSync();
        return;
      }
      case "status": {
        if (msg.epoch !== this.core.worker(workerId)?.epoch) return;
        const rec = this.core.setStatus(workerId, msg.status);
        if (rec) this.#persist(rec);
        return;
      }
      case "ping":
        this.#send(ws, { type: "pong", t: msg.t });
        return;
    }
  }

  /**
   * lastSeen is the last message from the relay (any message: events, dumps, pings), kept in memory
   * and written to SQLite at most once per LAST_SEEN_FLUSH_MS per worker (hello and status rows
   * carry it too), so a restarted index shows a recent time without a write per message.
   */
  #seen(workerId: string): void {
    const at = this.core.touch(workerId);
    if (at === null) return;
    const flushed = this.#lastSeenFlushed.get(workerId) ?? 0;
    if (at - flushed < LAST_SEEN_FLUSH_MS) return;
    this.#lastSeenFlushed.set(workerId, at);
    this.ctx.storage.sql.exec("UPDATE workers SET last_seen = ? WHERE worker_id = ?", at, workerId);
  }

  override async webSocketClose(ws: WebSocket): Promise<void> {
    this.#relayDetached(ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    this.#relayDetached(ws);
  }

  #relayDetached(ws: WebSocket): void {
    const att = ws.deserializeAttachment() as Attachment;
    // Only the newest session's close means the relay is gone; a superseded socket's does not.
    if (this.#sessions.closed(att)) this.core.relayGone(att.workerId);
  }

  #send(ws: WebSocket, msg: IndexToRelay): void {
    try {
      ws.send(JSON.stringify(msg));
    } catch {
      // The socket is closing; the relay reconnects and resyncs.
    }
  }

  #reject(ws: WebSocket, reason: string, dropReason = "bad_message"): void {
    this.core.counters.eventsDropped++;
    this.core.counters.dropReasons[dropReason] = (this.core.counters.dropReasons[dropReason] ?? 0) + 1;
    this.#send(ws, { type: "error", message: reason });
  }

  // ---- RPC (edge → index) ----

  /** Picks a worker for a request and adds its load. null = no worker up. */
  async route(req: RouteRequest): Promise<RouteDecision | null> {
    const d = this.core.route(req);
    this.#scheduleLoadSync();
    return d;
  }

  /** Frees a request's load and records the predicted-vs-actual receipt. */
  async settle(req: SettleRequest): Promise<void> {
    const r = this.core.settle(req);
    // A release goes out at once and the edge may wait for it (release before reply, chat.ts).
    if (this.#shards > 1) await this.#flushLoadNow();
    if (r.drift && r.receipt) console.warn(JSON.stringify({ event: "routing_drift", workerId: r.receipt.workerId }));
  }

  async markPrefillDone(receiptId: string): Promise<void> {
    this.core.markPrefillDone(receiptId);
    this.#scheduleLoadSync();
  }

  // ---- load replication between shards (src/load/load-replica.ts) ----

  /** Sends queued load changes to the other shards within loadSyncMs, batching what comes meanwhile. */
  #scheduleLoadSync(): void {
    if (this.#shards <= 1 || this.#loadSyncTimer !== null || this.core.pendingLoadOps === 0) return;
    this.#loadSyncTimer = setTimeout(() => {
      this.#loadSyncTimer = null;
      this.ctx.waitUntil(this.#flushLoadOps());
    }, this.#loadSyncMs);
  }

  #flushLoadNow(): Promise<void> {
    if (this.#loadSyncTimer !== null) {
      clearTimeout(this.#loadSyncTimer);
      this.#loadSyncTimer = null;
    }
    return this.#flushLoadOps();
  }

  async #flushLoadOps(): Promise<void> {
    const ns = this.env.ROUTING_INDEX;
    const me = this.#identity;
    const ops = this.core.takeLoadOps();
    // Without a binding or before the edge told us who we are, peers cannot be named: the others
    // then route on their own load only (counted as failures so it shows on /admin/stats).
    if (ops.length === 0) return;
    if (!ns || !me) {
      this.core.loadSendFailed();
      return;
    }
    const batch: LoadOpBatch = { from: me.shard, ops };
    const sends: Promise<void>[] = [];
    for (let k = 0; k < this.#shards; k++) {
      if (k === me.shard) continue;
      // One delivery at a time per peer, so a release never overtakes the add it undoes.
      const previous = this.#peerSends.get(k) ?? Promise.resolve();
      const next = previous.then(() =>
        ns.getByName(shardObjectName(me.model, k)).applyLoadOps(batch).then(
          () => undefined,
          (err: unknown) => {
            this.core.loadSendFailed();
            console.warn(JSON.stringify({ event: "load_sync_failed", to: k, error: String(err) }));
          },
        ),
      );
      this.#peerSends.set(k, next);
      sends.push(next);
    }
    await Promise.all(sends);
  }

  /** RPC from a peer shard: its load changes, applied to this shard's replica of the pool's load. */
  async applyLoadOps(batch: LoadOpBatch): Promise<void> {
    const parsed = LoadOpBatchSchema.safeParse(batch);
    if (!parsed.success) {
      console.warn(JSON.stringify({ event: "load_sync_bad_batch", issue: parsed.error.issues[0]?.message }));
      return;
    }
    this.core.applyRemoteLoad(parsed.data.from, parsed.data.ops);
  }

  /** This shard's part of the pool (`/admin/shards`). */
  async shardInfo(): Promise<ShardInfo> {
    return {
      model: this.#identity?.model ?? null,
      shard: this.#identity?.shard ?? null,
      shards: this.#shards,
      indexedBlocks: this.core.index.size,
      activeRequests: this.core.load.size,
      workers: this.core.workers().length,
      loadSync: this.core.loadSyncStats(),
    };
  }

  /** An edge could not connect to the worker: routing avoids it for a while (RoutingCore.quarantine). */
  async quarantine(workerId: string, reason: string): Promise<void> {
    const rec = this.core.quarantine(workerId);
    if (rec) console.warn(JSON.stringify({ event: "worker_quarantined", workerId, until: rec.quarantinedUntil, reason }));
  }

  async profile(): Promise<PoolProfile> {
    const ws = this.core.workers();
    return { blockSize: this.core.blockSize, workers: ws.length, workersUp: ws.filter((w) => w.status === "up").length, cohort: this.core.cohort() };
  }

  async workers() {
    return this.core.workers();
  }

  async stats() {
    return {
      blockSize: this.core.blockSize,
      indexedBlocks: this.core.index.size,
      activeRequests: this.core.load.size,
      counters: this.core.counters,
      receipts: this.core.receipts.stats(),
      recentReceipts: this.core.receipts.recent(50),
      workers: this.core.workers(),
    };
  }

  /** Admin: forget a worker entirely. */
  async removeWorker(workerId: string): Promise<boolean> {
    const ok = this.core.removeWorker(workerId);
    this.#lastSeenFlushed.delete(workerId);
    this.ctx.storage.sql.exec("DELETE FROM workers WHERE worker_id = ?", workerId);
    for (const ws of this.ctx.getWebSockets(workerId)) ws.close(4004, "worker removed");
    return ok;
  }

  // ---- relay keys (the pool object's registry; relay-auth.ts) ----

  async issueRelayKey(rec: RelayKeyRecord): Promise<boolean> {
    return this.#relayKeys.issue(rec);
  }

  async relayKey(keyId: string): Promise<RelayKeyRecord | null> {
    return this.#relayKeys.get(keyId);
  }

  async relayKeys(): Promise<RelayKeyRecord[]> {
    return this.#relayKeys.list();
  }

  async revokeRelayKey(keyId: string): Promise<RelayKeyRecord | null> {
    return this.#relayKeys.revoke(keyId, Math.floor(Date.now() / 1000));
  }

  /**
   * After a revoke: closes this shard's relay sockets that connected with `keyId` and stops routing
   * to their workers until a relay with a valid key says hello again.
   */
  async closeRelayKey(keyId: string): Promise<number> {
    let n = 0;
    for (const ws of this.ctx.getWebSockets()) {
      const att = ws.deserializeAttachment() as Attachment;
      if (att.keyId !== keyId) continue;
      ws.close(4005, "relay key revoked");
      this.#relayDetached(ws);
      // A relay already reconnected with another (valid) key keeps the worker up.
      const others = this.ctx.getWebSockets(att.workerId).filter((o) => o !== ws && o.readyState === WebSocket.OPEN && (o.deserializeAttachment() as Attachment).keyId !== keyId);
      if (others.length === 0) {
        const rec = this.core.setStatus(att.workerId, "down");
        if (rec) this.#persist(rec);
      }
      n++;
    }
    return n;
  }

  /** Test/ops hook: the local hashes a worker holds, for parity checks against the engine. */
  async workerLocalHashes(workerId: string): Promise<string[]> {
    const slot = this.core.slotOf(workerId);
    if (slot < 0) return [];
    return this.core.index.workerLocalHashesHex(slot);
  }

  /** Operators: registry, load, index counters, routing decisions and receipts (/metrics, /dashboard). */
  async metrics(): Promise<PoolMetricsSnapshot> {
    return this.core.metricsSnapshot();
  }

  /** What route() would pick now, without adding load or a receipt (`POST /admin/explain`). */
  async peek(req: { localHashes: readonly bigint[]; isl: number; exclude?: readonly string[] }): Promise<RoutePreview> {
    return this.core.peek(req);
  }
}

interface WorkerRow extends Record<string, SqlStorageValue> {
  worker_id: string;
  url: string;
  block_size: number;
  epoch: number;
  status: string;
  model_name: string;
  contract_json: string | null;
  contract_digest: string | null;
  kv_events: number;
  last_seen: number;
  region: string | null;
  prefill_tokens_per_sec: number | null;
  incremental_streaming: number;
  kv_capacity_tokens: number | null;
}

function rowToRecord(r: WorkerRow): WorkerRecord {
  return {
    workerId: r.worker_id,
    url: r.url,
    blockSize: r.block_size,
    epoch: r.epoch,
    status: r.status === "up" || r.status === "draining" ? r.status : "down",
    modelName: r.model_name,
    contract: r.contract_json ? (JSON.parse(r.contract_json) as unknown) : null,
    contractDigest: r.contract_digest,
    kvEvents: r.kv_events === 1,
    lastSeen: r.last_seen,
    region: r.region ?? null,
    prefillTokensPerSec: r.prefill_tokens_per_sec ?? null,
    incrementalStreaming: r.incremental_streaming === 1,
    kvCapacityTokens: r.kv_capacity_tokens ?? null,
  };
}

