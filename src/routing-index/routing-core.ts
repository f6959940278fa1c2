/**
 * The routing index of one model pool, free of runtime bindings. Its pieces are private: callers
 * (relay-inbox.ts, the Durable Object, tests) use its methods and read what it holds through
 * workers(), sizes(), stats() and metricsSnapshot().
 *  - worker-registry.ts: worker records, slots, hellos, status, lastSeen;
 *  - block-views.ts: what each worker caches (dumps, events, approximate workers, block budget);
 *  - load-sync.ts: in-flight load changed here, and its replication between shards;
 *  - router.ts: route, peek, settle (selection, pending receipts);
 *  - cohort.ts: worker contracts and the pool's cohort;
 *  - pool-metrics.ts: worker rows, counters and the metrics snapshot.
 */
import type { ApproxConfig } from "../block-index/approx-index.ts";
import type { BlockIndex } from "../block-index/block-index.ts";
import { LoadTracker } from "../load/load-tracker.ts";
import { endUnseenPrefills, PrefillWatch } from "./prefill-watch.ts";
import { PrefillRates } from "./prefill-rates.ts";
import type { LoadOp, LoadSyncStats } from "../load/load-replica.ts";
import type { CohortResult } from "../layout/index.ts";
import { PoolRecorder } from "../metrics/pool-recorder.ts";
import type { IndexCounters, PoolMetricsSnapshot } from "../metrics/pool-snapshot.ts";
import type { RelayDump, RelayEvents, RelayHello, WorkerStatus } from "../relay-wire/relay-protocol.ts";
import type { RegionsConfig } from "../selection/regions.ts";
import { DEFAULT_SELECTION_COST, type SelectionCost } from "../selection/selection.ts";
import { DEFAULT_TTFT_PARAMS } from "../selection/ttft-cost.ts";
import { PrefillRateLearner } from "../load/prefill-rate-learner.ts";
import type { TierCostParams } from "../selection/tier-cost.ts";
import type { LoadTier, TierCalibrationView } from "../selection/tier-calibration.ts";
import type { PdTransferParams } from "../selection/pd-transfer-cost.ts";
import type { DuplicateCostParams } from "../selection/duplicate-cost.ts";
import { BlockViews, type RelayApplyOutcome } from "./block-views.ts";
import { countDropped } from "./drop-count.ts";
import { poolCohort } from "./cohort.ts";
import { LoadSync } from "./load-sync.ts";
import { emptyIndexCounters, poolMetricsSnapshot, workerRows, type WorkerRow } from "./pool-metrics.ts";
import { ReceiptBook, type Receipt } from "./receipts.ts";
import type { PoolStats } from "./front-door.ts";
import { Router, type RouteDecision, type RoutePreview, type RouteRequest, type SettleRequest } from "./router.ts";
import { isQuarantined, WorkerRegistry, type WorkerRecord } from "./worker-registry.ts";
import { AdmissionGate, type AdmissionTicket, type AdmitOutcome, type Timers } from "../admission/admission-gate.ts";
import type { AdmissionSnapshot } from "../metrics/admission-snapshot.ts";
import { isFull, loadBoundTokens } from "../admission/load-bound.ts";
import { SessionAffinity } from "./session-affinity.ts";
import { isDecodeWorker } from "./pd-pool.ts";
import { parseRankTarget } from "./rank-target.ts";
import { storageViewKey } from "./storage-views.ts";
import { MAX_RECEIPT_AGE_MS, MAX_RECEIPTS_PER_CALL, ReceiptEntrySchema, type CarryingReceipts } from "./receipt-entries.ts";

/** A first pick through admission: the route, and the conversation's affinity key (session-affinity.ts), if any. */
export type AdmissionRouteRequest = RouteRequest & { affinityKey?: string | null };
import { AdmissionConfigSchema, type AdmissionConfig } from "../config/config.ts";

export type { RelayApplyOutcome } from "./block-views.ts";
export type { RouteCandidateView, RouteDecision, RoutePreview, RouteRequest, SettleRequest } from "./router.ts";
export type { WorkerRecord } from "./worker-registry.ts";

/** The index's event and routing counters (the metrics snapshot exports the same shape). */
export type CoreCounters = IndexCounters;

