/**
 * Routing one request: score every live worker (overlap from the block views, in-flight load,
 * block cost or estimated TTFT by region), pick one, add the request's load, and keep its receipt
 * pending until the edge settles it with the cached tokens the worker reported; peek() is the same
 * choice without side effects.
 */
import type { LocalHashes } from "../blocks/block-hash.ts";
import { chainEndOf } from "../block-index/radix-index.ts";
import type { LoadTracker } from "../load/load-tracker.ts";
import { endUnseenPrefills, watchDeadline, type PrefillWatch } from "./prefill-watch.ts";
import type { PoolRecorder } from "../metrics/pool-recorder.ts";
import type { IndexCounters } from "../metrics/pool-snapshot.ts";
import { scoreByBlocks } from "../selection/block-cost.ts";
import { resolveEdgeRegion, rttMs, type RegionsConfig } from "../selection/regions.ts";
import { pickIndex, type Candidate, type Scored, type SelectionCost } from "../selection/selection.ts";
import { DEFAULT_TTFT_PARAMS, estimateTtft, scoreByTtft } from "../selection/ttft-cost.ts";
import { TierCalibration } from "../selection/tier-calibration.ts";
import { DEFAULT_RECURRING_LOAD, RecurringLoad, type RecurringLoadParams } from "../selection/recurring-load.ts";
import { DEFAULT_TIER_COST, type TierCostParams } from "../selection/tier-cost.ts";
import { DEFAULT_DUPLICATE_COST, displacedMs, duplicateCostMs, duplicateTokens, type DuplicateCostParams } from "../selection/duplicate-cost.ts";
import { DEFAULT_PD_TRANSFER_GBPS, pdTransferMs, type PdTransferParams } from "../selection/pd-transfer-cost.ts";
import type { BlockViews } from "./block-views.ts";
import type { LoadSync } from "./load-sync.ts";
import type { PrefillRates } from "./prefill-rates.ts";
import type { Receipt, ReceiptBook } from "./receipts.ts";
import type { SettleRequest } from "./receipt-entries.ts";
import { isQuarantined, type SlottedWorker, type WorkerRegistry } from "./worker-registry.ts";
import { decodeLoadId, isDecodeWorker, isPrefillWorker, pickDecode } from "./pd-pool.ts";

/** Pending receipts kept at most (the oldest is dropped beyond). */
const MAX_PENDING_RECEIPTS = 10_000;

export interface RouteRequest {
  /**
   * Not to be changed once passed to route or peek: the walks' memos know a request by this array
   * (block-views.ts #isCurrent, radix-index.ts chainEndOf), checking only its identity and length.
   */
  localHashes: LocalHashes;
  /** Input sequence length in tokens (the full prompt, not only hashed blocks). */
  isl: number;
  exclude?: readonly string[];
  fallbackReason?: string | null;
  /** The request's W3C trace id (src/util/trace-context.ts), kept with its receipt. */
  traceId?: string | null;
  /** The edge's region: with a regions config, selection minimises estimated TTFT from there. */
  edgeRegion?: string | null;
  /** The edge's Cloudflare colo (request.cf.colo), mapped to a region by the regions config. */
  edgeColo?: string | null;
  /** Only workers whose stream frames carry increments (a stream too costly in cumulative frames: src/proxy/stream-cost.ts). */
  incrementalOnly?: boolean;
  /** Only these workers (admission sends a waiting request to the worker that has room: src/admission/). */
  onlyWorkers?: readonly string[];
}

export interface RouteCandidateView {
  workerId: string;
  overlapBlocks: number;
  /** Blocks past the GPU overlap in the worker's host memory (HiCache CPU_PINNED); absent: none. */
  hostBlocks?: number;
  /** Blocks past those assumed in a storage backend the worker shares (approximate view); absent: none. */
  storageBlocks?: number;
  cost: number;
  activePrefillTokens: number;
  activeDecodeBlocks: number;
  /** The worker's cache is full (BlockViews.cacheFull); absent: not full. */
  cacheFull?: true;
  /** Cost "ttft"'s duplication term in `cost`, ms (src/selection/duplicate-cost.ts); absent: 0. */
  duplicateMs?: number;
}

