/**
 * The routing index of one model pool, free of runtime bindings: worker registry (in memory; the
 * Durable Object persists it), the shared radix index fed by relay messages, active load, worker
 * selection and receipts. The Durable Object adapter only moves bytes and rows in and out.
 */
import { RadixIndex } from "../block-index/radix-index.ts";
import { ApproxIndex, type ApproxConfig } from "../block-index/approx-index.ts";
import { ApproximateWorkers } from "./approximate-workers.ts";
import { BlockBudget } from "../block-index/block-budget.ts";
import type { BlockIndex } from "../block-index/shard.ts";
import { RegionsConfigSchema, resolveEdgeRegion, scoreCandidatesByTtft, type RegionsConfig } from "../selection/regions.ts";

/** The one region of TTFT scoring without a region table (cost "ttft"). */
const LOCAL_REGION = "local";
import { LoadTracker, chainKeysOf } from "../load/load-tracker.ts";
import { PendingRoutes } from "../load/pending-routes.ts";
import type { LocalHashes } from "../blocks/block-hash.ts";
import { ReceiptBook, type Receipt } from "./receipts.ts";
import { pickIndex, scoreCandidates, type Candidate } from "../selection/selection.ts";
import { cohortEligibility, contractDigest, parseWorkerContract, type CohortResult } from "../layout/index.ts";
import { type RelayDump, type RelayEvents, type RelayHello, type WorkerStatus } from "../relay-wire/relay-protocol.ts";
import { PoolRecorder, RECENT_KEPT } from "../metrics/pool-recorder.ts";
import { cohortOf, type IndexCounters, type PoolMetricsSnapshot } from "../metrics/pool-snapshot.ts";
import { LagWindow, replicaReceiptId, Tombstones, type LoadOp, type LoadSyncStats } from "../load/load-replica.ts";

export interface WorkerRecord {
  workerId: string;
  url: string;
  blockSize: number;
  epoch: number;
  status: WorkerStatus;
  modelName: string;
  contract: unknown;
  contractDigest: string | null;
  kvEvents: boolean;
  lastSeen: number;
  /** Region and prefill rate from the hello (region-aware selection); absent = unknown. */
  region?: string | null;
  prefillTokensPerSec?: number | null;
}

export interface RouteRequest {
  localHashes: LocalHashes;
  /** Input sequence length in tokens (the full prompt, not only hashed blocks). */
  isl: number;
  exclude?: readonly string[];
  fallbackReason?: string | null;
  /** The edge's region: with a regions config, selection minimises estimated TTFT from there. */
  edgeRegion?: string | null;
  /** The edge's Cloudflare colo (request.cf.colo), mapped to a region by the regions config. */
  edgeColo?: string | null;
}

export interface RouteCandidateView {
  workerId: string;
  overlapBlocks: number;
  cost: number;
  activePrefillTokens: number;
  activeDecodeBlocks: number;
}

export interface RouteDecision {
  workerId: string;
  url: string;
  overlapBlocks: number;
  totalBlocks: number;
  blockSize: number;
  receiptId: string;
  candidates: RouteCandidateView[];
}

export interface SettleRequest {
  receiptId: string;
  promptTokens: number | null;
  cachedTokens: number | null;
  outcome: "ok" | "error";
  /** The edge is retrying on another worker: this attempt is not the request's final outcome. */
  retrying?: boolean;
  /** Edge time from request arrival until the upstream call, for the overhead histogram. */
  edgeOverheadMs?: number | null;
}

/** What route() would decide right now, without adding load or a receipt (explain, dry runs). */
export interface RoutePreview {
  workerId: string | null;
  overlapBlocks: number;
  totalBlocks: number;
  blockSize: number;
  candidates: RouteCandidateView[];
  /** Other workers with the same lowest cost (the pick among them is random). */
  tiedWith: string[];
}

/** The index's event and routing counters (the metrics snapshot exports the same shape). */
export type CoreCounters = IndexCounters;

export type RelayApplyOutcome = { ok: true } | { ok: false; reason: string; resync: boolean };

