/**
 * What operators see of one pool: a row per worker (registry, block views and load joined), the
 * index counters, and the metrics snapshot (src/metrics/pool-snapshot.ts) built from those.
 */
import type { LoadTracker } from "../load/load-tracker.ts";
import { RECENT_KEPT, type PoolRecorder } from "../metrics/pool-recorder.ts";
import { cohortOf, type IndexCounters, type PoolMetricsSnapshot, type WorkerView } from "../metrics/pool-snapshot.ts";
import type { BlockViews } from "./block-views.ts";
import type { PrefillRates } from "./prefill-rates.ts";
import { poolCohort } from "./cohort.ts";
import type { ReceiptBook } from "./receipts.ts";
import { isQuarantined, type WorkerRecord, type WorkerRegistry } from "./worker-registry.ts";

/** A worker's record joined with what operators see of its blocks and load (the snapshot's WorkerView fields). */
export type WorkerRow = WorkerRecord &
  Pick<WorkerView, "blocks" | "synced" | "approximate" | "approximateReasons" | "quarantined" | "cacheFull" | "activeRequests" | "activePrefillTokens" | "activeDecodeBlocks"> & {
    /** The prefill rate learned from its prefills (prefill-rates.ts), tokens/s; null: too few samples or learning off. The hello's prefillTokensPerSec wins over it. */
    learnedPrefillTokensPerSec: number | null;
  };

export function emptyIndexCounters(): IndexCounters {
  return { eventsApplied: 0, blocksStored: 0, blocksRemoved: 0, eventsDropped: 0, dropReasons: {}, dumps: 0, routed: 0, settled: 0, expired: 0, receiptsRejected: 0, approxResets: 0 };
}

/** Every registered worker with what the index holds of it and its in-flight load. */
export function workerRows(registry: WorkerRegistry, views: BlockViews, load: LoadTracker, rates: PrefillRates, at: number): WorkerRow[] {
  return registry.all().map(({ slot, ...w }) => ({
    ...w,
    blocks: views.index.workerBlockCount(slot),
    synced: views.isExact(w.workerId),
    approximate: views.approximate.has(w.workerId),
    approximateReasons: views.approximate.reasons(w.workerId),
    quarantined: isQuarantined(w, at),
    cacheFull: views.cacheFull({ slot, kvCapacityTokens: w.kvCapacityTokens, blockSize: w.blockSize }),
    activeRequests: load.activeRequests(slot),
    activePrefillTokens: load.prefillTokens(slot),
    activeDecodeBlocks: load.decodeBlocks(slot),
    learnedPrefillTokensPerSec: rates.learned(slot),
  }));
}

export interface PoolMetricsParts {
  registry: WorkerRegistry;
  views: BlockViews;
  load: LoadTracker;
  rates: PrefillRates;
  receipts: ReceiptBook;
  metrics: PoolRecorder;
  counters: IndexCounters;
}

/** Everything operators see about this pool (metrics scrape, dashboard), as plain JSON. */
export function poolMetricsSnapshot(p: PoolMetricsParts, at: number): PoolMetricsSnapshot {
  const workers = workerRows(p.registry, p.views, p.load, p.rates, at);
  const verdict = poolCohort(p.registry.all());
  return {
    at,
    blockSize: p.registry.blockSize,
    indexedBlocks: p.views.index.size,
    blockBudget: p.views.budget.limitFor(p.registry.slotCount),
    activeRequests: p.load.size,
    counters: { ...p.counters, dropReasons: { ...p.counters.dropReasons } },
    workers: workers.map((w) => ({
      workerId: w.workerId,
      url: w.url,
      status: w.status,
      blocks: w.blocks,
      synced: w.synced,
      approximate: w.approximate,
      approximateReasons: w.approximateReasons,
      quarantined: w.quarantined,
      cacheFull: w.cacheFull,
      activeRequests: w.activeRequests,
      activePrefillTokens: w.activePrefillTokens,
      activeDecodeBlocks: w.activeDecodeBlocks,
      contractDigest: w.contractDigest,
      kvEvents: w.kvEvents,
      epoch: w.epoch,
      lastSeen: w.lastSeen,
    })),
    drift: p.receipts.stats().map((d) => ({ workerId: d.workerId, driftEwma: d.driftEwma, drifting: d.drifting })),
    cohort: cohortOf(workers, verdict),
    recentReceipts: p.receipts.recent(RECENT_KEPT).map((r) => ({
      at: r.at,
      workerId: r.workerId,
      outcome: r.outcome,
      promptTokens: r.promptTokens,
      predictedCachedTokens: Math.min(r.predictedOverlapBlocks * r.blockSize, r.promptTokens),
      actualCachedTokens: r.actualCachedTokens,
      fallbackReason: r.fallbackReason,
      traceId: r.traceId,
    })),
    recorder: p.metrics.snapshot(),
  };
}