export interface RouteDecision {
  workerId: string;
  url: string;
  /** The worker's stream frames carry deltas (`--incremental-streaming-output`), not cumulative text. */
  incrementalStreaming: boolean;
  /** Cached blocks the pick was credited with, in every tier (GPU + host). */
  overlapBlocks: number;
  /** Of those, blocks in host memory (loaded back by the worker, not prefilled); absent: none. */
  hostBlocks?: number;
  /** Of those, blocks assumed in the worker's shared storage backend: approximate (SGLang reports no L3 events). */
  storageBlocks?: number;
  totalBlocks: number;
  blockSize: number;
  receiptId: string;
  candidates: RouteCandidateView[];
  /**
   * A prefill/decode pair (the picked worker is a prefill): the decode worker, picked by load, and
   * the prefill's bootstrap port. Absent for a unified worker.
   */
  pd?: PdDecision;
}

export interface PdDecision {
  decodeWorkerId: string;
  decodeUrl: string;
  /** The decode worker's stream frames carry deltas: the client's answer streams from it. */
  decodeIncrementalStreaming: boolean;
  bootstrapPort: number;
  /** The prefill worker's DP size (1: one rank); its rank is the prefill target's (rank-target.ts). */
  prefillDpSize: number;
}

/** Defined by its wire schema (receipt-entries.ts). */
export type { SettleRequest };

/** What route() would decide right now, without adding load or a receipt (explain, dry runs). */
export interface RoutePreview {
  workerId: string | null;
  overlapBlocks: number;
  /** Of `overlapBlocks`, blocks in the pick's host memory; absent: none. */
  hostBlocks?: number;
  /** Of `overlapBlocks`, blocks assumed in the pick's shared storage (approximate); absent: none. */
  storageBlocks?: number;
  totalBlocks: number;
  blockSize: number;
  candidates: RouteCandidateView[];
  /** Other workers with the same lowest cost (the pick among them is random). */
  tiedWith: string[];
  /** A prefill/decode pair: the decode worker route() would pair with the prefill now (by load). */
  decodeWorkerId?: string;
}

type PreviewRequest = Pick<RouteRequest, "localHashes" | "isl" | "exclude" | "edgeRegion" | "edgeColo" | "incrementalOnly" | "onlyWorkers">;

export interface RouterOptions {
  temperature?: number;
  /** Weight of decode load in the block cost (default 1, Dynamo's); see src/selection/block-cost.ts. */
  decodeWeight?: number;
  random?: () => number;
  now?: () => number;
  /** RTT table and TTFT tunables for region-aware selection (src/selection/regions.ts); null = off. */
  regions?: RegionsConfig | null;
  /** Which cost scores workers (src/selection/selection.ts); RoutingCore supplies the default. */
  cost: SelectionCost;
  /** Load-back pricing of host-memory blocks for cost "ttft" (src/selection/tier-cost.ts); absent: its defaults. */
  tiers?: TierCostParams;
  /** KV bytes per token and prefill → decode bandwidth for PD pairs under cost "ttft"; absent: the defaults. */
  pdTransfer?: PdTransferParams;
  /** Cost "ttft"'s term for conversations that keep coming back to a worker (recurring-load.ts); absent: its defaults. */
  recurringLoad?: RecurringLoadParams;
  /** Cost "ttft"'s term for copying a prefix another worker holds (duplicate-cost.ts); absent: its defaults. */
  duplicateCost?: DuplicateCostParams;
}

/** The parts of one pool a router reads and changes. */
export interface RouterParts {
  registry: WorkerRegistry;
  views: BlockViews;
  load: LoadTracker;
  loadSync: LoadSync;
  /** Routed requests whose prefill the worker's stored blocks will end (routing-core.ts). */
  prefillWatch: PrefillWatch;
  /** The rate each worker is priced and drained at, and its learning (prefill-rates.ts). */
  rates: PrefillRates;
  receipts: ReceiptBook;
  metrics: PoolRecorder;
  counters: IndexCounters;
}

