/**
 * The front door of a pool's routing index: everything the edge (chat, admin routes, readiness,
 * relay keys) and peer shards ask of a pool's Durable Object, with each request and answer type
 * defined once. durable-objects/routing-index.ts implements it; functions/ hands the edge a
 * `DurableObjectStub` of that class, which Workers RPC types by these methods (no hand-written
 * client, no cast). Code in src/edge and functions/ reaches the object through this file only.
 */
import { STORAGE_GROUP_PATTERN, type RelayKeyGrant, type RelayKeyRecord } from "../relay-wire/relay-auth.ts";
import type { CohortResult } from "../layout/index.ts";
import type { LoadOpBatch, LoadSyncStats } from "../load/load-replica.ts";
import type { PoolMetricsSnapshot } from "../metrics/pool-snapshot.ts";
import type { WorkerRow } from "./pool-metrics.ts";
import type { LocalHashPage } from "./hash-page.ts";
// The edge pages and merges local-hash answers itself; it reaches the page rules through the door.
export { DEFAULT_LOCAL_HASH_PAGE, MAX_LOCAL_HASH_PAGE, mergeLocalHashPages } from "./hash-page.ts";
import type { Receipt, WorkerReceiptStats } from "./receipts.ts";
import type { IndexCounters } from "../metrics/pool-snapshot.ts";
import type { RouteDecision, RoutePreview, RouteRequest, SettleRequest } from "./router.ts";
import type { AdmissionTicket, AdmitOutcome } from "../admission/admission-gate.ts";
import type { CarryingReceipts, ReceiptEntry } from "./receipt-entries.ts";

export type { AdmissionTicket } from "../admission/admission-gate.ts";

/**
 * A request's first pick under admission (src/admission/): the route and the ticket it waits with,
 * and the edge's queued receipts for this shard, applied before the request is admitted or queued.
 */
export interface AdmitRequest extends CarryingReceipts<RouteRequest> {
  admission: AdmissionTicket;
  /** The conversation's key (src/edge/chat/affinity.ts): its worker is preferred (src/routing-index/session-affinity.ts). */
  affinityKey?: string | null;
}

/** Routed (at once or after waiting), none up (503), refused (429 with Retry-After), or left. */
export type AdmitResult = AdmitOutcome<RouteDecision>;
import { MAX_DP_SIZE, rankTargetId } from "./rank-target.ts";

/** Which worker and DP-attention rank a routing target is (the edge sends the rank to SGLang). */
export { MAX_DP_SIZE, parseRankTarget } from "./rank-target.ts";

export { MAX_RECEIPTS_PER_CALL } from "./receipt-entries.ts";
export type { CarryingReceipts, ReceiptEntry } from "./receipt-entries.ts";
export type { PdDecision, RouteCandidateView, RouteDecision, RoutePreview, RouteRequest, SettleRequest } from "./router.ts";
export type { WorkerRow } from "./pool-metrics.ts";

/** What `explain` asks: route()'s inputs that shape the choice, nothing that records it. */
export type PeekRequest = Pick<RouteRequest, "localHashes" | "isl" | "exclude" | "edgeRegion" | "edgeColo">;

/** The pool as the edge plans a request for it: block size, workers, and the cohort contract. */
export interface PoolProfile {
  blockSize: number | null;
  workers: number;
  workersUp: number;
  /** The cohort contract when every up worker publishes the same one; else why not (layout/eligibility.ts). */
  cohort: CohortResult;
  /** A prefill/decode pool that cannot pair its workers, naming the worker (pd-pool.ts); null otherwise. */
  pdProblem?: string | null;
}

/** One shard's part of the pool (`/admin/shards`). */
export interface ShardInfo {
  model: string | null;
  shard: number | null;
  shards: number;
  indexedBlocks: number;
  activeRequests: number;
  workers: number;
  loadSync: LoadSyncStats;
}

/** `/admin/stats`: the pool object's counters, receipts and registry. */
export interface PoolStats {
  blockSize: number | null;
  indexedBlocks: number;
  activeRequests: number;
  counters: IndexCounters;
  receipts: WorkerReceiptStats[];
  recentReceipts: Receipt[];
  workers: WorkerRow[];
}

