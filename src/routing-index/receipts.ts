/**
 * Routing receipts: for every routed request, the overlap the index predicted against the cached
 * tokens the worker actually reported. Kept per worker with a bounded recent window; a sustained
 * gap (the worker cached much less than predicted) is drift: the index and the worker disagree.
 */

export interface Receipt {
  receiptId: string;
  workerId: string;
  at: number;
  promptTokens: number;
  totalBlocks: number;
  /** Cached blocks predicted in every tier (GPU + host memory). */
  predictedOverlapBlocks: number;
  /** Of those, blocks predicted in the worker's host memory (HiCache), loaded back; absent: none. */
  predictedHostBlocks?: number;
  /** Of those, blocks assumed in its shared storage backend (approximate view); absent: none. */
  predictedStorageBlocks?: number;
  blockSize: number;
  actualCachedTokens: number | null;
  outcome: "ok" | "error" | "cancelled" | "pending";
  fallbackReason: string | null;
  /** The request's W3C trace id: the receipt of a request a client traced can be found by it. */
  traceId: string | null;
  /** A prefill/decode pair's decode side (`workerId` is then its prefill); absent: a unified worker. */
  decodeWorkerId?: string;
  /** Estimated time to first token of the pick, ms; kept only for requests with host or storage blocks. */
  predictedTtftMs?: number;
  /** Measured: route to the first signal that the prefill ended (first token at the edge, or the worker's stored blocks), ms. */
  measuredTtftMs?: number;
  /** Load-back of host/storage blocks: predicted, and measured = measured TTFT − the estimate's other parts. */
  loadBack?: ReceiptLoadBack;
}

export interface ReceiptLoadBack {
  /** The tier it calibrates; null: blocks in both tiers (the time cannot be split). */
  tier: "host" | "storage" | null;
  bytes: number;
  predictedMs: number;
  measuredMs: number | null;
}

export interface WorkerReceiptStats {
  workerId: string;
  settled: number;
  predictedTokens: number;
  actualCachedTokens: number;
  /**
   * EWMA of (predicted − actual) / max(predicted, actual, 1) over settled receipts, each term in
   * [−1, 1]; > 0 means over-prediction. (Divided by the prediction alone, one request the index
   * knew nothing of, predicted 0 and 304 cached, weighed −304 and kept drift alerting off for the
   * next ~50 over-predicted requests.)
   */
  driftEwma: number;
  drifting: boolean;
}

export class ReceiptBook {
  readonly #recent: Receipt[] = [];
  readonly #stats = new Map<string, WorkerReceiptStats>();
  readonly capacity: number;
  readonly driftThreshold: number;
  readonly alpha: number;

  constructor(capacity = 256, driftThreshold = 0.5, alpha = 0.1) {
    this.capacity = capacity;
    this.driftThreshold = driftThreshold;
    this.alpha = alpha;
  }

  /** Records a settled receipt. Returns true when this settle made the worker cross into drift. */
  settle(r: Receipt): boolean {
    this.record(r);
    if (r.actualCachedTokens === null || r.outcome !== "ok") return false;
    let s = this.#stats.get(r.workerId);
    if (!s) {
      s = { workerId: r.workerId, settled: 0, predictedTokens: 0, actualCachedTokens: 0, driftEwma: 0, drifting: false };
      this.#stats.set(r.workerId, s);
    }
    const predicted = Math.min(r.predictedOverlapBlocks * r.blockSize, r.promptTokens);
    s.settled++;
    s.predictedTokens += predicted;
    s.actualCachedTokens += r.actualCachedTokens;
    const gap = (predicted - r.actualCachedTokens) / Math.max(predicted, r.actualCachedTokens, 1);
    s.driftEwma = s.settled === 1 ? gap : s.driftEwma + this.alpha * (gap - s.driftEwma);
    const was = s.drifting;
    s.drifting = s.settled >= 5 && s.driftEwma > this.driftThreshold;
    return s.drifting && !was;
  }

  /**
   * Keeps a receipt in the recent window only: its worker left the pool (removed) before it
   * settled, and a late settle must not bring back the stats forgetWorker dropped.
   */
  record(r: Receipt): void {
    this.#recent.push(r);
    if (this.#recent.length > this.capacity) this.#recent.shift();
  }

  /** A worker left the pool (removed): its drift stats go with it; its receipts leave the recent window in turn. */
  forgetWorker(workerId: string): void {
    this.#stats.delete(workerId);
  }

  recent(limit = 50): Receipt[] {
    return this.#recent.slice(-limit).reverse();
  }

  stats(): WorkerReceiptStats[] {
    return [...this.#stats.values()].map((s) => ({ ...s }));
  }
}