export class Router {
  readonly #p: RouterParts;
  readonly #pending = new Map<string, Omit<Receipt, "actualCachedTokens" | "outcome">>();
  #receiptSeq = 0;
  readonly #temperature: number;
  readonly #decodeWeight: number;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #regions: RegionsConfig | null;
  readonly #cost: SelectionCost;
  /** Load-back bandwidths: configured, then calibrated from settled receipts (tier-calibration.ts). */
  readonly #calibration: TierCalibration;
  /** Routed at (ms) → prefill done at, for receipts that matched lower-tier blocks. */
  readonly #prefillDoneAt = new Map<string, number>();
  readonly #pdTransfer: PdTransferParams;
  readonly #recurring: RecurringLoad;
  readonly #duplicate: DuplicateCostParams;

  constructor(parts: RouterParts, opts: RouterOptions) {
    this.#p = parts;
    this.#regions = opts.regions ?? null;
    this.#cost = opts.cost;
    this.#calibration = new TierCalibration(opts.tiers ?? DEFAULT_TIER_COST);
    this.#pdTransfer = opts.pdTransfer ?? { kvBytesPerToken: DEFAULT_TIER_COST.kvBytesPerToken, transferGBps: DEFAULT_PD_TRANSFER_GBPS };
    this.#recurring = new RecurringLoad(opts.recurringLoad ?? DEFAULT_RECURRING_LOAD);
    this.#duplicate = opts.duplicateCost ?? DEFAULT_DUPLICATE_COST;
    this.#temperature = opts.temperature ?? 0;
    this.#decodeWeight = opts.decodeWeight ?? 1;
    this.#random = opts.random ?? Math.random;
    this.#now = opts.now ?? Date.now;
  }

