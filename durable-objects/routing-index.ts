/**
 * RoutingIndex: one Durable Object per model pool (or per shard), the adapter that gives
 * src/routing-index/ its runtime; it implements the pool's front door (front-door.ts) and decides
 * nothing itself:
 * - SQLite keeps the worker registry, relay keys and connect nonces (survives eviction and restarts);
 * - relays connect over hibernatable WebSockets (authenticated by the edge before the upgrade
 *   reaches us; the verified worker id is the socket's tag); each frame's verdict comes from
 *   relay-inbox.ts and is carried out here;
 * - the edge calls the front door's methods over RPC; peer shards get load changes the same way.
 * The block index itself lives in memory and is rebuilt from relay dumps: on every construction
 * (first start, or waking after hibernation) all connected relays are asked to resync.
 */
import { pdPoolProblem } from "../src/routing-index/pd-pool.ts";
import { DurableObject } from "cloudflare:workers";
import { RoutingCore, type WorkerRecord } from "../src/routing-index/routing-core.ts";
import { readRelayConnect, type AdmitRequest, type AdmitResult, type PeekRequest, type PoolIndexFrontDoor, type PoolProfile, type PoolStats, type RouteDecision, type RoutePreview, type RouteRequest, type CarryingReceipts, type ReceiptEntry, type SettleRequest, type ShardInfo, type WorkerRow } from "../src/routing-index/front-door.ts";
import type { PoolMetricsSnapshot } from "../src/metrics/pool-snapshot.ts";
import type { IndexToRelay } from "../src/relay-wire/relay-protocol.ts";
import { relayFrame } from "../src/routing-index/relay-inbox.ts";
import { initHashing } from "../src/util/hash.ts";
import { parseRegionsVar } from "../src/selection/regions.ts";

import { parseRoutingVar, shardCountOf } from "../src/config/config.ts";
import { shardObjectName } from "../src/routing-index/pool-address.ts";
import { localHashPage, MAX_LOCAL_HASH_PAGE, type LocalHashPage } from "../src/routing-index/hash-page.ts";
import { LoadOpBatchSchema, type LoadOpBatch } from "../src/load/load-replica.ts";
import type { RelayKeyRecord } from "../src/relay-wire/relay-auth.ts";
import { RelayKeyStore } from "./relay-key-store.ts";
import { RelaySessions, type RelayAttachment as Attachment } from "../src/routing-index/relay-sessions.ts";

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

