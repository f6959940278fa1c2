/**
 * What the index believes each worker caches: the block index fed by relay dumps and events, the
 * approximate index for workers without events (and recent routes counted until events arrive),
 * the block budget and each worker's share of it (block-shares.ts), which workers are synced or
 * approximate, and each worker's overlap with a request. Event and dump counters go into the pool's shared counters.
 */
import { RadixIndex } from "../block-index/radix-index.ts";
import { ApproxIndex, type ApproxConfig } from "../block-index/approx-index.ts";
import { BlockBudget } from "../block-index/block-budget.ts";
import type { BlockIndex } from "../block-index/block-index.ts";
import { PendingRoutes } from "../block-index/pending-routes.ts";
import type { LocalHashes } from "../blocks/block-hash.ts";
import { HOST_TIER, type RelayDump, type RelayEvents } from "../relay-wire/relay-protocol.ts";
import type { IndexCounters } from "../metrics/pool-snapshot.ts";
import { ApproximateWorkers } from "./approximate-workers.ts";
import { SharedStorageViews } from "./storage-views.ts";
import { DEFAULT_STORAGE_CAPACITY_BLOCKS } from "../selection/tier-cost.ts";
import { BlockShares } from "./block-shares.ts";
import { countDropped } from "./drop-count.ts";
import type { SlottedWorker, WorkerRegistry } from "./worker-registry.ts";

/**
 * Share of a worker's KV capacity (its hello's kvCapacityTokens) at which the blocks indexed for it
 * count as a full cache: SGLang's pool also holds running requests' unfinished blocks, which the
 * index never sees, so the cached share tops out somewhat below 1.
 */
export const CACHE_FULL_SHARE = 0.9;

export type RelayApplyOutcome = { ok: true } | { ok: false; reason: string; resync: boolean };

export interface BlockViewsOptions {
  /** The block index (default: one RadixIndex; a ShardedIndex splits it by chain root, src/block-index/sharded-index.ts). */
  index?: BlockIndex;
  /** Approximate mode for workers registered with kvEvents: false (src/block-index/approx-index.ts). */
  approx?: Partial<ApproxConfig>;
  /** Most (worker, block) entries this index holds (block-budget.ts); default DEFAULT_BLOCK_BUDGET. */
  blockBudget?: number;
  /** Bytes the block index may take (block-budget.ts DEFAULT_INDEX_BYTES); Infinity: entries only. */
  indexBudgetBytes?: number;
  /** Blocks each shared HiCache storage view keeps before aging out its oldest (storage-views.ts); default DEFAULT_STORAGE_CAPACITY_BLOCKS. */
  storageCapacityBlocks?: number;
}

/**
 * Which request (the array itself, and its length then), at which time and index generation, a
 * walk's results are for. Found by identity: a caller must not change an array it has passed in
 * (RoutingCore.route, peek); one whose length changed is walked again.
 */
interface MatchedRequest {
  hashes: LocalHashes;
  length: number;
  now: number;
  generation: number;
}

