/**
 * What one pool's routing index records for operators: routing decisions (mode, fallback reason,
 * overlap and request-block histograms), request outcomes, receipts per worker (prompt, predicted
 * and actual cached tokens), edge overhead, a receipt time series and the recent decisions with a
 * reason each. Pure and bounded; `snapshot()` is plain JSON for the Durable Object RPC.
 */
import { BLOCK_BUCKETS, Histogram, OVERHEAD_BUCKETS, RATIO_BUCKETS, type HistogramSnapshot } from "./histogram.ts";
import { ReceiptSeries, type SeriesPoint } from "./time-series.ts";
import { choiceReason, type ReasonCandidate } from "./decision-reason.ts";

export type RoutingMode = "exact" | "text_prefix";

export interface DecisionRecord {
  at: number;
  receiptId: string;
  workerId: string;
  mode: RoutingMode;
  fallbackReason: string | null;
  overlapBlocks: number;
  /** Of `overlapBlocks`, blocks in host memory and in a shared storage view (HiCache); absent: none. */
  hostBlocks?: number;
  storageBlocks?: number;
  totalBlocks: number;
  isl: number;
  candidates: number;
  retry: boolean;
  reason: string;
}

export interface WorkerReceiptTotals {
  ok: number;
  error: number;
  /** The client went away before the answer ended: neither the worker's failure nor a result. */
  cancelled: number;
  /** Settled ok but the worker reported no cached_tokens (SGLang without --enable-cache-report). */
  unreported: number;
  promptTokens: number;
  predictedCachedTokens: number;
  actualCachedTokens: number;
}

export interface RecorderSnapshot {
  requests: Record<string, number>;
  decisions: Record<string, Record<RoutingMode, number>>;
  fallbacks: Record<string, number>;
  retries: number;
  overlapBlocks: HistogramSnapshot;
  requestBlocks: HistogramSnapshot;
  overlapRatio: HistogramSnapshot;
  /** Overlap blocks of every decision summed by the tier they were credited in (HiCache). */
  tierBlocks: Record<CacheTier, number>;
  edgeOverheadSeconds: HistogramSnapshot;
  receipts: Record<string, WorkerReceiptTotals>;
  series: SeriesPoint[];
  recentDecisions: DecisionRecord[];
}

/** Where credited blocks were: GPU, host memory (CPU_PINNED), a shared storage view (approximate). */
export type CacheTier = "gpu" | "host" | "storage";

export interface RoutedInput {
  at: number;
  receiptId: string;
  workerId: string;
  /** Blocks credited in every tier. */
  overlapBlocks: number;
  hostBlocks?: number;
  storageBlocks?: number;
  totalBlocks: number;
  isl: number;
  fallbackReason: string | null;
  retry: boolean;
  candidates: readonly ReasonCandidate[];
}

export interface SettledInput {
  /** null: the worker left the pool before its receipt settled; only the pool's totals count it. */
  workerId: string | null;
  outcome: "ok" | "error" | "cancelled" | "pending";
  promptTokens: number;
  predictedOverlapBlocks: number;
  blockSize: number;
  actualCachedTokens: number | null;
  /** The edge retries elsewhere: not the request's final outcome. */
  retrying: boolean;
  edgeOverheadMs: number | null;
}

/** Recent decisions (and, in RoutingCore, recent receipts) one index keeps for operators. */
export const RECENT_KEPT = 50;
const RECENT_DECISIONS = RECENT_KEPT;
/** Caps label cardinality when reasons are free-form. */
const MAX_REASON_LABELS = 64;

export class PoolRecorder {
  readonly #requests: Record<string, number> = { ok: 0, error: 0, cancelled: 0, no_worker: 0 };
  readonly #decisions: Record<string, Record<RoutingMode, number>> = {};
  readonly #fallbacks: Record<string, number> = {};
  #retries = 0;
  readonly #overlap = new Histogram(BLOCK_BUCKETS);
  readonly #requestBlocks = new Histogram(BLOCK_BUCKETS);
  readonly #overlapRatio = new Histogram(RATIO_BUCKETS);
  readonly #tierBlocks: Record<CacheTier, number> = { gpu: 0, host: 0, storage: 0 };
  readonly #overhead = new Histogram(OVERHEAD_BUCKETS);
  readonly #receipts: Record<string, WorkerReceiptTotals> = {};
  readonly #series = new ReceiptSeries();
  readonly #recent: DecisionRecord[] = [];