export class RoutingIndex extends DurableObject<RoutingIndexEnv> implements PoolIndexFrontDoor {
  readonly #core: RoutingCore;
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
    this.#core = new RoutingCore({
      blockSize: null,
      temperature: routing.temperature,
      decodeWeight: routing.decodeWeight,
      regions: parseRegionsVar(env.KVEDGE_REGIONS),
      cost: routing.cost,
      tiers: { kvBytesPerToken: routing.kvBytesPerToken, hostLoadGBps: routing.hostLoadGBps, storageLoadGBps: routing.storageLoadGBps },
      storageCapacityBlocks: routing.storageCapacityBlocks,
      pdTransfer: { kvBytesPerToken: routing.kvBytesPerToken, transferGBps: routing.pdTransferGBps },
      duplicateCost: { weight: routing.duplicateWeight, targetMs: routing.duplicateTargetMs },
      learnPrefillRate: routing.learnPrefillRate,
      replicateLoad: this.#shards > 1,
      onLoadOps: () => this.#scheduleLoadSync(),
      onDrift: (workerId) => console.warn(JSON.stringify({ event: "routing_drift", workerId })),
      blockBudget: routing.blockBudget,
      admission: routing.admission,
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
      if (bs) this.#core.adoptBlockSize(Number(bs.v));
      for (const row of this.ctx.storage.sql.exec<WorkerSqlRow>("SELECT * FROM workers")) this.#core.restoreWorker(rowToRecord(row));
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
    // A worker's PD role survives a restart (a decode worker routed as unified would get no bootstrap
    // fields). Added by column presence, not by schema version, so other additions stay independent.
    const columns = new Set(sql.exec<{ name: string }>("PRAGMA table_info(workers)").toArray().map((c) => c.name));
    if (!columns.has("disaggregation_mode")) sql.exec("ALTER TABLE workers ADD COLUMN disaggregation_mode TEXT");
    if (!columns.has("bootstrap_port")) sql.exec("ALTER TABLE workers ADD COLUMN bootstrap_port INTEGER");
    if (version < SCHEMA_VERSION)
      sql.exec("INSERT INTO meta (k, v) VALUES ('schema_version', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", String(SCHEMA_VERSION));
  }

  #persist(rec: WorkerRecord): void {
    this.#lastSeenFlushed.set(rec.workerId, rec.lastSeen);
    this.ctx.storage.sql.exec(
      `INSERT INTO workers (worker_id, url, block_size, epoch, status, model_name, contract_json, contract_digest, kv_events, last_seen,
         region, prefill_tokens_per_sec, incremental_streaming, kv_capacity_tokens, disaggregation_mode, bootstrap_port)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(worker_id) DO UPDATE SET url = excluded.url, block_size = excluded.block_size, epoch = excluded.epoch,
         status = excluded.status, model_name = excluded.model_name, contract_json = excluded.contract_json,
         contract_digest = excluded.contract_digest, kv_events = excluded.kv_events, last_seen = excluded.last_seen,
         region = excluded.region, prefill_tokens_per_sec = excluded.prefill_tokens_per_sec,
         incremental_streaming = excluded.incremental_streaming, kv_capacity_tokens = excluded.kv_capacity_tokens,
         disaggregation_mode = excluded.disaggregation_mode, bootstrap_port = excluded.bootstrap_port`,
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
      rec.disaggregationMode ?? "null",
      rec.bootstrapPort ?? null,
    );
    if (this.#core.blockSize !== null)
      this.ctx.storage.sql.exec("INSERT INTO meta (k, v) VALUES ('block_size', ?) ON CONFLICT(k) DO NOTHING", String(this.#core.blockSize));
  }

  /**
   * Relay WebSocket upgrade. The edge has verified the token (signature, worker, freshness); it
   * passes the worker id and the token's nonce, which this pool's index accepts once: the single
   * place that sees every connect of the pool, with memory that survives restarts (SQLite).
   */
  override async fetch(request: Request): Promise<Response> {
    const c = readRelayConnect(request.headers);
    if (!c.ok) return new Response(c.message, { status: c.status });
    if (!this.#claimNonce(c.nonce, c.workerId, c.expiresAt)) return new Response("relay token already used", { status: 401 });
    this.#learnIdentity(c.pool, c.shard);
    if (this.#core.blockSize === null && Number.isInteger(c.blockSize) && c.blockSize > 0) {
      this.#core.adoptBlockSize(c.blockSize);
      this.ctx.storage.sql.exec("INSERT INTO meta (k, v) VALUES ('block_size', ?) ON CONFLICT(k) DO NOTHING", String(c.blockSize));
    }
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, [c.workerId]);
    server.serializeAttachment({ workerId: c.workerId, keyId: c.keyId, url: c.url, dpSize: c.dpSize, storageGroup: c.storageGroup } satisfies Attachment);
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
    const v = relayFrame(
      this.#core,
      message,
      {
        workerId: att.workerId,
        boundUrl: att.url,
        grant: { dpSize: att.dpSize ?? 1, storageGroup: att.storageGroup ?? null },
        isCurrent: () => this.#sessions.isCurrent(att),
        hasLiveSession: () => this.#sessions.hasLiveSession(att.workerId, ws),
      },
      { shards: this.#shards, shard: this.#identity?.shard ?? 0 },
    );
    if (v.heardAt !== null) this.#flushLastSeen(att.workerId, v.heardAt);
    if (v.startSession) this.#sessions.start(ws, att);
    for (const rec of v.persist) this.#persist(rec);
    if (v.warn) console.warn(JSON.stringify(v.warn));
    for (const reply of v.replies) this.#send(ws, reply);
    if (v.close) ws.close(v.close.code, v.close.reason);
    if (v.superseded) this.#sessions.refuse(ws);
  }

  /**
   * lastSeen is the last message from the relay (any message: events, dumps, pings), kept in memory
   * and written to SQLite at most once per LAST_SEEN_FLUSH_MS per worker (hello and status rows
   * carry it too), so a restarted index shows a recent time without a write per message.
   */
  #flushLastSeen(workerId: string, at: number): void {
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
    if (!this.#sessions.closed(att)) return;
    this.#core.relayGone(att.workerId);
  }

  #send(ws: WebSocket, msg: IndexToRelay): void {
    try {
      ws.send(JSON.stringify(msg));
    } catch {
      // The socket is closing; the relay reconnects and resyncs.
    }
  }

  // ---- RPC (edge → index) ----

  /** Applies the receipts the request carries, then picks a worker for it and adds its load. null = no worker up. */
  async route(req: CarryingReceipts<RouteRequest>): Promise<RouteDecision | null> {
    return this.#carrying(() => this.#core.route(req));
  }

  /** A first pick through admission: at once under the bound, else this call waits in the pool's queue. */
  async admit(req: AdmitRequest): Promise<AdmitResult> {
    // The core's answer may be a promise (the request waits in the queue): the releases go before it.
    return this.#carrying(() => this.#core.admit(req, req.admission));
  }

  /**
   * Runs a core call that carries receipts: the releases of the settlements it applied that freed
   * load go to the other shards at once, as a receipts call's do (nobody waits on them); an entry
   * that freed nothing sends nothing. Also when the call threw after applying them: the count is
   * taken either way, never left for the next call.
   */
  #carrying<T>(call: () => T): T {
    try {
      return call();
    } finally {
      if (this.#core.takeCarriedSettlements() > 0 && this.#shards > 1) this.ctx.waitUntil(this.#flushLoadNow());
    }
  }

  /** The edge's queued receipts in order; a settlement's release reaches every shard before the answer (the edge may wait: release before reply). */
  async receipts(entries: readonly ReceiptEntry[]): Promise<void> {
    if (this.#core.applyReceipts(entries) > 0 && this.#shards > 1) await this.#flushLoadNow();
  }

  async leaveQueue(ticket: string): Promise<boolean> {
    return this.#core.leaveQueue(ticket);
  }

  // settle and markPrefillDone: an edge of the previous version calls them while a gradual
  // deployment runs old and new versions side by side (a missing method would leave that edge's
  // load held until staleMs). Each is one entry through the receipts path and its schema.
  async settle(req: SettleRequest): Promise<void> {
    return this.receipts([{ ...req, kind: "settle" }]);
  }

  async markPrefillDone(receiptId: string): Promise<void> {
    return this.receipts([{ kind: "prefill_done", receiptId, ageMs: 0 }]);
  }

  // ---- load replication between shards (src/load/load-replica.ts) ----

  /**
   * Sends queued load changes to the other shards within loadSyncMs, batching what comes meanwhile.
   * The core calls it whenever changes start to queue (RoutingCore onLoadOps), whatever queued them:
   * a route, a relay frame, a watched prefill given up on at a peek or a stats read, an admission.
   */
  #scheduleLoadSync(): void {
    if (this.#shards <= 1 || this.#loadSyncTimer !== null || this.#core.pendingLoadOps === 0) return;
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
    const ops = this.#core.takeLoadOps();
    // Without a binding or before the edge told us who we are, peers cannot be named: the others
    // then route on their own load only (counted as failures so it shows on /admin/stats).
    if (ops.length === 0) return;
    if (!ns || !me) {
      this.#core.loadSendFailed();
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
            this.#core.loadSendFailed();
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
    this.#core.applyRemoteLoad(parsed.data.from, parsed.data.ops);
  }

  /** This shard's part of the pool (`/admin/shards`). */
  async shardInfo(): Promise<ShardInfo> {
    const { indexedBlocks, activeRequests } = this.#core.sizes();
    return {
      model: this.#identity?.model ?? null,
      shard: this.#identity?.shard ?? null,
      shards: this.#shards,
      indexedBlocks,
      activeRequests,
      workers: this.#core.workers().length,
      loadSync: this.#core.loadSyncStats(),
    };
  }

  /** An edge could not connect to the worker: routing avoids it for a while (RoutingCore.quarantine). */
  async quarantine(workerId: string, reason: string): Promise<void> {
    const rec = this.#core.quarantine(workerId);
    if (rec) console.warn(JSON.stringify({ event: "worker_quarantined", workerId, until: rec.quarantinedUntil, reason }));
  }

  async profile(): Promise<PoolProfile> {
    const ws = this.#core.workers();
    return { blockSize: this.#core.blockSize, workers: ws.length, workersUp: ws.filter((w) => w.status === "up").length, cohort: this.#core.cohort(), pdProblem: pdPoolProblem(ws) };
  }

  async workers(): Promise<WorkerRow[]> {
    return this.#core.workers();
  }

  async stats(): Promise<PoolStats> {
    return this.#core.stats();
  }

  /** Admin: the worker takes no new requests; its row shows when the running ones have finished. */
  async drainWorker(workerId: string): Promise<boolean> {
    const rec = this.#core.setStatus(workerId, "draining");
    if (!rec) return false;
    this.#persist(rec);
    console.warn(JSON.stringify({ event: "worker_draining", workerId }));
    return true;
  }

  /** Admin: a drained worker takes requests again (otherwise a drain holds until the worker's next life). */
  async undrainWorker(workerId: string): Promise<boolean> {
    const row = this.#core.workers().find((w) => w.workerId === workerId);
    if (!row) return false;
    if (row.status !== "draining") return true;
    const rec = this.#core.setStatus(workerId, "up");
    if (rec) this.#persist(rec);
    console.warn(JSON.stringify({ event: "worker_undrained", workerId }));
    return true;
  }

  /** Admin: forget a worker entirely (a DP worker's id takes every rank target with it). */
  async removeWorker(workerId: string): Promise<boolean> {
    const removed = this.#core.removeWorker(workerId);
    for (const id of new Set([workerId, ...removed])) {
      this.#lastSeenFlushed.delete(id);
      this.ctx.storage.sql.exec("DELETE FROM workers WHERE worker_id = ?", id);
      for (const ws of this.ctx.getWebSockets(id)) ws.close(4004, "worker removed");
    }
    return removed.length > 0;
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
      if (!this.#sessions.servedByAnotherKey(att.workerId, ws, keyId)) {
        const rec = this.#core.setStatus(att.workerId, "down");
        if (rec) this.#persist(rec);
      }
      n++;
    }
    return n;
  }

  /** Test/ops hook: a page of the local hashes a worker holds, for parity checks against the engine (hash-page.ts). */
  async workerLocalHashes(workerId: string, after: string | null, limit: number): Promise<LocalHashPage> {
    return localHashPage(this.#core.workerLocalHashes(workerId), after, Math.min(Math.max(1, limit), MAX_LOCAL_HASH_PAGE));
  }

  /** Operators: registry, load, index counters, routing decisions and receipts (/metrics, /dashboard). */
  async metrics(): Promise<PoolMetricsSnapshot> {
    return this.#core.metricsSnapshot();
  }

  /** What route() would pick now, without adding load or a receipt (`POST /admin/explain`). */
  async peek(req: PeekRequest): Promise<RoutePreview> {
    return this.#core.peek(req);
  }
}

interface WorkerSqlRow extends Record<string, SqlStorageValue> {
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
  disaggregation_mode: string | null;
  bootstrap_port: number | null;
}

function rowToRecord(r: WorkerSqlRow): WorkerRecord {
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
    disaggregationMode: r.disaggregation_mode === "prefill" || r.disaggregation_mode === "decode" ? r.disaggregation_mode : "null",
    bootstrapPort: r.bootstrap_port ?? null,
  };
}