/** What one index object holds now (RoutingCore.sizes). */
export interface IndexSizes {
  indexedBlocks: number;
  /** Blocks assumed cached on workers without KV events (approximate mode, src/block-index/approx-index.ts). */
  assumedBlocks: number;
  /** Blocks refused by the block budget since start (block-budget.ts). */
  blocksRefused: number;
  activeRequests: number;
}

export interface RoutingCoreOptions {
  /** Pool block size; null = adopt the first worker's. */
  blockSize: number | null;
  temperature?: number;
  /** Weight of decode load in the block cost (default 1, Dynamo's); see src/selection/block-cost.ts. */
  decodeWeight?: number;
  staleMs?: number;
  random?: () => number;
  now?: () => number;
  /** The block index (default: one RadixIndex; a ShardedIndex splits it by chain root, src/block-index/sharded-index.ts). */
  index?: BlockIndex;
  /** Approximate mode for workers registered with kvEvents: false (src/block-index/approx-index.ts). */
  approx?: Partial<ApproxConfig>;
  /** RTT table and TTFT tunables for region-aware selection (src/selection/regions.ts); null = off. */
  regions?: RegionsConfig | null;
  /** Which cost scores workers (src/selection/selection.ts); default DEFAULT_SELECTION_COST. */
  cost?: SelectionCost;
  /**
   * false: costs read each worker's counted prefill (a routed request's uncached tokens until its
   * prefill-done mark or settlement), as Dynamo's router does (the routing bench's dynamo-blocks),
   * not the estimate drained at its prefill rate (load-tracker.ts); default true.
   */
  drainQueuedPrefill?: boolean;
  /** Load-back pricing of host-memory (HiCache) blocks (src/selection/tier-cost.ts); default DEFAULT_TIER_COST. */
  tiers?: TierCostParams;
  /** Blocks each shared HiCache storage view keeps (block-views.ts DEFAULT_STORAGE_CAPACITY_BLOCKS). */
  storageCapacityBlocks?: number;
  /** KV bytes per token and prefill → decode bandwidth: a PD pair's TTFT adds the transfer (pd-transfer-cost.ts). */
  pdTransfer?: PdTransferParams;
  /** Learn each worker's prefill rate from its prefills, used where its hello reports none (prefill-rates.ts); default false. */
  learnPrefillRate?: boolean;
  /** Cost "ttft": what copying a prefix another worker holds onto a full cache costs (duplicate-cost.ts); default DEFAULT_DUPLICATE_COST. */
  duplicateCost?: DuplicateCostParams;
  /** One shard of a sharded pool: queue this core's load changes for the other shards (load-replica.ts). */
  replicateLoad?: boolean;
  /** With replicateLoad: called when load changes start to queue (none was pending), wherever they come from; send them (takeLoadOps) soon. */
  onLoadOps?: () => void;
  /** A worker's receipts just started to drift from its predictions (receipts.ts), whichever settle showed it. */
  onDrift?: (workerId: string) => void;
  /** Most (worker, block) entries this index holds (block-budget.ts); default DEFAULT_BLOCK_BUDGET. */
  blockBudget?: number;
  /** Bytes the block index may take (block-budget.ts DEFAULT_INDEX_BYTES); Infinity: entries only. */
  indexBudgetBytes?: number;
  /** A synced worker whose relay is silent this long is approximate (default DEFAULT_RELAY_SILENT_MS). */
  relaySilentMs?: number;
  /** How long an edge's failed connect keeps routing away from a worker (default DEFAULT_QUARANTINE_MS). */
  quarantineMs?: number;
  /** Admission under overload (src/admission/); default AdmissionConfigSchema's defaults. */
  admission?: AdmissionConfig;
  /** The timer of the admission queue's deadlines (default setTimeout). */
  timers?: Timers;
}

const GLOBAL_TIMERS: Timers = { set: (fn, ms) => setTimeout(fn, ms), clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>) };

/** Three of the relay's 30 s pings (services/relay/options.ts pingIntervalMs) missed. */
export const DEFAULT_RELAY_SILENT_MS = 90_000;
/** Long enough for the relay's health check (every 0.5 s) to report a dead worker down first. */
export const DEFAULT_QUARANTINE_MS = 15_000;