export class BlockViews {
  readonly index: BlockIndex;
  /**
   * Each worker's blocks in host memory (SGLang HiCache's CPU_PINNED tier), from events tagged
   * with that tier: kept apart from `index` (the GPU tier), whose blocks need no load-back. A block
   * evicted from the GPU with a host copy leaves `index` and stays here.
   */
  readonly host: BlockIndex = new RadixIndex();
  /** Approximate views of HiCache storage backends shared by workers (storage-views.ts). */
  readonly storage: SharedStorageViews;
  /** Blocks assumed cached on workers without KV events (approximate mode). */
  readonly approx: ApproxIndex;
  readonly budget: BlockBudget;
  /** Chains routed in the last seconds, counted as overlap until the worker's events arrive. */
  readonly pending = new PendingRoutes();
  /** Workers whose indexed blocks may be wrong (relay lost history, budget refusals). */
  readonly approximate: ApproximateWorkers;
  readonly #registry: WorkerRegistry;
  /** The views stopped following the worker's stored blocks: one it stores may never be seen here. */
  readonly #onViewLost: (workerId: string) => void;
  readonly #counters: IndexCounters;
  /**
   * Workers whose in-memory blocks are known to mirror the relay (a dump arrived this life), with
   * the blocks of that dump still to come as stored events (RelayDump `continues`; 0: complete).
   */
  readonly #synced = new Map<string, number>();
  readonly #shares: BlockShares;
  #scores = new Int32Array(16);
  #hostScores = new Int32Array(16);
  /**
   * Bumped by every method here that changes the index, host tier, approximate index or pending
   * routes (their only writers): a request's raw matches are kept while it stays put, so a second
   * look at the same hashes at the same time (an admission's peek, then its route) walks nothing.
   */
  #generation = 0;
  /**
   * Slots whose worker evicted GPU blocks since it started or last cleared its cache: SGLang evicts
   * only to make room and keeps what finished requests leave, so such a cache stays full, and each
   * block it stores displaces a cached one (src/selection/duplicate-cost.ts). See cacheFull.
   */
  readonly #evicted = new Set<number>();
  /**
   * Slots whose host tier (HiCache CPU_PINNED) removed blocks since the worker started or cleared:
   * SGLang evicts host pages only when a write finds the host pool full (hiradix_cache.py @9d147fd
   * `write_backup` → `evict_host` L1207-1236). See demotesToHost.
   */
  readonly #hostEvicted = new Set<number>();
  #matched: MatchedRequest | null = null;
  #hostMatched: MatchedRequest | null = null;
  /** Overlap of recently routed chains from the last walk (#matched's request). */
  #pendingOverlap = new Map<number, number>();
  /** Whether #matched's request was matched in the approximate index too (only when a worker reads it). */
  #approxMatched = false;
  /** Blocks the worker whose events are being applied may still store (computed once per message). */
  #room = 0;
  /** Whether a stored chain of n blocks fits the worker's room (one closure, not one per event). */
  readonly #admitChain = (n: number): boolean => {
    if (n > this.#room) {
      this.budget.countRefused(n);
      return false;
    }
    this.#room -= n;
    return true;
  };

  /** `onViewLost`: told when a worker's stored blocks may no longer all be seen (a relay gone, any mark as approximate). */
  constructor(registry: WorkerRegistry, counters: IndexCounters, opts: BlockViewsOptions = {}, onViewLost: (workerId: string) => void = () => {}) {
    this.#registry = registry;
    this.#counters = counters;
    this.#onViewLost = onViewLost;
    this.approximate = new ApproximateWorkers(onViewLost);
    this.index = opts.index ?? new RadixIndex();
    this.budget = new BlockBudget(opts.blockBudget, opts.indexBudgetBytes);
    this.storage = new SharedStorageViews(opts.storageCapacityBlocks ?? DEFAULT_STORAGE_CAPACITY_BLOCKS, () => this.#evenSplit());
    // Approximate-mode entries share the object's budget: at most half of it.
    this.approx = new ApproxIndex({ ...opts.approx, maxBlocks: Math.min(opts.approx?.maxBlocks ?? 2 ** 20, Math.max(1, Math.floor(this.budget.limit / 2))) }, { onReset: () => void counters.approxResets++ });
    this.#shares = new BlockShares(registry, this.index, this.approx, this.budget);
  }

  isSynced(workerId: string): boolean {
    return this.#synced.has(workerId);
  }

  /** Synced means the index mirrors the worker: never while its view may be wrong. */
  isExact(workerId: string): boolean {
    return this.#synced.get(workerId) === 0 && !this.approximate.has(workerId);
  }

  /** A worker took a new slot. */
  addSlot(slot: number): void {
    this.#generation++;
    this.index.ensureWorker(slot);
    this.host.ensureWorker(slot);
    if (this.#scores.length <= slot) this.#scores = new Int32Array(Math.max(slot + 1, this.#scores.length * 2));
    if (this.#hostScores.length <= slot) this.#hostScores = new Int32Array(this.#scores.length);
  }

  /** Forgets everything believed about the worker's cache (a new worker life, or the worker is down). */
  resetWorker(slot: number, workerId: string): void {
    this.#generation++;
    this.index.clearWorker(slot);
    this.host.clearWorker(slot);
    this.pending.clear(slot);
    this.approx.clear(slot);
    this.approximate.clear(workerId);
    this.#synced.delete(workerId);
    this.#evicted.delete(slot);
    this.#hostEvicted.delete(slot);
  }

  /** The worker left the registry: its slot is freed in every view. */
  removeWorker(slot: number, workerId: string): void {
    this.#generation++;
    this.index.removeWorker(slot);
    this.host.removeWorker(slot);
    this.storage.detach(workerId);
    this.pending.clear(slot);
    this.approx.clear(slot);
    this.#synced.delete(workerId);
    this.approximate.clear(workerId);
    this.#evicted.delete(slot);
    this.#hostEvicted.delete(slot);
  }

  /**
   * Whether the worker's cache is full: it has evicted GPU blocks since it started or last cleared
   * them, or (where its hello gave kvCapacityTokens) the blocks indexed for it, exact or approximate,
   * reach CACHE_FULL_SHARE of that capacity. The second test covers workers whose removals the index
   * never sees (no KV events, an approximate or dropped view) and a restarted index object.
   */
  cacheFull(w: Pick<SlottedWorker, "slot" | "kvCapacityTokens" | "blockSize">): boolean {
    if (this.#evicted.has(w.slot)) return true;
    if (!w.kvCapacityTokens) return false;
    const blocks = Math.max(this.index.workerBlockCount(w.slot), this.approx.workerBlockCount(w.slot));
    return blocks * w.blockSize >= CACHE_FULL_SHARE * w.kvCapacityTokens;
  }

  /**
   * Whether a GPU eviction on the worker only demotes the block to host memory: the worker has a
   * HiCache host tier (blocks indexed in it) that has not removed any since it started or cleared.
   * SGLang's default write policy, write_through (server_args.py @9d147fd L2118-2181), backs every
   * GPU page up to host memory, and a GPU eviction of a backed-up page keeps the host copy
   * (hiradix_cache.py @9d147fd `_detach_backuped` L1139-1149): a displaced block costs its
   * load-back, not its prefill, until the host pool is full too (duplicate-cost.ts). Not so under
   * write_through_selective, which drops pages never backed up: such a worker is priced as if it
   * demoted them (the index cannot tell the two policies apart).
   */
  demotesToHost(slot: number): boolean {
    return this.host.workerBlockCount(slot) > 0 && !this.#hostEvicted.has(slot);
  }

  /** A new relay session: its dump, which follows, is the truth. */
  unsync(workerId: string): void {
    this.#synced.delete(workerId);
  }

  applyDump(workerId: string, msg: RelayDump): RelayApplyOutcome {
    this.#generation++;
    const w = this.#registry.get(workerId);
    if (!w) return this.#drop("unknown_worker", false);
    if (msg.epoch !== w.epoch) return this.#drop("stale_epoch", false);
    // An exact dump replaces the worker's blocks. An approximate one (the relay lost history) is
    // merged into what the index still holds of this worker life: both are best guesses, and the
    // index's copy may remember prefixes the relay's view lost.
    if (!msg.approximate) {
      this.index.clearWorker(w.slot);
      this.host.clearWorker(w.slot);
    }
    const gpuRows = this.#applyHostRows(w, msg.blocks);
    // Rows come parents first, so a cut keeps every admitted row's parent.
    const fit = Math.min(gpuRows.length, this.#roomFor(w, gpuRows.length));
    this.budget.countRefused(gpuRows.length - fit);
    const rows = fit < gpuRows.length ? gpuRows.slice(0, fit) : gpuRows;
    const { applied, failed: failures } = this.index.applyDumpWire(w.slot, rows);
    this.#counters.blocksStored += applied;
    if (failures) this.#count(`dump_${"parent_not_found"}`, failures);
    this.#budgetVerdict(workerId, gpuRows.length - fit, true);
    if (msg.approximate) this.approximate.mark(workerId, "relay", "relay lost history: its view (merged with the index's last copy) may hold blocks the worker evicted");
    else this.approximate.clear(workerId, "relay");
    this.#synced.set(workerId, msg.continues ?? 0);
    this.#counters.dumps++;
    this.#registry.touch(workerId);
    return { ok: true };
  }

  applyEvents(workerId: string, msg: RelayEvents): RelayApplyOutcome {
    this.#generation++;
    const w = this.#registry.get(workerId);
    if (!w) return this.#drop("unknown_worker", false);
    if (msg.epoch !== w.epoch) return this.#drop("stale_epoch", false);
    if (!this.#synced.has(workerId)) return this.#drop("not_synced", true);
    this.#registry.touch(workerId);
    let stored = 0;
    let hostStored = 0;
    for (const ev of msg.events) if (ev.t === "stored") ev.tier === HOST_TIER ? (hostStored += ev.blocks.length) : (stored += ev.blocks.length);
    // The dump's continuation comes first on the socket: count its blocks in, applied or refused.
    const remaining = this.#synced.get(workerId)!;
    if (remaining > 0) this.#synced.set(workerId, Math.max(0, remaining - stored - hostStored));
    if (stored > 0) this.#room = this.#roomFor(w, stored);
    let resync = false;
    for (const ev of msg.events) {
      if (ev.t !== "cleared" && ev.tier === HOST_TIER) {
        if (!this.#applyHostEvent(w, ev)) resync = true;
        continue;
      }
      if (ev.t === "stored") {
        // Defects are checked first, then the block budget (a full index refuses the whole chain: a
        // partial one would only be cut again by its children), then the chain is stored.
        const r = this.index.applyStoredEvent(w.slot, ev.parent, ev.blocks, this.#admitChain);
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
        this.#counters.blocksStored += r.applied;
        if (!r.ok) {
          this.#count(r.error);
          if (r.error === "parent_not_found") resync = true;
          continue;
        }
      } else if (ev.t === "removed") {
        const removed = this.index.applyRemoved(w.slot, ev.hashes);
        this.#counters.blocksRemoved += removed;
        this.#room += removed;
        // Only the engine's evictions fill a cache, not the relay's moves (RelayEvent `moved`).
        if (removed > 0 && !ev.moved) this.#evicted.add(w.slot);
      } else {
        this.#room += this.index.workerBlockCount(w.slot);
        this.index.clearWorker(w.slot);
        this.host.clearWorker(w.slot);
        this.#evicted.delete(w.slot);
        this.#hostEvicted.delete(w.slot);
        // The worker dropped everything: whatever the view got wrong is gone with it.
        this.approximate.clear(workerId);
      }
      this.#counters.eventsApplied++;
    }
    if (resync) {
      this.#synced.delete(workerId);
      return { ok: false, reason: "parent_not_found", resync: true };
    }
    return { ok: true };
  }

  /**
   * The relay's socket closed: its view can no longer be kept fresh. The index keeps its last copy
   * of the worker's blocks (the worker still caches most of them) but no longer calls it synced:
   * the worker is approximate until its relay's next exact dump. A relay that comes back having
   * lost history sends an approximate dump, which is merged into this copy (applyDump).
   */
  relayGone(workerId: string): void {
    const w = this.#registry.get(workerId);
    if (!w) return;
    this.#synced.delete(workerId);
    if (this.index.workerBlockCount(w.slot) > 0 || this.approximate.has(workerId))
      this.approximate.mark(workerId, "relay", "relay disconnected: routing on the index's last copy of its blocks");
    else this.#onViewLost(workerId); // exact and empty, but nothing it stores reaches the index until its relay's next dump
  }

  /**
   * Each worker's overlap with a request, in blocks, in the order given: from the index (or the
   * approximate index for workers without events, or both for approximate workers), at least the
   * overlap of chains recently routed to it.
   */
  overlaps(workers: readonly SlottedWorker[], localHashes: LocalHashes, now: number): number[] {
    if (!this.#isCurrent(this.#matched, localHashes, now)) {
      this.index.findMatches(localHashes, this.#scores);
      this.#pendingOverlap = this.pending.overlaps(localHashes, now);
      this.#approxMatched = false;
      this.#matched = { hashes: localHashes, length: localHashes.length, now, generation: this.#generation };
    }
    // The approximate index is read only for workers without events or with an approximate view.
    const readsApprox = workers.some((w) => !w.kvEvents || this.approximate.has(w.workerId));
    if (readsApprox && !this.#approxMatched) {
      this.approx.match(localHashes, now);
      this.#approxMatched = true;
    } else if (!readsApprox) this.approx.expire(now);
    const pendingOverlap = this.#pendingOverlap;
    return workers.map((w) =>
      Math.max(
        !w.kvEvents ? this.approx.overlapOf(w.slot)
        : this.approximate.has(w.workerId) ? Math.max(this.#scores[w.slot] ?? 0, this.approx.overlapOf(w.slot))
        : (this.#scores[w.slot] ?? 0),
        pendingOverlap.get(w.slot) ?? 0,
      ),
    );
  }

  /**
   * Each worker's longest prefix of the request in host memory, in blocks, in the order given (0
   * for workers without it). Call after overlaps(); a host prefix past the GPU overlap is what a
   * HiCache worker loads back instead of prefilling.
   */
  hostOverlaps(workers: readonly SlottedWorker[], localHashes: LocalHashes): number[] {
    if (this.host.size === 0) return workers.map(() => 0);
    // The host tier has no expiry: its matches depend on the hashes and the generation alone.
    if (!this.#isCurrent(this.#hostMatched, localHashes, 0)) {
      this.host.findMatches(localHashes, this.#hostScores);
      this.#hostMatched = { hashes: localHashes, length: localHashes.length, now: 0, generation: this.#generation };
    }
    return workers.map((w) => (w.kvEvents ? (this.#hostScores[w.slot] ?? 0) : 0));
  }

  /** Whether `m` holds the walk of these hashes at this time, with nothing changed since. */
  #isCurrent(m: MatchedRequest | null, hashes: LocalHashes, now: number): boolean {
    return m !== null && m.hashes === hashes && m.length === hashes.length && m.now === now && m.generation === this.#generation;
  }

  /** A request was routed to the worker: count its chain as cached there until events say otherwise. */
  recordRoute(worker: SlottedWorker, localHashes: LocalHashes, now: number): void {
    this.#generation++;
    this.pending.add(worker.slot, localHashes, now);
    if (!worker.kvEvents || this.approximate.has(worker.workerId)) this.approx.record(worker.slot, localHashes, now);
  }

  /**
   * Applies a dump's host-tier rows (parents first) and returns its GPU rows. Host rows are bounded
   * per worker (#hostRoom), beyond it refused and counted.
   */
  #applyHostRows(w: SlottedWorker, rows: RelayDump["blocks"]): RelayDump["blocks"] {
    if (!rows.some((r) => r.tier === HOST_TIER)) return rows;
    const host = rows.filter((r) => r.tier === HOST_TIER);
    const room = this.#hostRoom(w);
    if (host.length > room) this.#count("host_tier_budget", host.length - room);
    const kept = host.length > room ? host.slice(0, room) : host;
    const { applied, failed } = this.host.applyDumpWire(w.slot, kept);
    if (this.storage.attached(w.workerId)) for (const r of kept) this.storage.stored(w.workerId, r.p, [{ h: r.h, l: r.l }]);
    this.#counters.blocksStored += applied;
    if (failed) this.#count("dump_parent_not_found", failed);
    return rows.filter((r) => r.tier !== HOST_TIER);
  }

  /**
   * Host-tier blocks the worker may still add: an even split of the object's block budget among its
   * workers. A host tier is several times the GPU's (SGLang's --hicache-ratio, default 2), so the
   * GPU share (block-shares.ts) would cut it short.
   */
  #hostRoom(w: SlottedWorker): number {
    return Math.max(0, this.#evenSplit() - this.host.workerBlockCount(w.slot));
  }

  /** The object's budget split evenly among its slots: each worker's room in the host tier, and what it brings to its storage view. */
  #evenSplit(): number {
    const slots = Math.max(1, this.#registry.slotCount);
    return Math.floor(this.budget.limitFor(slots) / slots);
  }

  /** One host-tier event; false when a stored chain's parent is unknown (the relay should resync). */
  #applyHostEvent(w: SlottedWorker, ev: Exclude<RelayEvents["events"][number], { t: "cleared" }>): boolean {
    if (ev.t === "removed") {
      const removed = this.host.applyRemoved(w.slot, ev.hashes);
      this.#counters.blocksRemoved += removed;
      if (removed > 0 && !ev.moved) this.#hostEvicted.add(w.slot);
      this.#counters.eventsApplied++;
      return true;
    }
    const room = this.#hostRoom(w);
    const r = this.host.applyStoredEvent(w.slot, ev.parent, ev.blocks, (n) => n <= room);
    if ("voided" in r) this.#count(r.voided, ev.blocks.length);
    else if ("refused" in r) this.#count("host_tier_budget", ev.blocks.length);
    else {
      this.#counters.blocksStored += r.applied;
      this.#counters.eventsApplied++;
      // SGLang writes host pages through to its storage backend (L3): a shared one holds them too.
      if (r.ok) this.storage.stored(w.workerId, ev.parent, ev.blocks);
      if (!r.ok) {
        this.#count(r.error);
        return r.error !== "parent_not_found";
      }
    }
    return true;
  }

  /**
   * Room for `wanted` more blocks of the worker (block-shares.ts). A worker still under its
   * guarantee that finds too little room takes it back from the workers furthest past theirs.
   */
  #roomFor(w: SlottedWorker, wanted: number): number {
    let { room, owed } = this.#shares.look(w);
    owed = Math.min(wanted, owed);
    while (room < owed) {
      const over = this.#shares.furthestOver(w);
      if (!over) break;
      this.#shed(over);
      room = this.#shares.look(w).room;
    }
    return room;
  }

  /** Drops the view of a worker past its share: approximate and unsynced until a dump that fits. */
  #shed(w: SlottedWorker): void {
    const held = this.index.workerBlockCount(w.slot);
    this.index.clearWorker(w.slot);
    this.#synced.delete(w.workerId);
    this.#count("share_shed", held);
    this.approximate.mark(w.workerId, "budget", `past its share of the index (${this.#shares.guarantee(w)} blocks) while another worker needed room: ${held} block(s) dropped`);
  }

  /** Refused blocks make the worker approximate; a dump that fitted whole makes it exact again. */
  #budgetVerdict(workerId: string, refused: number, wholeView: boolean): void {
    if (refused > 0) {
      if (wholeView) this.#count("block_budget", refused);
      const w = this.#registry.get(workerId);
      const bound = w ? `${this.#shares.guarantee(w)} blocks guaranteed, ${this.budget.limitFor(this.#registry.slotCount)} in the object` : "";
      this.approximate.mark(workerId, "budget", `past its share of the index (${bound}): ${refused} block(s) refused`);
    } else if (wholeView) this.approximate.clear(workerId, "budget");
  }

  #count(reason: string, n = 1): void {
    countDropped(this.#counters, reason, n);
  }

  #drop(reason: string, resync: boolean): RelayApplyOutcome {
    this.#count(reason);
    return { ok: false, reason, resync };
  }
}