export interface RoutingCoreOptions {
  /** Pool block size; null = adopt the first worker's. */
  blockSize: number | null;
  temperature?: number;
  /** Weight of decode load in the cost (default 1, Dynamo's); see selection.ts. */
  decodeWeight?: number;
  staleMs?: number;
  random?: () => number;
  now?: () => number;
  /** The block index (default: one RadixIndex; a ShardedIndex splits it by chain root, src/block-index/shard.ts). */
  index?: BlockIndex;
  /** Approximate mode for workers registered with kvEvents: false (src/block-index/approx-index.ts). */
  approx?: Partial<ApproxConfig>;
  /** RTT table and defaults for region-aware selection (src/selection/regions.ts); null = off. */
  regions?: RegionsConfig | null;
  /**
   * "ttft": without a usable region (no config, or the edge's region unknown) still score by
   * estimated TTFT, with no round trip; "blocks" (default here): Dynamo's block cost then.
   */
  cost?: "ttft" | "blocks";
  /** One shard of a sharded pool: queue this core's load changes for the other shards (load-replica.ts). */
  replicateLoad?: boolean;
  /** Most (worker, block) entries this index holds (block-budget.ts); default DEFAULT_BLOCK_BUDGET. */
  blockBudget?: number;
  /** Bytes the block index may take (block-budget.ts DEFAULT_INDEX_BYTES); Infinity: entries only. */
  indexBudgetBytes?: number;
}

export class RoutingCore {
  readonly index: BlockIndex;
  /** Blocks assumed cached on workers without KV events (approximate mode). */
  readonly approx: ApproxIndex;
  readonly load: LoadTracker;
  readonly receipts = new ReceiptBook();
  /** Chains routed in the last seconds, counted as overlap until the worker's events arrive. */
  readonly pending = new PendingRoutes();
  readonly counters: CoreCounters = {
    eventsApplied: 0,
    blocksStored: 0,
    blocksRemoved: 0,
    eventsDropped: 0,
    dropReasons: {},
    dumps: 0,
    routed: 0,
    settled: 0,
    expired: 0,
  };
  /** Operator metrics (routing decisions, receipts, edge overhead); see src/metrics/. */
  readonly metrics = new PoolRecorder();
  /** Workers whose indexed blocks may be wrong (relay lost history, budget refusals). */
  readonly approximate = new ApproximateWorkers();
  readonly budget: BlockBudget;
  #blockSize: number | null;
  readonly #workers = new Map<string, WorkerRecord & { slot: number }>();
  readonly #bySlot: string[] = [];
  /** Workers whose in-memory blocks are known to mirror the relay (a dump arrived this life). */
  readonly #synced = new Set<string>();
  readonly #pending = new Map<string, Omit<Receipt, "actualCachedTokens" | "outcome">>();
  #scores = new Int32Array(16);
  #receiptSeq = 0;
  readonly #temperature: number;
  readonly #decodeWeight: number;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #regions: RegionsConfig | null;
  /** TTFT scoring when no region applies (cost "ttft"); null = block cost then. */
  readonly #localTtft: RegionsConfig | null;
  readonly #replicateLoad: boolean;
  #loadOutbox: LoadOp[] = [];
  readonly #loadSync = { opsSent: 0, batchesSent: 0, sendFailures: 0, opsReceived: 0, opsApplied: 0, opsSkipped: 0 };
  readonly #loadLag = new LagWindow();
  readonly #releasedBeforeAdd = new Tombstones(60_000, 10_000);