/** What a chat request asks of its pool's shard. */
export interface ChatFrontDoor {
  /** Applies the receipts the request carries, then picks a worker for it and adds its load. null = no worker up. */
  route(req: CarryingReceipts<RouteRequest>): Promise<RouteDecision | null>;
  /** The edge's queued receipts (settlements, prefill-done marks) in one call, applied in order. */
  receipts(entries: readonly ReceiptEntry[]): Promise<void>;
  /**
   * One settlement or prefill-done mark through `receipts`. Kept for an edge of the previous
   * version, which calls them while a gradual deployment runs old and new versions side by side
   * (a missing method would leave that edge's load held until staleMs).
   */
  settle(req: SettleRequest): Promise<void>;
  markPrefillDone(receiptId: string): Promise<void>;
  /** The edge could not connect to the worker: route elsewhere for a while (RoutingCore.quarantine). */
  quarantine(workerId: string, reason: string): Promise<void>;
  profile(): Promise<PoolProfile>;
}

/**
 * Admission (src/admission/): a request's first pick waits in the pool's object while every worker
 * is at its load bound. The edge's chat path asks it; a retry goes to route() at once.
 */
export interface AdmissionFrontDoor {
  /** Answered at once under the load bound, else when a worker frees room or the request is refused (one pending call, no polling). */
  admit(req: AdmitRequest): Promise<AdmitResult>;
  /** The client left: its waiting request leaves the queue (one admitted lately is settled as cancelled). */
  leaveQueue(ticket: string): Promise<boolean>;
}

/** Relay keys: shard 0 keeps the pool's registry; every shard closes the sockets of a revoked key. */
export interface RelayKeyFrontDoor {
  issueRelayKey(rec: RelayKeyRecord): Promise<boolean>;
  relayKey(keyId: string): Promise<RelayKeyRecord | null>;
  relayKeys(): Promise<RelayKeyRecord[]>;
  revokeRelayKey(keyId: string): Promise<RelayKeyRecord | null>;
  /** Closes this shard's relay sockets of the key; returns how many. */
  closeRelayKey(keyId: string): Promise<number>;
}

/** Operators (`/admin/*`, `/metrics`, `/dashboard`, `/readyz`). */
export interface OperatorFrontDoor {
  workers(): Promise<WorkerRow[]>;
  stats(): Promise<PoolStats>;
  shardInfo(): Promise<ShardInfo>;
  metrics(): Promise<PoolMetricsSnapshot>;
  /** What route() would pick now, without adding load or a receipt (`POST /admin/explain`). */
  peek(req: PeekRequest): Promise<RoutePreview>;
  /** A page of the local hashes the index holds for a worker, ascending after `after` (parity checks against the engine; hash-page.ts). */
  workerLocalHashes(workerId: string, after: string | null, limit: number): Promise<LocalHashPage>;
  /** Forgets a worker entirely and closes its relay sockets. */
  removeWorker(workerId: string): Promise<boolean>;
  /**
   * Drain: the worker takes no new request (nor any waiting in the admission queue); the running
   * ones finish; a new life of it (a restart's hello) joins the pool up. false: unknown worker.
   */
  drainWorker(workerId: string): Promise<boolean>;
  /**
   * Undrain: a draining worker takes requests again (and the admission queue's); a worker in any
   * other status is left as it is (a down one waits for its relay's hello). false: unknown worker.
   */
  undrainWorker(workerId: string): Promise<boolean>;
}

/** What one shard sends the others (src/load/load-replica.ts). */
export interface PeerFrontDoor {
  applyLoadOps(batch: LoadOpBatch): Promise<void>;
}

/** Everything a pool's index object answers over RPC. */
export interface PoolIndexFrontDoor extends ChatFrontDoor, AdmissionFrontDoor, RelayKeyFrontDoor, OperatorFrontDoor, PeerFrontDoor {}

/**
 * A relay connect the edge has verified (signature, worker, pool, freshness: relay-auth.ts), handed
 * to the shard's object with the WebSocket upgrade (`fetch`) as request headers, named here once.
 */
export interface RelayConnect {
  workerId: string;
  /** The connect token's nonce and expiry (unix s): each shard accepts a nonce once. */
  nonce: string;
  expiresAt: number;
  /** The relay key the token was signed with, and the worker URL that key is bound to. */
  keyId: string;
  url: string;
  /** The pool and shard the object is (kept so it can name its peers after a restart). */
  pool: string;
  shard: number;
  /** The pool's configured block size, adopted by an object that has none yet. */
  blockSize: number;
  /** What the key grants (relay-auth.ts RelayKeyGrant): the object checks the hello against it. */
  dpSize: number;
  storageGroup: string | null;
}

const CONNECT_HEADERS = {
  workerId: "x-kvedge-worker",
  nonce: "x-kvedge-relay-nonce",
  expiresAt: "x-kvedge-relay-expires",
  keyId: "x-kvedge-relay-key-id",
  url: "x-kvedge-relay-url",
  pool: "x-kvedge-pool",
  shard: "x-kvedge-shard",
  blockSize: "x-kvedge-block-size",
  dpSize: "x-kvedge-relay-dp-size",
  storageGroup: "x-kvedge-relay-storage-group",
} as const satisfies Record<keyof RelayConnect, string>;