  routed(r: RoutedInput): DecisionRecord {
    const mode: RoutingMode = r.fallbackReason === null ? "exact" : "text_prefix";
    const byMode = (this.#decisions[r.workerId] ??= { exact: 0, text_prefix: 0 });
    byMode[mode]++;
    if (r.fallbackReason !== null) this.#countFallback(r.fallbackReason);
    if (r.retry) this.#retries++;
    this.#overlap.observe(r.overlapBlocks);
    this.#requestBlocks.observe(r.totalBlocks);
    if (r.totalBlocks > 0) this.#overlapRatio.observe(r.overlapBlocks / r.totalBlocks);
    const host = r.hostBlocks ?? 0;
    const storage = r.storageBlocks ?? 0;
    this.#tierBlocks.gpu += r.overlapBlocks - host - storage;
    this.#tierBlocks.host += host;
    this.#tierBlocks.storage += storage;
    const rec: DecisionRecord = {
      at: r.at,
      receiptId: r.receiptId,
      workerId: r.workerId,
      mode,
      fallbackReason: r.fallbackReason,
      overlapBlocks: r.overlapBlocks,
      ...(host > 0 ? { hostBlocks: host } : {}),
      ...(storage > 0 ? { storageBlocks: storage } : {}),
      totalBlocks: r.totalBlocks,
      isl: r.isl,
      candidates: r.candidates.length,
      retry: r.retry,
      reason: (r.retry ? "retry after a failed worker; " : "") + choiceReason(r.workerId, r.candidates, r.totalBlocks),
    };
    this.#recent.push(rec);
    if (this.#recent.length > RECENT_DECISIONS) this.#recent.shift();
    return rec;
  }

  /** No worker was up: the request fails with 503. */
  noWorker(fallbackReason: string | null): void {
    this.#requests["no_worker"]!++;
    if (fallbackReason !== null) this.#countFallback(fallbackReason);
  }

  settled(s: SettledInput, now: number): void {
    if (s.edgeOverheadMs !== null && Number.isFinite(s.edgeOverheadMs) && s.edgeOverheadMs >= 0) this.#overhead.observe(s.edgeOverheadMs / 1000);
    const ok = s.outcome === "ok";
    const cancelled = s.outcome === "cancelled";
    if (!s.retrying) this.#requests[ok ? "ok" : cancelled ? "cancelled" : "error"]!++;
    // Totals of a worker that left stay gone (forgetWorker): this one is counted into a scratch row.
    const w = s.workerId === null ? emptyTotals() : (this.#receipts[s.workerId] ??= emptyTotals());
    // A client that hung up is no error rate of the pool's (and no result to compare).
    if (cancelled) {
      w.cancelled++;
      return;
    }
    if (!ok) {
      w.error++;
      this.#series.add(now, { ok: false, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 });
      return;
    }
    w.ok++;
    if (s.actualCachedTokens === null) {
      w.unreported++;
      this.#series.add(now, { ok: true, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 });
      return;
    }
    // Same prediction the receipt book uses: whole overlapping blocks, capped at the prompt.
    const predicted = Math.min(s.predictedOverlapBlocks * s.blockSize, s.promptTokens);
    w.promptTokens += s.promptTokens;
    w.predictedCachedTokens += predicted;
    w.actualCachedTokens += s.actualCachedTokens;
    this.#series.add(now, { ok: true, promptTokens: s.promptTokens, predictedCachedTokens: predicted, actualCachedTokens: s.actualCachedTokens });
  }

  /** A worker left the pool (removed): its decision and receipt series go with it (the pool's totals keep what it did). */
  forgetWorker(workerId: string): void {
    delete this.#decisions[workerId];
    delete this.#receipts[workerId];
  }

  #countFallback(reason: string): void {
    const key = reason in this.#fallbacks || Object.keys(this.#fallbacks).length < MAX_REASON_LABELS ? reason : "other";
    this.#fallbacks[key] = (this.#fallbacks[key] ?? 0) + 1;
  }

  snapshot(): RecorderSnapshot {
    const receipts: Record<string, WorkerReceiptTotals> = {};
    for (const [k, v] of Object.entries(this.#receipts)) receipts[k] = { ...v };
    const decisions: Record<string, Record<RoutingMode, number>> = {};
    for (const [k, v] of Object.entries(this.#decisions)) decisions[k] = { ...v };
    return {
      requests: { ...this.#requests },
      decisions,
      fallbacks: { ...this.#fallbacks },
      retries: this.#retries,
      overlapBlocks: this.#overlap.snapshot(),
      requestBlocks: this.#requestBlocks.snapshot(),
      overlapRatio: this.#overlapRatio.snapshot(),
      tierBlocks: { ...this.#tierBlocks },
      edgeOverheadSeconds: this.#overhead.snapshot(),
      receipts,
      series: this.#series.snapshot(),
      recentDecisions: [...this.#recent].reverse(),
    };
  }
}

function emptyTotals(): WorkerReceiptTotals {
  return { ok: 0, error: 0, cancelled: 0, unreported: 0, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 };
}