  constructor(opts: RoutingCoreOptions) {
    this.#blockSize = opts.blockSize;
    this.index = opts.index ?? new RadixIndex();
    this.budget = new BlockBudget(opts.blockBudget, opts.indexBudgetBytes);
    // Approximate-mode entries share the object's budget: at most half of it.
    this.approx = new ApproxIndex({ ...opts.approx, maxBlocks: Math.min(opts.approx?.maxBlocks ?? 2 ** 20, Math.max(1, Math.floor(this.budget.limit / 2))) });
    this.#regions = opts.regions ?? null;
    this.#localTtft = opts.cost === "ttft" ? { ...(opts.regions ?? RegionsConfigSchema.parse({})), self: LOCAL_REGION, rttMs: {}, defaultRttMs: 0 } : null;
    this.load = new LoadTracker(opts.staleMs ?? 300_000);
    this.#temperature = opts.temperature ?? 0;
    this.#decodeWeight = opts.decodeWeight ?? 1;
    this.#random = opts.random ?? Math.random;
    this.#now = opts.now ?? Date.now;
    this.#replicateLoad = opts.replicateLoad ?? false;
  }

  get blockSize(): number | null {
    return this.#blockSize;
  }

  /** Sets the pool block size if none is known yet (from configuration, before any worker). */
  adoptBlockSize(blockSize: number): void {
    if (this.#blockSize === null) this.#blockSize = blockSize;
  }

  slotOf(workerId: string): number {
    return this.#workers.get(workerId)?.slot ?? -1;
  }

  /** Restores a registry row (after a Durable Object restart). Blocks come later, from dumps. */
  restoreWorker(rec: WorkerRecord): void {
    this.#upsert(rec);
    if (this.#blockSize === null) this.#blockSize = rec.blockSize;
  }

  workers(): (WorkerRecord & {
    blocks: number;
    synced: boolean;
    approximate: boolean;
    approximateReasons: string[];
    activeRequests: number;
    activePrefillTokens: number;
    activeDecodeBlocks: number;
  })[] {
    return [...this.#workers.values()].map(({ slot, ...w }) => ({
      ...w,
      blocks: this.index.workerBlockCount(slot),
      // Synced means the index mirrors the worker: never while its view may be wrong.
      synced: this.#synced.has(w.workerId) && !this.approximate.has(w.workerId),
      approximate: this.approximate.has(w.workerId),
      approximateReasons: this.approximate.reasons(w.workerId),
      activeRequests: this.load.activeRequests(slot),
      activePrefillTokens: this.load.prefillTokens(slot),
      activeDecodeBlocks: this.load.decodeBlocks(slot),
    }));
  }