export class RoutingCore {
  readonly #load: LoadTracker;
  readonly #receipts = new ReceiptBook();
  readonly #counters: CoreCounters = emptyIndexCounters();
  /** Settlements that freed load, from receipts that route and admit calls carried, since takeCarriedSettlements. */
  #carriedSettlements = 0;
  /** Operator metrics (routing decisions, receipts, edge overhead); see src/metrics/. */
  readonly #metrics = new PoolRecorder();
  readonly #registry: WorkerRegistry;
  readonly #views: BlockViews;
  readonly #loadSync: LoadSync;
  /** Unfinished prefills, ended by the worker's own stored blocks (prefill-watch.ts). */
  readonly #prefillWatch = new PrefillWatch();
  readonly #rates: PrefillRates;
  readonly #router: Router;
  readonly #now: () => number;
  readonly #relaySilentMs: number;
  readonly #quarantineMs: number;
  readonly #admissionCfg: AdmissionConfig;
  readonly #admission: AdmissionGate<AdmissionRouteRequest, RouteDecision>;
  readonly #affinity = new SessionAffinity();
  readonly #onDrift: ((workerId: string) => void) | undefined;

  constructor(opts: RoutingCoreOptions) {
    this.#now = opts.now ?? Date.now;
    this.#relaySilentMs = opts.relaySilentMs ?? DEFAULT_RELAY_SILENT_MS;
    this.#quarantineMs = opts.quarantineMs ?? DEFAULT_QUARANTINE_MS;
    this.#onDrift = opts.onDrift;
    this.#registry = new WorkerRegistry(opts.blockSize, this.#now);
    this.#views = new BlockViews(this.#registry, this.#counters, opts, (workerId) => this.#giveUpPrefills(workerId));
    const defaultRate = (opts.regions ?? DEFAULT_TTFT_PARAMS).defaultPrefillTokensPerSec;
    this.#rates = new PrefillRates(defaultRate, opts.learnPrefillRate ? new PrefillRateLearner() : null);
    // A worker's queued prefill drains at the rate its estimate divides by.
    this.#load = new LoadTracker(opts.staleMs ?? 300_000, (opts.drainQueuedPrefill ?? true) ? (slot) => this.#rates.of(this.#registry.atSlot(slot) ?? { slot }) : null);
    this.#loadSync = new LoadSync(this.#load, this.#registry, opts.replicateLoad ?? false, this.#now, opts.onLoadOps);
    this.#router = new Router(
      { registry: this.#registry, views: this.#views, load: this.#load, loadSync: this.#loadSync, prefillWatch: this.#prefillWatch, rates: this.#rates, receipts: this.#receipts, metrics: this.#metrics, counters: this.#counters },
      { ...opts, cost: opts.cost ?? DEFAULT_SELECTION_COST, now: this.#now },
    );
    this.#admissionCfg = opts.admission ?? AdmissionConfigSchema.parse({});
    this.#admission = new AdmissionGate(
      this.#admissionCfg,
      {
        room: () => this.#rooms(),
        route: (req, onlyWorkers) => this.#routeWithAffinity(req, onlyWorkers),
        overlapOn: (req, workerId) => this.#router.peek({ ...req, onlyWorkers: [workerId] }).overlapBlocks,
        uncachedTokens: (req) => {
          const p = this.#router.peek(req);
          return Math.max(0, req.isl - p.overlapBlocks * p.blockSize);
        },
        uncachedTokensOf: (req, d) => Math.max(0, req.isl - d.overlapBlocks * d.blockSize),
        receiptOf: (d) => d.receiptId,
      },
      this.#now,
      opts.timers ?? GLOBAL_TIMERS,
    );
  }