/**
 * Which index target a verified relay connect speaks for: the worker, or with the `rank` parameter
 * (a DP-attention rank's session) the rank target `<worker>#<rank>` (rank-target.ts). The `rank`
 * is not signed, so the key's DP size bounds it: one key opens at most `keyDpSize` rank targets
 * (each takes a slot, and slots shrink every worker's budget: block-budget.ts).
 */
export function relayConnectTarget(
  workerId: string,
  rankParam: string | null,
  keyDpSize: number,
): { ok: true; targetId: string } | { ok: false; message: string; code: string | null } {
  if (rankParam === null) return { ok: true, targetId: workerId };
  if (!/^\d{1,4}$/.test(rankParam) || Number(rankParam) >= MAX_DP_SIZE)
    return { ok: false, message: `Bad rank '${rankParam.slice(0, 16)}': a DP rank is an integer 0…${MAX_DP_SIZE - 1}.`, code: null };
  const rank = Number(rankParam);
  // A single-rank worker's target is its worker id: a key granting one rank opens no rank target.
  if (keyDpSize <= 1 || rank >= keyDpSize)
    return {
      ok: false,
      message: keyDpSize > 1
        ? `Rank ${rank} is outside the ${keyDpSize} DP ranks worker ${workerId}'s relay key grants (0…${keyDpSize - 1}): issue its key with the worker's dpSize.`
        : `Worker ${workerId}'s relay key grants one rank (no rank parameter): issue its key with the worker's dpSize.`,
      code: "rank_not_granted",
    };
  return { ok: true, targetId: rankTargetId(workerId, rank, MAX_DP_SIZE) };
}

/** The upgrade request the edge sends the shard's object for a verified relay connect. */
export function relayConnectRequest(c: RelayConnect): Request {
  const headers = new Headers({ upgrade: "websocket" });
  for (const [field, name] of Object.entries(CONNECT_HEADERS)) {
    const value = c[field as keyof RelayConnect];
    if (value !== null) headers.set(name, String(value));
  }
  return new Request("https://index/relay", { headers });
}

/** What the object reads of a connect: the parts it needs, or the answer that refuses it. */
export type RelayConnectRead =
  | ({ ok: true; workerId: string; nonce: string; expiresAt: number; keyId: string | undefined; url: string | undefined; pool: string | null; shard: number; blockSize: number } & RelayKeyGrant)
  | { ok: false; status: 400 | 401 | 426; message: string };

/**
 * Reads a relay connect on the object's side. Only the worker, nonce and expiry are required;
 * the pool, shard and block size are hints the object skips when absent or malformed (null, NaN or
 * a block size of 0). The key's grant read as absent or malformed is the least it can be: one
 * rank, no storage group.
 */
export function readRelayConnect(headers: Headers): RelayConnectRead {
  if (headers.get("upgrade")?.toLowerCase() !== "websocket") return { ok: false, status: 426, message: "expected websocket" };
  const workerId = headers.get(CONNECT_HEADERS.workerId);
  if (!workerId) return { ok: false, status: 400, message: "missing worker" };
  const nonce = headers.get(CONNECT_HEADERS.nonce);
  const expiresAt = Number(headers.get(CONNECT_HEADERS.expiresAt));
  if (!nonce || !Number.isSafeInteger(expiresAt)) return { ok: false, status: 401, message: "relay token nonce missing" };
  return {
    ok: true,
    workerId,
    nonce,
    expiresAt,
    keyId: headers.get(CONNECT_HEADERS.keyId) ?? undefined,
    url: headers.get(CONNECT_HEADERS.url) ?? undefined,
    pool: headers.get(CONNECT_HEADERS.pool),
    shard: Number(headers.get(CONNECT_HEADERS.shard) ?? "0"),
    blockSize: Number(headers.get(CONNECT_HEADERS.blockSize)),
    dpSize: grantedDpSize(headers.get(CONNECT_HEADERS.dpSize)),
    storageGroup: grantedStorageGroup(headers.get(CONNECT_HEADERS.storageGroup)),
  };
}

function grantedDpSize(raw: string | null): number {
  const n = Number(raw);
  return raw !== null && Number.isInteger(n) && n >= 1 && n <= MAX_DP_SIZE ? n : 1;
}

function grantedStorageGroup(raw: string | null): string | null {
  return raw !== null && STORAGE_GROUP_PATTERN.test(raw) ? raw : null;
}