  route(req: RouteRequest): RouteDecision | null {
    const { views, loadSync, counters, metrics } = this.#p;
    const now = this.#now();
    counters.expired += this.#p.load.expireStale(now);
    const e = this.#evaluate(req);
    if (!e) {
      metrics.noWorker(req.fallbackReason ?? null);
      return null;
    }
    const { live, chain, candidates, scored, candidateViews, blockSize } = e;
    const i = pickIndex(scored, this.#temperature, this.#random);
    const chosen = live[i]!;
    // Host-memory blocks are cached too: the worker loads them back and reports them as cached.
    const hostBlocks = scored[i]!.hostBlocks ?? 0;
    const storageBlocks = scored[i]!.storageBlocks ?? 0;
    const overlap = scored[i]!.overlapBlocks + hostBlocks + storageBlocks;
    // A prefill worker needs a decode peer (by load); none up: no pair, the pool cannot serve.
    const decode = isPrefillWorker(chosen) ? pickDecode(this.#liveDecoders(req), (slot) => this.#p.load.decodeBlocks(slot), chosen.region ?? null) : null;
    if (isPrefillWorker(chosen) && (decode === null || chosen.bootstrapPort == null)) {
      metrics.noWorker(req.fallbackReason ?? null);
      return null;
    }
    views.recordRoute(chosen, req.localHashes, now);
    const receiptId = `r${now.toString(36)}-${(this.#receiptSeq++).toString(36)}`;
    const requestBlocks = Math.ceil(req.isl / blockSize);
    const prefillTokens = Math.max(0, req.isl - overlap * blockSize);
    // The watch's deadline waits behind the worker's counted prefill, not the drained estimate the
    // cost uses: giving a live prefill up early makes its worker look idle too soon (prefill-watch.ts).
    const countedAhead = this.#p.load.prefillTokens(chosen.slot);
    this.#recurring.record(chosen.slot, req.isl, req.isl - prefillTokens, now);
    // A sample of the worker's prefill rate unless a load-back or a decode peer's first token would be in it.
    if (!decode && hostBlocks === 0 && storageBlocks === 0) this.#p.rates.routed(receiptId, chosen.slot, now, prefillTokens, countedAhead, this.#placement(chosen, this.#edgeRegion(req)).rttMs);
    loadSync.add({ receiptId, slot: chosen.slot, prefillTokens, decodeBlocks: requestBlocks, chainKeys: chain, startedAt: now, prefillDone: false }, chosen.workerId);
    // A PD pair: the decode holds the prompt's KV too (transferred), and decodes; the prefill's
    // share is counted until the request settles (it frees its copy once sent: an overestimate).
    if (decode) loadSync.add({ receiptId: decodeLoadId(receiptId), slot: decode.slot, prefillTokens: 0, decodeBlocks: requestBlocks, chainKeys: chain, startedAt: now, prefillDone: true }, decode.workerId);
    // Full blocks the worker lacks: storing the last of them ends this prefill (prefill-watch.ts).
    // Only when the hashes cover every full block of the prompt: a chain cut short (routing on a
    // text prefix, which every fallback is; its isl may not count the media after it) can be held
    // while the rest of the prompt is still being prefilled.
    const fullBlocks = Math.floor(req.isl / blockSize);
    const watch = chosen.kvEvents && (req.fallbackReason ?? null) === null && req.localHashes.length === fullBlocks && fullBlocks > overlap;
    if (watch) {
      const deadline = watchDeadline(now, countedAhead, prefillTokens, this.#p.rates.of(chosen));
      // Beyond the slot's bound the oldest are given up on: their prefill ends now.
      endUnseenPrefills(loadSync, this.#p.prefillWatch.watch(chosen.slot, receiptId, chainEndOf(req.localHashes, fullBlocks), deadline));
    }
    this.#pending.set(receiptId, {
      receiptId,
      workerId: chosen.workerId,
      at: now,
      promptTokens: req.isl,
      totalBlocks: req.localHashes.length,
      predictedOverlapBlocks: overlap,
      ...(hostBlocks > 0 ? { predictedHostBlocks: hostBlocks } : {}),
      ...(storageBlocks > 0 ? { predictedStorageBlocks: storageBlocks } : {}),
      ...(hostBlocks > 0 || storageBlocks > 0 ? this.#predictLoadBack(chosen, candidates[i]!, req, blockSize) : {}),
      blockSize,
      fallbackReason: req.fallbackReason ?? null,
      traceId: req.traceId ?? null,
      ...(decode ? { decodeWorkerId: decode.workerId } : {}),
    });
    if (this.#pending.size > MAX_PENDING_RECEIPTS) {
      const oldest = this.#pending.keys().next().value!;
      this.#pending.delete(oldest);
      this.#prefillDoneAt.delete(oldest);
    }
    counters.routed++;
    metrics.routed({
      at: now,
      receiptId,
      workerId: chosen.workerId,
      overlapBlocks: overlap,
      hostBlocks,
      storageBlocks,
      totalBlocks: req.localHashes.length,
      isl: req.isl,
      fallbackReason: req.fallbackReason ?? null,
      retry: (req.exclude?.length ?? 0) > 0,
      candidates: candidateViews,
    });
    return {
      workerId: chosen.workerId,
      url: chosen.url,
      incrementalStreaming: chosen.incrementalStreaming,
      overlapBlocks: overlap,
      hostBlocks,
      ...(storageBlocks > 0 ? { storageBlocks } : {}),
      totalBlocks: req.localHashes.length,
      blockSize,
      receiptId,
      candidates: candidateViews,
      ...(decode && chosen.bootstrapPort != null
        ? { pd: { decodeWorkerId: decode.workerId, decodeUrl: decode.url, decodeIncrementalStreaming: decode.incrementalStreaming, bootstrapPort: chosen.bootstrapPort, prefillDpSize: chosen.dpSize ?? 1 } }
        : {}),
    };
  }

  /** Decode workers that may take a PD request's decode side now (up, not excluded, not quarantined). */
  #liveDecoders(req: Pick<RouteRequest, "exclude" | "incrementalOnly">) {
    const exclude = new Set(req.exclude ?? []);
    const now = this.#now();
    return this.#p.registry
      .all()
      .filter((w) => isDecodeWorker(w) && w.status === "up" && !exclude.has(w.workerId) && !isQuarantined(w, now) && (!req.incrementalOnly || w.incrementalStreaming));
  }

  /**
   * Frees the request's load and records its receipt. `drift`: the worker's drift just started;
   * `released`: it freed load still held (a resent or unknown receipt frees none).
   */
  settle(req: SettleRequest): { drift: boolean; receipt: Receipt | null; released: boolean } {
    const released = this.#p.loadSync.release(req.receiptId) !== undefined;
    const releasedDecode = this.#p.loadSync.release(decodeLoadId(req.receiptId)) !== undefined;
    this.#p.rates.forget(req.receiptId);
    const p = this.#pending.get(req.receiptId);
    if (!p) return { drift: false, receipt: null, released: released || releasedDecode };
    this.#pending.delete(req.receiptId);
    const doneAt = this.#prefillDoneAt.get(req.receiptId);
    this.#prefillDoneAt.delete(req.receiptId);
    const receipt: Receipt = {
      ...p,
      promptTokens: req.promptTokens ?? p.promptTokens,
      actualCachedTokens: req.cachedTokens,
      outcome: req.outcome,
    };
    if (p.loadBack && p.predictedTtftMs !== undefined && doneAt !== undefined && req.outcome === "ok") {
      // Route to the first prefill-end signal, both on this object's clock: the edge's call at a
      // stream's first output, or a watched request's stored event from the relay. Past the
      // estimate's parts (its round trip is edge ↔ worker), the load-back so measured also holds the
      // route answer's trip to the edge and the signal's trip here: edge → index for the call;
      // relay → index less worker → edge, plus the relay's flush wait (≤ flushIntervalMs), for the event.
      const measuredTtftMs = doneAt - p.at;
      // The load-back is what the measured TTFT leaves after the estimate's other parts.
      const measuredMs = measuredTtftMs - (p.predictedTtftMs - p.loadBack.predictedMs);
      receipt.measuredTtftMs = measuredTtftMs;
      receipt.loadBack = { ...p.loadBack, measuredMs };
      if (p.loadBack.tier) this.#calibration.add({ tier: p.loadBack.tier, bytes: p.loadBack.bytes, predictedMs: p.loadBack.predictedMs, measuredMs });
    }
    this.#p.counters.settled++;
    // A worker removed since the route (routing-core.ts removeWorker) gets no per-worker stats back
    // from its late receipt: the receipt stays in the recent window, the pool's totals count it.
    const inPool = this.#p.registry.get(receipt.workerId) !== undefined;
    this.#p.metrics.settled(
      {
        workerId: inPool ? receipt.workerId : null,
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
    let drift = false;
    if (inPool) drift = this.#p.receipts.settle(receipt);
    else this.#p.receipts.record(receipt);
    return { drift, receipt, released: released || releasedDecode };
  }

  /** route() without side effects: same candidates and costs, no load, receipt or counters. */
  peek(req: PreviewRequest): RoutePreview {
    const totalBlocks = req.localHashes.length;
    const e = this.#evaluate(req);
    if (!e) return { workerId: null, overlapBlocks: 0, hostBlocks: 0, totalBlocks, blockSize: this.#p.registry.blockSize ?? 16, candidates: [], tiedWith: [] };
    const { live, scored, candidateViews, blockSize } = e;
    const i = pickIndex(scored, this.#temperature, this.#random);
    const minCost = Math.min(...scored.map((x) => x.cost));
    const tiedWith = candidateViews.filter((v, k) => k !== i && scored[k]!.cost === minCost).map((v) => v.workerId);
    const hostBlocks = scored[i]!.hostBlocks ?? 0;
    const storageBlocks = scored[i]!.storageBlocks ?? 0;
    const decode = isPrefillWorker(live[i]!) ? pickDecode(this.#liveDecoders(req), (slot) => this.#p.load.decodeBlocks(slot), live[i]!.region ?? null) : null;
    return {
      workerId: live[i]!.workerId,
      overlapBlocks: scored[i]!.overlapBlocks + hostBlocks + storageBlocks,
      hostBlocks,
      ...(storageBlocks > 0 ? { storageBlocks } : {}),
      totalBlocks,
      blockSize,
      candidates: candidateViews,
      tiedWith,
      ...(decode ? { decodeWorkerId: decode.workerId } : {}),
    };
  }

  /** Scores every live worker for a request (shared by route and peek): overlap, load, cost. */
  #evaluate(req: PreviewRequest) {
    const { registry, views, load } = this.#p;
    const blockSize = registry.blockSize ?? 16;
    const exclude = new Set(req.exclude ?? []);
    if (req.onlyWorkers) for (const w of registry.all()) if (!req.onlyWorkers.includes(w.workerId)) exclude.add(w.workerId);
    const now = this.#now();
    // Decode workers never take the prefill pick: they hold no prefix the index sees (pd-pool.ts).
    const up = registry.all().filter((w) => w.status === "up" && !isDecodeWorker(w) && !exclude.has(w.workerId) && (!req.incrementalOnly || isPrefillWorker(w) || w.incrementalStreaming));
    // Quarantined workers (an edge's failed connect) only when nothing else is up: a pool whose
    // every worker had one lost pooled connection must not answer 503 for the quarantine's length.
    const clear = up.filter((w) => !isQuarantined(w, now));
    const live = clear.length > 0 ? clear : up;
    if (live.length === 0) return null;
    const overlaps = views.overlaps(live, req.localHashes, now);
    const hostOverlaps = views.hostOverlaps(live, req.localHashes);
    const storageOverlaps = views.storage.overlaps(live, req.localHashes);
    const chain = views.pending.keysOf(req.localHashes);
    const shared = load.sharedPrefixes(chain);
    const candidates: Candidate[] = live.map((w, k) => ({
      slot: w.slot,
      overlapBlocks: overlaps[k]!,
      activePrefillTokens: load.queuedPrefillTokens(w.slot, now),
      activeDecodeBlocks: load.decodeBlocks(w.slot),
      sharedActiveBlocks: shared.get(w.slot) ?? 0,
      hostBlocks: Math.max(0, hostOverlaps[k]! - overlaps[k]!),
      storageBlocks: Math.max(0, storageOverlaps[k]! - Math.max(overlaps[k]!, hostOverlaps[k]!)),
      cacheFull: views.cacheFull(w),
      demotesToHost: views.demotesToHost(w.slot),
    }));
    const scored = this.#score(live, candidates, req, blockSize);
    const candidateViews: RouteCandidateView[] = live.map((w, k) => ({
      workerId: w.workerId,
      overlapBlocks: scored[k]!.overlapBlocks,
      cost: scored[k]!.cost,
      activePrefillTokens: candidates[k]!.activePrefillTokens,
      activeDecodeBlocks: candidates[k]!.activeDecodeBlocks,
      ...(scored[k]!.hostBlocks ? { hostBlocks: scored[k]!.hostBlocks } : {}),
      ...(scored[k]!.storageBlocks ? { storageBlocks: scored[k]!.storageBlocks } : {}),
      ...(candidates[k]!.cacheFull ? { cacheFull: true } : {}),
      ...(scored[k]!.duplicateMs ? { duplicateMs: scored[k]!.duplicateMs } : {}),
    }));
    return { live, chain, candidates, scored, candidateViews, blockSize };
  }

  /** The edge's region as the regions table knows it; null without a table or a known region. */
  #edgeRegion(req: Pick<RouteRequest, "edgeRegion" | "edgeColo">): string | null {
    const regions = this.#regions;
    return regions ? (req.edgeRegion ?? resolveEdgeRegion(regions, req.edgeColo)) : null;
  }

  #placement(w: SlottedWorker, edgeRegion: string | null) {
    const regions = this.#regions;
    return { rttMs: regions && edgeRegion ? rttMs(regions, edgeRegion, w.region ?? null) : 0, prefillTokensPerSec: this.#p.rates.of(w) };
  }

  /**
   * The pick's TTFT estimate and its load-back share, kept with the receipt: at settle, the
   * measured time to prefill done against them calibrates the tier's bandwidth. Computed under
   * either cost ("blocks" scores without it).
   */
  #predictLoadBack(w: SlottedWorker, c: Candidate, req: Pick<RouteRequest, "isl" | "edgeRegion" | "edgeColo">, blockSize: number): Pick<Receipt, "predictedTtftMs" | "loadBack"> {
    const tiers = this.#calibration.params();
    const b = estimateTtft(this.#regions ?? DEFAULT_TTFT_PARAMS, c, this.#placement(w, this.#edgeRegion(req)), req.isl, blockSize, tiers);
    const totalMs = b.totalMs + (isPrefillWorker(w) ? pdTransferMs(this.#pdTransfer, req.isl) : 0);
    // Both tiers at once: the measured time cannot be split between them; it calibrates neither.
    const tier = (c.hostBlocks ?? 0) > 0 && (c.storageBlocks ?? 0) > 0 ? null : (c.hostBlocks ?? 0) > 0 ? "host" : "storage";
    const blocks = tier === "host" ? (c.hostBlocks ?? 0) : (c.storageBlocks ?? 0);
    return {
      predictedTtftMs: totalMs,
      loadBack: { tier, predictedMs: b.loadBackMs, bytes: blocks * blockSize * tiers.kvBytesPerToken, measuredMs: null },
    };
  }

  /**
   * The first signal that a routed request's prefill ended (first token at the edge, or the worker's
   * stored blocks); `ageMs`: how long the signal waited before it was sent (the edge's receipt
   * queue), never dating it before the route.
   */
  prefillDone(receiptId: string, ageMs = 0): void {
    this.#p.rates.prefillDone(receiptId, this.#now() - ageMs);
    const p = this.#pending.get(receiptId);
    if (!p?.loadBack || this.#prefillDoneAt.has(receiptId)) return;
    this.#prefillDoneAt.set(receiptId, Math.max(p.at, this.#now() - ageMs));
  }

  calibration(): TierCalibration {
    return this.#calibration;
  }

  /**
   * The pool's cost (src/selection/selection.ts). Estimated TTFT counts each worker's round trip
   * when a regions table knows the edge's region, and none otherwise; cost "blocks" yields to it
   * only where round trips are known.
   */
  #score(live: readonly SlottedWorker[], candidates: Candidate[], req: Pick<RouteRequest, "isl" | "edgeRegion" | "edgeColo">, blockSize: number): Scored[] {
    const regions = this.#regions;
    const edgeRegion = this.#edgeRegion(req);
    if (this.#cost === "blocks" && !edgeRegion) return scoreByBlocks({ candidates, isl: req.isl, blockSize, decodeWeight: this.#decodeWeight });
    const placements = live.map((w) => this.#placement(w, edgeRegion));
    const params = regions ?? DEFAULT_TTFT_PARAMS;
    const tiers = this.#calibration.params();
    const scored = scoreByTtft({ candidates, placements, isl: req.isl, blockSize, params, tiers });
    // A prefill worker's first token also waits for the prompt's KV to reach its decode peer.
    const transferMs = pdTransferMs(this.#pdTransfer, req.isl);
    const now = this.#now();
    const duplicated = duplicateTokens(candidates, req.isl, blockSize);
    return scored.map((x, k) => {
      const rate = placements[k]!.prefillTokensPerSec;
      const estimateMs = x.cost + this.#recurring.costMs(x.slot, now, rate) + (isPrefillWorker(live[k]!) ? transferMs : 0);
      const displaced = displacedMs(duplicated[k]!, rate, candidates[k]!.demotesToHost ? tiers : null);
      const duplicateMs = duplicateCostMs(this.#duplicate, displaced, estimateMs);
      return { ...x, cost: estimateMs + duplicateMs, duplicateMs };
    });
  }
}