  /**
   * Routes a first pick: to the worker its conversation's key prefers while that worker is under
   * its load cap and no other holds more of the request (session-affinity.ts), else as route()
   * decides; the key then remembers where it went.
   */
  #routeWithAffinity(req: AdmissionRouteRequest, onlyWorkers: readonly string[] | null): RouteDecision | null {
    const { affinityKey, ...route } = req;
    const key = affinityKey ?? null;
    let only = onlyWorkers;
    if (key !== null) {
      const rooms = this.#rooms().filter((w) => !onlyWorkers || onlyWorkers.includes(w.workerId));
      const full = new Map(rooms.map((w) => [w.workerId, w.full]));
      const preview = rooms.length > 0 ? this.#router.peek({ ...route, onlyWorkers: rooms.map((w) => w.workerId) }) : null;
      const candidates = (preview?.candidates ?? []).map((c) => ({
        workerId: c.workerId,
        overlapBlocks: c.overlapBlocks,
        activeRequests: this.#load.activeRequests(this.#registry.slotOf(c.workerId)),
        full: full.get(c.workerId) ?? true,
      }));
      const preferred = this.#affinity.preferred(key, candidates, this.#now());
      if (preferred !== null) only = [preferred];
    }
    // The preferred worker may still refuse the request (a stream filter): then as route() decides.
    const d = (only !== onlyWorkers && only ? this.route({ ...route, onlyWorkers: only }) : null) ?? this.route(onlyWorkers ? { ...route, onlyWorkers } : route);
    if (d && key !== null) this.#affinity.record(key, d.workerId, this.#now());
    return d;
  }

  /** Routable workers (up; quarantined ones only when no other is up, as the router) and whether each is at its load bound. */
  #rooms(): { workerId: string; full: boolean }[] {
    const now = this.#now();
    const blockSize = this.#registry.blockSize ?? 16;
    // A PD pool's decode workers never take a first pick (pd-pool.ts): their room is the pair's, not a pick's.
    const up = this.#registry.all().filter((w) => w.status === "up" && !isDecodeWorker(w));
    const clear = up.filter((w) => !isQuarantined(w, now));
    return (clear.length > 0 ? clear : up).map((w) => ({
      workerId: w.workerId,
      full: isFull(this.#load.decodeBlocks(w.slot) * blockSize, loadBoundTokens(w.kvCapacityTokens, this.#admissionCfg)),
    }));
  }

  // ---- worker registry (worker-registry.ts) ----

  get blockSize(): number | null {
    return this.#registry.blockSize;
  }

  /** Sets the pool block size if none is known yet (from configuration, before any worker). */
  adoptBlockSize(blockSize: number): void {
    this.#registry.adoptBlockSize(blockSize);
  }

  /** Restores a registry row (after a Durable Object restart). Blocks come later, from dumps. */
  restoreWorker(rec: WorkerRecord): void {
    const { worker, added } = this.#registry.restore(rec);
    if (added) this.#views.addSlot(worker.slot);
  }

  workers(): WorkerRow[] {
    this.#checkTimeouts();
    return workerRows(this.#registry, this.#views, this.#load, this.#rates, this.#now());
  }

  worker(workerId: string): WorkerRecord | undefined {
    return this.#registry.record(workerId);
  }

  /** Any message from the worker's relay: the time operators see as lastSeen (in memory); a silent relay is heard again. */
  touch(workerId: string): number | null {
    const at = this.#registry.touch(workerId);
    if (at !== null) this.#views.approximate.clear(workerId, "silent");
    return at;
  }

  /** Whether the worker's relay has said nothing for longer than `relaySilentMs`. */
  relaySilent(workerId: string): boolean {
    const w = this.#registry.get(workerId);
    return w !== undefined && this.#isSilent(w, this.#now());
  }

  #isSilent(w: WorkerRecord, now: number): boolean {
    return now - w.lastSeen > this.#relaySilentMs;
  }

  /**
   * Checked lazily, before each read of the views or the load (the index object has no timer of its
   * own): workers whose relay has said nothing (events, dumps, pings) for longer than
   * `relaySilentMs` are marked approximate until the relay is heard again (which also gives up on
   * their watched prefills); watched prefills past their deadline end (prefill-watch.ts).
   */
  #checkTimeouts(): void {
    const now = this.#now();
    for (const w of this.#registry.all()) {
      if (!w.kvEvents || !this.#isSilent(w, now) || !this.#views.isSynced(w.workerId) || this.#views.approximate.has(w.workerId, "silent")) continue;
      this.#views.approximate.mark(w.workerId, "silent", `nothing from its relay for ${Math.round((now - w.lastSeen) / 1000)} s: the path may be dead and events lost`);
    }
    endUnseenPrefills(this.#loadSync, this.#prefillWatch.overdue(now));
  }

  /** The views stopped following the worker's stored blocks (block-views.ts): its watched prefills cannot be seen to end. */
  #giveUpPrefills(workerId: string): void {
    const slot = this.#registry.slotOf(workerId);
    if (slot >= 0) endUnseenPrefills(this.#loadSync, this.#prefillWatch.release(slot));
  }

  isSynced(workerId: string): boolean {
    return this.#views.isSynced(workerId);
  }

  /** Whether the index's view of the worker may be wrong (approximate-workers.ts); no check for silence first. */
  isApproximate(workerId: string): boolean {
    return this.#views.approximate.has(workerId);
  }

  /**
   * A relay said hello. Returns the record to persist, or a refusal. `storageGroup`: the one its
   * key grants (null: its storage view is its worker's own; storage-views.ts).
   */
  hello(msg: RelayHello, authenticatedWorkerId: string, storageGroup: string | null = null): { ok: true; record: WorkerRecord } | { ok: false; reason: string; indexEpoch?: number } {
    const r = this.#registry.hello(msg, authenticatedWorkerId);
    if (!r.ok) return r;
    if (r.added) this.#views.addSlot(r.worker.slot);
    this.#views.storage.attach(r.worker.workerId, msg.hicacheStorage === undefined ? null : storageViewKey(r.worker.workerId, storageGroup, msg.hicacheStorage));
    // Every hello starts a new relay session: the relay follows with a dump, which is the truth.
    // A newer epoch also fences out whatever the old process had cached.
    if (r.newLife) {
      this.#views.resetWorker(r.worker.slot, r.worker.workerId);
      this.#rates.reset(r.worker.slot);
      delete r.worker.quarantinedUntil; // a new process: the edges' failed connects were to the old one
    } else this.#views.unsync(r.worker.workerId);
    this.#admission.pump(r.worker.workerId);
    return { ok: true, record: r.record };
  }

  /**
   * An edge could not connect to the worker (nothing was processed): route elsewhere for
   * `quarantineMs`. Its view and status stay: a dead worker is reported down by its relay's health
   * check, and a live one (a lost pooled connection, a network blip) comes back by itself. The
   * other DP ranks of the worker (rank-target.ts) share its URL, so they stay away with it.
   */
  quarantine(workerId: string): WorkerRecord | undefined {
    const until = this.#now() + this.#quarantineMs;
    const w = this.#registry.get(workerId);
    if (w) for (const other of this.#registry.values()) if (other.workerId !== workerId && other.url === w.url) this.#registry.quarantine(other.workerId, until);
    return this.#registry.quarantine(workerId, until) ? this.#registry.record(workerId) : undefined;
  }

  /**
   * A relay authenticated as this worker announced another life that the pool refuses (an older
   * epoch or another block size) while no relay session of the registered life is open: that life
   * is over, so its blocks stop counting and the worker is down until a hello the pool accepts.
   */
  fenceRefusedLife(workerId: string, epoch: number): WorkerRecord | undefined {
    const w = this.#registry.get(workerId);
    if (!w || w.epoch === epoch) return undefined;
    return this.setStatus(workerId, "down");
  }

  setStatus(workerId: string, status: WorkerStatus): WorkerRecord | undefined {
    const w = this.#registry.setStatus(workerId, status);
    if (!w) return undefined;
    if (status === "down") {
      this.#views.resetWorker(w.slot, workerId);
      this.#load.releaseWorker(w.slot);
      this.#prefillWatch.clear(w.slot);
      this.#rates.reset(w.slot);
    }
    this.#admission.pump(status === "up" ? workerId : null);
    const { slot: _s, ...rec } = w;
    return rec;
  }

  /**
   * Forgets a target, or a worker with every DP-rank target it has (`w1` takes `w1#0`, `w1#1`, …;
   * `w1#1` only itself). The removed target ids; empty when none was known.
   */
  removeWorker(workerId: string): string[] {
    const ids = this.#registry
      .all()
      .map((w) => w.workerId)
      .filter((id) => id === workerId || (parseRankTarget(id).rank !== null && parseRankTarget(id).workerId === workerId));
    for (const id of ids) {
      const w = this.#registry.remove(id)!;
      this.#affinity.forgetWorker(id);
      this.#views.removeWorker(w.slot, id);
      this.#load.releaseWorker(w.slot);
      this.#prefillWatch.clear(w.slot);
      this.#rates.reset(w.slot);
      this.#receipts.forgetWorker(id);
      this.#metrics.forgetWorker(id);
    }
    return ids;
  }

  /** The pool's cohort contract (cohort.ts). */
  cohort(): CohortResult {
    return poolCohort(this.#registry.all());
  }

  // ---- block views (block-views.ts) ----

  applyDump(workerId: string, msg: RelayDump): RelayApplyOutcome {
    const out = this.#views.applyDump(workerId, msg);
    if (msg.blocks.length > 0) this.#endPrefills(workerId);
    return out;
  }

  applyEvents(workerId: string, msg: RelayEvents): RelayApplyOutcome {
    const out = this.#views.applyEvents(workerId, msg);
    if (msg.events.some((e) => e.t === "stored")) this.#endPrefills(workerId);
    return out;
  }

  /** The worker stored blocks: requests routed to it whose chain it now holds have finished their prefill. */
  #endPrefills(workerId: string): void {
    const w = this.#registry.get(workerId);
    if (!w || this.#prefillWatch.watched(w.slot) === 0) return;
    const done = this.#prefillWatch.finished(
      w.slot,
      (end) => this.#views.index.holdsChainEnd(w.slot, end),
      (id) => this.#load.get(id)?.prefillDone === false,
    );
    for (const id of done) {
      this.#router.prefillDone(id);
      this.#loadSync.markPrefillDone(id);
    }
  }

  /** A relay frame the index refused (too large, malformed, from a superseded session): counted with the views' drops. */
  countDropped(reason: string): void {
    countDropped(this.#counters, reason);
  }

  /** The relay's socket closed: the worker is approximate until its next exact dump (block-views.ts), its watched prefills ended. */
  relayGone(workerId: string): void {
    this.#views.relayGone(workerId);
  }

  // ---- routing (router.ts) ----

  /** Applies the receipts the call carries, then decides: the pick sees the load they free. */
  route(req: CarryingReceipts<RouteRequest>): RouteDecision | null {
    if (req.receipts !== undefined) this.#carriedSettlements += this.applyReceipts(req.receipts);
    this.#checkTimeouts();
    return this.#router.route(req);
  }

  /** route() without side effects: same candidates and costs, no load, receipt or counters. */
  peek(req: Pick<RouteRequest, "localHashes" | "isl" | "exclude" | "edgeRegion" | "edgeColo">): RoutePreview {
    this.#checkTimeouts();
    return this.#router.peek(req);
  }

  /** `ageMs`: how long the mark waited at the edge (receipt-entries.ts PrefillDoneEntrySchema). */
  markPrefillDone(receiptId: string, ageMs = 0): void {
    this.#router.prefillDone(receiptId, Math.min(Math.max(0, ageMs), MAX_RECEIPT_AGE_MS));
    this.#loadSync.markPrefillDone(receiptId);
    this.#admission.pump(null);
  }

  /**
   * Frees the request's load and records its receipt; a waiting request may take the freed room.
   * Returns the receipt (null if none was pending), whether drift just started and whether it freed
   * load still held.
   */
  settle(req: SettleRequest): { drift: boolean; receipt: Receipt | null; released: boolean } {
    const r = this.#router.settle(req);
    // A receipt no longer pending was settled already (a resend whose first answer was lost): the drain rate counts it once.
    this.#admission.settled(req.receiptId, r.receipt?.workerId ?? null, r.receipt !== null);
    if (r.drift && r.receipt) this.#onDrift?.(r.receipt.workerId);
    return r;
  }

  /**
   * The edge's receipts in the order it queued them (at most MAX_RECEIPTS_PER_CALL of a call):
   * each settlement frees its load (and may let a waiting request in), each mark ends a prefill.
   * Applying one twice (a call resent after its answer was lost) changes nothing. Each entry is read
   * through its wire schema (receipt-entries.ts): one that does not match, and each past
   * MAX_RECEIPTS_PER_CALL, is skipped and counted (`receiptsRejected`), the others still apply.
   * Returns how many settlements freed load still held (a resent or unknown receipt frees none).
   */
  applyReceipts(entries: unknown): number {
    if (!Array.isArray(entries)) {
      this.#counters.receiptsRejected++;
      return 0;
    }
    let settled = 0;
    const n = Math.min(entries.length, MAX_RECEIPTS_PER_CALL);
    this.#counters.receiptsRejected += entries.length - n;
    for (let i = 0; i < n; i++) {
      const r = ReceiptEntrySchema.safeParse(entries[i]);
      if (!r.success) {
        this.#counters.receiptsRejected++;
        continue;
      }
      const e = r.data;
      if (e.kind === "settle") {
        if (this.settle(e).released) settled++;
      } else this.markPrefillDone(e.receiptId, e.ageMs);
    }
    return settled;
  }

  /**
   * Settlements that freed load, from the receipts route and admit calls carried since the last
   * take (an entry skipped by its schema or the call's bound, a resent or unknown receipt is not
   * one): a sharded pool's object sends their releases to the other shards at once.
   */
  takeCarriedSettlements(): number {
    const n = this.#carriedSettlements;
    this.#carriedSettlements = 0;
    return n;
  }

  // ---- admission under overload (src/admission/) ----

  /**
   * Routes the request at once while a worker is under its load bound and nobody waits; otherwise
   * the answer comes when a worker frees room (routed), or the request is refused (429) past the
   * queue's bound or its deadline.
   */
  admit(req: CarryingReceipts<AdmissionRouteRequest>, ticket: AdmissionTicket): Promise<AdmitOutcome<RouteDecision>> | AdmitOutcome<RouteDecision> {
    // The receipts first (their settlements may free the room this request needs); the queue keeps
    // the request without them.
    const { receipts, ...route } = req;
    if (receipts !== undefined) this.#carriedSettlements += this.applyReceipts(receipts);
    this.#checkTimeouts();
    return this.#admission.admit(route, ticket);
  }

  /** The client left: a waiting request leaves no trace; one admitted lately is settled as cancelled. */
  leaveQueue(ticket: string): boolean {
    const r = this.#admission.leave(ticket);
    if (r?.left === "admitted") this.settle({ receiptId: r.receiptId, promptTokens: null, cachedTokens: null, outcome: "cancelled" });
    return r !== null;
  }

  admissionSnapshot(): AdmissionSnapshot {
    return this.#admission.snapshot();
  }

  // ---- load replication between shards (load-sync.ts) ----

  /** Load changes made here since the last call, for the other shards (empty unless replicateLoad). */
  takeLoadOps(): LoadOp[] {
    return this.#loadSync.takeOps();
  }

  get pendingLoadOps(): number {
    return this.#loadSync.pendingOps;
  }

  /** A batch could not be delivered to one peer shard. */
  loadSendFailed(): void {
    this.#loadSync.sendFailed();
  }

  /** Applies another shard's load changes to this shard's replica of the pool's load. */
  applyRemoteLoad(fromShard: number, ops: readonly LoadOp[]): { applied: number; skipped: number } {
    const r = this.#loadSync.applyRemote(fromShard, ops);
    // Another shard's settle may have freed room for a request waiting here.
    this.#admission.pump(null);
    return r;
  }

  loadSyncStats(): LoadSyncStats {
    return this.#loadSync.stats();
  }

  // ---- what operators see (pool-metrics.ts) ----

  /** What the index holds now: blocks (indexed, and assumed for workers without events), refused blocks, in-flight requests. */
  sizes(): IndexSizes {
    return { indexedBlocks: this.#views.index.size, assumedBlocks: this.#views.approx.size, blocksRefused: this.#views.budget.refused, activeRequests: this.#load.size };
  }

  /** `/admin/stats`: counters, receipts, load-back calibration and the registry. */
  stats(): PoolStats & { tierLoadBack: Record<LoadTier, TierCalibrationView> } {
    return {
      blockSize: this.blockSize,
      indexedBlocks: this.#views.index.size,
      activeRequests: this.#load.size,
      counters: this.#counters,
      receipts: this.#receipts.stats(),
      recentReceipts: this.#receipts.recent(50),
      tierLoadBack: this.tierLoadBack(),
      workers: this.workers(),
    };
  }

  /** Load-back bandwidth per lower tier: configured, estimated from receipts, measured / predicted (tier-calibration.ts). */
  tierLoadBack(): Record<LoadTier, TierCalibrationView> {
    const c = this.#router.calibration();
    return { host: c.view("host"), storage: c.view("storage") };
  }

  /** The local hashes (hex) the index holds for a worker; none for an unknown one. */
  workerLocalHashes(workerId: string): string[] {
    const slot = this.#registry.slotOf(workerId);
    return slot < 0 ? [] : this.#views.index.workerLocalHashesHex(slot);
  }

  /** Everything operators see about this pool (metrics scrape, dashboard), as plain JSON. */
  metricsSnapshot(): PoolMetricsSnapshot {
    this.#checkTimeouts();
    const parts = { registry: this.#registry, views: this.#views, load: this.#load, rates: this.#rates, receipts: this.#receipts, metrics: this.#metrics, counters: this.#counters };
    return { ...poolMetricsSnapshot(parts, this.#now()), admission: this.#admission.snapshot(), tierLoadBack: this.tierLoadBack() };
  }
}