  worker(workerId: string): WorkerRecord | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    const { slot: _slot, ...rec } = w;
    return rec;
  }

  /** Any message from the worker's relay: the time operators see as lastSeen (in memory). */
  touch(workerId: string): number | null {
    const w = this.#workers.get(workerId);
    if (!w) return null;
    w.lastSeen = this.#now();
    return w.lastSeen;
  }

    isSynced(workerId: string): boolean {
    return this.#synced.has(workerId);
  }

  #upsert(rec: WorkerRecord): WorkerRecord & { slot: number } {
    const existing = this.#workers.get(rec.workerId);
    if (existing) {
      Object.assign(existing, rec);
      return existing;
    }
    let slot = this.#bySlot.indexOf("");
    if (slot < 0) slot = this.#bySlot.length;
    this.#bySlot[slot] = rec.workerId;
    const full = { ...rec, slot };
    this.#workers.set(rec.workerId, full);
    this.index.ensureWorker(slot);
    if (this.#scores.length <= slot) this.#scores = new Int32Array(Math.max(slot + 1, this.#scores.length * 2));
    return full;
  }

  /** A relay said hello. Returns the record to persist, or a refusal. */
  hello(msg: RelayHello, authenticatedWorkerId: string): { ok: true; record: WorkerRecord } | { ok: false; reason: string } {
    if (msg.workerId !== authenticatedWorkerId) return { ok: false, reason: "worker id does not match the authenticated worker" };
    if (this.#blockSize !== null && msg.blockSize !== this.#blockSize)
      return { ok: false, reason: `block size ${msg.blockSize} differs from the pool's ${this.#blockSize}` };
    const prev = this.#workers.get(msg.workerId);
    if (prev && msg.epoch < prev.epoch) return { ok: false, reason: `stale epoch ${msg.epoch} < ${prev.epoch}` };
    if (this.#blockSize === null) this.#blockSize = msg.blockSize;
    const prevEpoch = prev?.epoch;
    const rec: WorkerRecord = {
      workerId: msg.workerId,
      url: msg.url.replace(/\/+$/, ""),
      blockSize: msg.blockSize,
      epoch: msg.epoch,
      status: "up",
      modelName: msg.modelName,
      contract: msg.contract ?? null,
      contractDigest: digestOf(msg.contract),
      kvEvents: msg.kvEvents,
      lastSeen: this.#now(),
      region: msg.region ?? null,
      prefillTokensPerSec: msg.prefillTokensPerSec ?? null,
    };
    const full = this.#upsert(rec);
    // Every hello starts a new relay session: the relay follows with a dump, which is the truth.
    // A newer epoch also fences out whatever the old process had cached.
    if (prevEpoch === undefined || msg.epoch !== prevEpoch) this.index.clearWorker(full.slot)
    if (prevEpoch === undefined || msg.epoch !== prevEpoch) this.pending.clear(full.slot);
    if (prevEpoch === undefined || msg.epoch !== prevEpoch) this.approx.clear(full.slot);
    if (prevEpoch === undefined || msg.epoch !== prevEpoch) this.approximate.clear(msg.workerId);
    this.#synced.delete(msg.workerId);
    return { ok: true, record: rec };
  }

  applyDump(workerId: string, msg: RelayDump): RelayApplyOutcome {
    const w = this.#workers.get(workerId);
    if (!w) return this.#drop("unknown_worker", false);
    if (msg.epoch !== w.epoch) return this.#drop("stale_epoch", false);
    // An exact dump replaces the worker's blocks. An approximate one (the relay lost history) is
    // merged into what the index still holds of this worker life: both are best guesses, and the
    // index's copy may remember prefixes the relay's view lost.
    if (!msg.approximate) this.index.clearWorker(w.slot);
    // Rows come parents first, so a cut keeps every admitted row's parent.
    const fit = this.budget.admit(this.index.size + this.approx.size, msg.blocks.length, this.#bySlot.length);
    const rows = fit < msg.blocks.length ? msg.blocks.slice(0, fit) : msg.blocks;
    const { applied, failed: failures } = this.index.applyDumpWire(w.slot, rows);
    this.counters.blocksStored += applied;
    if (failures) this.#count(`dump_${"parent_not_found"}`, failures);
    this.#budgetVerdict(workerId, msg.blocks.length - fit, true);
    if (msg.approximate) this.approximate.mark(workerId, "relay", "relay lost history: its view (merged with the index's last copy) may hold blocks the worker evicted");
    else this.approximate.clear(workerId, "relay");
    this.#synced.add(workerId);
    this.counters.dumps++;
    w.lastSeen = this.#now();
    return { ok: true };
  }

  applyEvents(workerId: string, msg: RelayEvents): RelayApplyOutcome {
    const w = this.#workers.get(workerId);
    if (!w) return this.#drop("unknown_worker", false);
    if (msg.epoch !== w.epoch) return this.#drop("stale_epoch", false);
    if (!this.#synced.has(workerId)) return this.#drop("not_synced", true);
    w.lastSeen = this.#now();
    let resync = false;
    for (const ev of msg.events) {
      if (ev.t === "stored") {
        // Defects are checked first, then the block budget (a full index refuses the whole chain: a
        // partial one would only be cut again by its children), then the chain is stored.
        const r = this.index.applyStoredEvent(w.slot, ev.parent, ev.blocks, (n) => this.budget.admit(this.index.size + this.approx.size, n, this.#bySlot.length) >= n);
        if ("voided" in r) {
          // A block that is its own ancestor voids the whole event (as the relay's block set does).
          this.#count(r.voided, ev.blocks.length);
          continue;
        }
        if ("refused" in r) {
          this.#count("block_budget", ev.blocks.length);
          this.#budgetVerdict(workerId, ev.blocks.length, false);
          continue;
        }
        this.counters.blocksStored += r.applied;
        if (!r.ok) {
          this.#count(r.error);
          if (r.error === "parent_not_found") resync = true;
          continue;
        }
      } else if (ev.t === "removed") {
        this.counters.blocksRemoved += this.index.applyRemoved(w.slot, ev.hashes);
      } else {
        this.index.clearWorker(w.slot);
        // The worker dropped everything: whatever the view got wrong is gone with it.
        this.approximate.clear(workerId);
      }
      this.counters.eventsApplied++;
    }
    if (resync) {
      this.#synced.delete(workerId);
      return { ok: false, reason: "parent_not_found", resync: true };
    }
    return { ok: true };
  }

  setStatus(workerId: string, status: WorkerStatus): WorkerRecord | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    w.status = status;
    w.lastSeen = this.#now();
    if (status === "down") {
      this.index.clearWorker(w.slot);
      this.pending.clear(w.slot);
      this.approx.clear(w.slot);
      this.load.releaseWorker(w.slot);
      this.#synced.delete(workerId);
      this.approximate.clear(workerId);
    }
    const { slot: _s, ...rec } = w;
    return rec;
  }

  /**
   * The relay's socket closed: its view can no longer be kept fresh. The index keeps its last copy
   * of the worker's blocks (the worker still caches most of them) but no longer calls it synced:
   * the worker is approximate until its relay's next exact dump. A relay that comes back having
   * lost history sends an approximate dump, which is merged into this copy (applyDump).
   */
  relayGone(workerId: string): void {
    const w = this.#workers.get(workerId);
    if (!w) return;
    this.#synced.delete(workerId);
    if (this.index.workerBlockCount(w.slot) > 0 || this.approximate.has(workerId))
      this.approximate.mark(workerId, "relay", "relay disconnected: routing on the index's last copy of its blocks");
  }

  removeWorker(workerId: string): boolean {
    const w = this.#workers.get(workerId);
    if (!w) return false;
    this.index.removeWorker(w.slot);
    this.pending.clear(w.slot);
    this.approx.clear(w.slot);
    this.load.releaseWorker(w.slot);
    this.#bySlot[w.slot] = "";
    this.#workers.delete(workerId);
    this.#synced.delete(workerId);
    this.approximate.clear(workerId);
    return true;
  }

  route(req: RouteRequest): RouteDecision | null {
    const now = this.#now();
    this.counters.expired += this.load.expireStale(now);
    const e = this.#evaluate(req);
    if (!e) {
      this.metrics.noWorker(req.fallbackReason ?? null);
      return null;
    }
    const { live, chain, scored, views, blockSize } = e;
    const i = pickIndex(scored, this.#temperature, this.#random);
    const chosen = live[i]!;
    const overlap = scored[i]!.overlapBlocks;
    this.pending.add(chosen.slot, req.localHashes, now);
    if (!chosen.kvEvents || this.approximate.has(chosen.workerId)) this.approx.record(chosen.slot, req.localHashes, now);
    const receiptId = `r${now.toString(36)}-${(this.#receiptSeq++).toString(36)}`;
    const requestBlocks = Math.ceil(req.isl / blockSize);
    const prefillTokens = Math.max(0, req.isl - overlap * blockSize);
    this.load.add({ receiptId, slot: chosen.slot, prefillTokens, decodeBlocks: requestBlocks, chainKeys: chain, startedAt: now, prefillDone: false });
    if (this.#replicateLoad)
      this.#loadOutbox.push({ op: "add", id: receiptId, workerId: chosen.workerId, prefillTokens, decodeBlocks: requestBlocks, chainKeys: chain, at: now });
    this.#pending.set(receiptId, {
      receiptId,
      workerId: chosen.workerId,
      at: now,
      promptTokens: req.isl,
      totalBlocks: req.localHashes.length,
      predictedOverlapBlocks: overlap,
      blockSize,
      fallbackReason: req.fallbackReason ?? null,
    });
    if (this.#pending.size > 10_000) this.#pending.delete(this.#pending.keys().next().value!);
    this.counters.routed++;
    this.metrics.routed({
      at: now,
      receiptId,
      workerId: chosen.workerId,
      overlapBlocks: overlap,
      totalBlocks: req.localHashes.length,
      isl: req.isl,
      fallbackReason: req.fallbackReason ?? null,
      retry: (req.exclude?.length ?? 0) > 0,
      candidates: views,
    });
    return {
      workerId: chosen.workerId,
      url: chosen.url,
      overlapBlocks: overlap,
      totalBlocks: req.localHashes.length,
      blockSize,
      receiptId,
      candidates: views,
    };
  }

  markPrefillDone(receiptId: string): void {
    const r = this.load.get(receiptId);
    this.load.markPrefillDone(receiptId);
    if (this.#replicateLoad && r && !r.prefillDone) this.#loadOutbox.push({ op: "done", id: receiptId, at: this.#now() });
  }

  /** Frees the request's load and records its receipt. Returns true if drift just started. */
  settle(req: SettleRequest): { drift: boolean; receipt: Receipt | null } {
    const released = this.load.release(req.receiptId);
    if (this.#replicateLoad && released) this.#loadOutbox.push({ op: "release", id: req.receiptId, at: this.#now() });
    const p = this.#pending.get(req.receiptId);
    if (!p) return { drift: false, receipt: null };
    this.#pending.delete(req.receiptId);
    const receipt: Receipt = {
      ...p,
      promptTokens: req.promptTokens ?? p.promptTokens,
      actualCachedTokens: req.cachedTokens,
      outcome: req.outcome,
    };
    this.counters.settled++;
    this.metrics.settled(
      {
        workerId: receipt.workerId,
        outcome: receipt.outcome,
        promptTokens: receipt.promptTokens,
        predictedOverlapBlocks: receipt.predictedOverlapBlocks,
        blockSize: receipt.blockSize,
        actualCachedTokens: receipt.actualCachedTokens,
        retrying: req.retrying === true,
        edgeOverheadMs: req.edgeOverheadMs ?? null,
      },
      this.#now(),
    );
    return { drift: this.receipts.settle(receipt), receipt };
  }

  // ---- load replication between shards (load-replica.ts) ----

  /** Load changes made here since the last call, for the other shards (empty unless replicateLoad). */
  takeLoadOps(): LoadOp[] {
    const ops = this.#loadOutbox;
    this.#loadOutbox = [];
    if (ops.length > 0) {
      this.#loadSync.opsSent += ops.length;
      this.#loadSync.batchesSent++;
    }
    return ops;
  }

  get pendingLoadOps(): number {
    return this.#loadOutbox.length;
  }

  /** A batch could not be delivered to one peer shard. */
  loadSendFailed(): void {
    this.#loadSync.sendFailures++;
  }

  /** Applies another shard's load changes to this shard's replica of the pool's load. */
  applyRemoteLoad(fromShard: number, ops: readonly LoadOp[]): { applied: number; skipped: number } {
    const now = this.#now();
    let applied = 0;
    for (const op of ops) {
      const id = replicaReceiptId(fromShard, op.id);
      let ok = false;
      if (op.op === "add") {
        const w = this.#workers.get(op.workerId);
        // A worker that is down has no load to carry; one this shard has not met yet is skipped.
        if (w && w.status !== "down" && !this.load.get(id) && !this.#releasedBeforeAdd.take(id)) {
          this.load.add({ receiptId: id, slot: w.slot, prefillTokens: op.prefillTokens, decodeBlocks: op.decodeBlocks, chainKeys: op.chainKeys, startedAt: now, prefillDone: false });
          ok = true;
        }
      } else if (op.op === "done") {
        const r = this.load.get(id);
        if (r) {
          this.load.markPrefillDone(id);
          ok = true;
        }
      } else {
        ok = this.load.release(id) !== undefined;
        // A release that overtook its add (or follows a skipped one) must not let the add in later.
        if (!ok) this.#releasedBeforeAdd.add(id, now);
      }
      if (ok) applied++;
      this.#loadLag.record(now - op.at);
    }
    this.#loadSync.opsReceived += ops.length;
    this.#loadSync.opsApplied += applied;
    this.#loadSync.opsSkipped += ops.length - applied;
    return { applied, skipped: ops.length - applied };
  }

  loadSyncStats(): LoadSyncStats {
    return { ...this.#loadSync, lag: this.#loadLag.summary() };
  }

  /** route() without side effects: same candidates and costs, no load, receipt or counters. */
  peek(req: Pick<RouteRequest, "localHashes" | "isl" | "exclude" | "edgeRegion" | "edgeColo">): RoutePreview {
    const totalBlocks = req.localHashes.length;
    const e = this.#evaluate(req);
    if (!e) return { workerId: null, overlapBlocks: 0, totalBlocks, blockSize: this.#blockSize ?? 16, candidates: [], tiedWith: [] };
    const { live, scored, views, blockSize } = e;
    const i = pickIndex(scored, this.#temperature, this.#random);
    const minCost = Math.min(...scored.map((x) => x.cost));
    const tiedWith = views.filter((v, k) => k !== i && scored[k]!.cost === minCost).map((v) => v.workerId);
    return { workerId: live[i]!.workerId, overlapBlocks: scored[i]!.overlapBlocks, totalBlocks, blockSize, candidates: views, tiedWith };
  }

  /**
   * Scores every live worker for a request (shared by route and peek): overlap from the index
   * (or the approximate index for workers without events, or recent routes), load, cost.
   */
  #evaluate(req: Pick<RouteRequest, "localHashes" | "isl" | "exclude" | "edgeRegion" | "edgeColo">) {
    const blockSize = this.#blockSize ?? 16;
    const exclude = new Set(req.exclude ?? []);
    const live = [...this.#workers.values()].filter((w) => w.status === "up" && !exclude.has(w.workerId));
    if (live.length === 0) return null;
    const now = this.#now();
    this.index.findMatches(req.localHashes, this.#scores);
    this.approx.match(req.localHashes, now);
    const chain = chainKeysOf(req.localHashes);
    const shared = this.load.sharedPrefixes(chain);
    const pendingOverlap = this.pending.overlaps(req.localHashes, now);
    const candidates: Candidate[] = live.map((w) => ({
      slot: w.slot,
      overlapBlocks: Math.max(
        !w.kvEvents ? this.approx.overlapOf(w.slot)
        : this.approximate.has(w.workerId) ? Math.max(this.#scores[w.slot] ?? 0, this.approx.overlapOf(w.slot))
        : (this.#scores[w.slot] ?? 0),
        pendingOverlap.get(w.slot) ?? 0,
      ),
      activePrefillTokens: this.load.prefillTokens(w.slot),
      activeDecodeBlocks: this.load.decodeBlocks(w.slot),
      sharedActiveBlocks: shared.get(w.slot) ?? 0,
    }));
    const scored = this.#score(live, candidates, req, blockSize);
    const views: RouteCandidateView[] = live.map((w, k) => ({
      workerId: w.workerId,
      overlapBlocks: scored[k]!.overlapBlocks,
      cost: scored[k]!.cost,
      activePrefillTokens: candidates[k]!.activePrefillTokens,
      activeDecodeBlocks: candidates[k]!.activeDecodeBlocks,
    }));
    return { live, chain, scored, views, blockSize };
  }


  /** Everything operators see about this pool (metrics scrape, dashboard), as plain JSON. */
  metricsSnapshot(): PoolMetricsSnapshot {
    const workers = this.workers();
    const verdict = this.cohort();
    return {
      at: this.#now(),
      blockSize: this.#blockSize,
      indexedBlocks: this.index.size,
      blockBudget: this.budget.limitFor(this.#bySlot.length),
      activeRequests: this.load.size,
      counters: { ...this.counters, dropReasons: { ...this.counters.dropReasons } },
      workers: workers.map((w) => ({
        workerId: w.workerId,
        url: w.url,
        status: w.status,
        blocks: w.blocks,
        synced: w.synced,
        approximate: w.approximate,
        approximateReasons: w.approximateReasons,
        activeRequests: w.activeRequests,
        activePrefillTokens: w.activePrefillTokens,
        activeDecodeBlocks: w.activeDecodeBlocks,
        contractDigest: w.contractDigest,
        kvEvents: w.kvEvents,
        epoch: w.epoch,
        lastSeen: w.lastSeen,
      })),
      drift: this.receipts.stats().map((d) => ({ workerId: d.workerId, driftEwma: d.driftEwma, drifting: d.drifting })),
      cohort: cohortOf(workers, verdict),
      recentReceipts: this.receipts.recent(RECENT_KEPT).map((r) => ({
        at: r.at,
        workerId: r.workerId,
        outcome: r.outcome,
        promptTokens: r.promptTokens,
        predictedCachedTokens: Math.min(r.predictedOverlapBlocks * r.blockSize, r.promptTokens),
        actualCachedTokens: r.actualCachedTokens,
        fallbackReason: r.fallbackReason,
      })),
      recorder: this.metrics.snapshot(),
    };
  }

  /**
   * The pool's cohort contract: exact media routing only while every worker that is up publishes
   * the same valid contract (ARCHITECTURE.md §3). Recomputed on demand; cheap (a few workers).
   */
  cohort(): CohortResult {
    const up = [...this.#workers.values()].filter((w) => w.status === "up");
    return cohortEligibility(up.map((w) => (isRecord(w.contract) ? w.contract : null)));
  }

  /** Default block cost; estimated TTFT when regions are configured and the edge's region is known. */
  #score(live: readonly WorkerRecord[], candidates: Candidate[], req: Pick<RouteRequest, "isl" | "edgeRegion" | "edgeColo">, blockSize: number) {
    const edgeRegion = this.#regions ? (req.edgeRegion ?? resolveEdgeRegion(this.#regions, req.edgeColo)) : null;
    if (this.#regions && edgeRegion) {
      const placements = live.map((w) => ({ region: w.region ?? null, prefillTokensPerSec: w.prefillTokensPerSec ?? null }));
      return scoreCandidatesByTtft({ candidates, placements, isl: req.isl, blockSize, edgeRegion, config: this.#regions });
    }
    if (this.#localTtft) {
      // Every worker as if next door: queue + uncached prefill + decode interference.
      const placements = live.map((w) => ({ region: LOCAL_REGION, prefillTokensPerSec: w.prefillTokensPerSec ?? null }));
      return scoreCandidatesByTtft({ candidates, placements, isl: req.isl, blockSize, edgeRegion: LOCAL_REGION, config: this.#localTtft });
    }
    return scoreCandidates({ candidates, isl: req.isl, blockSize, decodeWeight: this.#decodeWeight });
  }

  /** Refused blocks make the worker approximate; a dump that fitted whole makes it exact again. */
  #budgetVerdict(workerId: string, refused: number, wholeView: boolean): void {
    if (refused > 0) {
      if (wholeView) this.#count("block_budget", refused);
      this.approximate.mark(workerId, "budget", `index object full (${this.budget.limitFor(this.#bySlot.length)} blocks): ${refused} block(s) refused`);
    } else if (wholeView) this.approximate.clear(workerId, "budget");
  }

  #count(reason: string, n = 1): void {
    this.counters.eventsDropped += n;
    this.counters.dropReasons[reason] = (this.counters.dropReasons[reason] ?? 0) + n;
  }

  #drop(reason: string, resync: boolean): RelayApplyOutcome {
    this.#count(reason);
    return { ok: false, reason, resync };
  }
}

/**
 * A stored chain repeating a hash (a block equal to the parent or to an earlier block), compared as
 * the relay spells them (canonical decimal). Single blocks are checked by the index itself.
 */
function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Digest of a published contract, or null when it does not parse (requires initHashing()). */
function digestOf(published: unknown): string | null {
  if (!isRecord(published)) return null;
  const r = parseWorkerContract(published);
  return r.ok ? contractDigest(r.contract) : null;
}
