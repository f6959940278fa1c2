/**
 * Everything one pool's index reports to operators in one RPC: registry and load per worker,
 * index counters, drift, and the recorder's routing/receipt data. Plain JSON (no bigint, no Map).
 */
import type { AdmissionSnapshot } from "./admission-snapshot.ts";
import type { RecorderSnapshot } from "./pool-recorder.ts";

export interface WorkerView {
  workerId: string;
  url: string;
  status: "up" | "down" | "draining";
  blocks: number;
  synced: boolean;
  /** The index's blocks for this worker may be wrong (src/routing-index/approximate-workers.ts). */
  approximate: boolean;
  approximateReasons: string[];
  /** An edge could not connect to it lately: routed around for now (RoutingCore.quarantine). */
  quarantined: boolean;
  /** Its cache is full: a block it stores displaces a cached one (BlockViews.cacheFull; src/selection/duplicate-cost.ts). */
  cacheFull: boolean;
  activeRequests: number;
  activePrefillTokens: number;
  activeDecodeBlocks: number;
  contractDigest: string | null;
  kvEvents: boolean;
  epoch: number;
  lastSeen: number;
}

export interface IndexCounters {
  eventsApplied: number;
  blocksStored: number;
  blocksRemoved: number;
  eventsDropped: number;
  dropReasons: Record<string, number>;
  dumps: number;
  routed: number;
  settled: number;
  expired: number;
  /** Receipt entries (settlements, prefill-done marks) the index skipped: they did not match their wire schema (receipt-entries.ts). */
  receiptsRejected: number;
  /** Times the approximate index forgot every assumed block after an internal error (approx-index.ts #reset). */
  approxResets: number;
}

export interface DriftView {
  workerId: string;
  driftEwma: number;
  drifting: boolean;
}

/** One settled request: what the index predicted against what the worker reported. */
export interface ReceiptView {
  at: number;
  workerId: string;
  outcome: "ok" | "error" | "cancelled" | "pending";
  promptTokens: number;
  predictedCachedTokens: number;
  actualCachedTokens: number | null;
  fallbackReason: string | null;
  traceId: string | null;
}

export interface PoolMetricsSnapshot {
  at: number;
  blockSize: number | null;
  indexedBlocks: number;
  /** Most (worker, block) entries one index object holds (src/block-index/block-budget.ts); summed over shards. */
  blockBudget: number;
  activeRequests: number;
  counters: IndexCounters;
  workers: WorkerView[];
  drift: DriftView[];
  /** The cohort rule's verdict, as routing applies it. */
  cohort: CohortView;
  /** Most recent settled receipts, newest first. */
  recentReceipts: ReceiptView[];
  recorder: RecorderSnapshot;
  /** The admission queue (src/admission/); absent from a snapshot made without one. */
  admission?: AdmissionSnapshot;
  /** Load-back bandwidth per lower tier, calibrated from receipts (src/selection/tier-calibration.ts). */
  tierLoadBack?: Record<"host" | "storage", TierLoadBackView>;
}

/** One tier's load-back calibration: bandwidths in GB/s (10^9 bytes/s). */
export interface TierLoadBackView {
  /** In use by the cost: the estimate once seeded, else the configured one. */
  gbps: number;
  configuredGbps: number;
  estimatedGbps: number | null;
  accepted: number;
  rejected: number;
  /** EWMA of measured / predicted load-back time; null before any accepted sample. */
  measuredOverPredicted: number | null;
}

export type CohortState = "no_workers" | "no_contract" | "invalid" | "disagree" | "agree";
export const COHORT_STATES: readonly CohortState[] = ["no_workers", "no_contract", "invalid", "disagree", "agree"];

export interface CohortView {
  state: CohortState;
  /** Exact media routing may be used: every up worker publishes the same valid contract. */
  exactMedia: boolean;
  /** The cohort digest when the workers agree. */
  digest: string | null;
  /** The routing fallback reason when they do not (no_contract, invalid_contract, contract_disagreement, …). */
  reason: string | null;
  /** Distinct contract digests among up workers (unparseable or missing contracts not counted). */
  digests: number;
}

/**
 * Maps the index's cohort verdict (layout/cohortEligibility over the up workers) onto a small state
 * set for gauges and the dashboard (docs/layout.md, "Worker contract": exact media routing only when all agree).
 */
export function cohortOf(
  workers: readonly Pick<WorkerView, "status" | "contractDigest">[],
  verdict: { ok: true; digest: string } | { ok: false; reason: string },
): CohortView {
  const up = workers.filter((w) => w.status === "up");
  const digests = new Set(up.map((w) => w.contractDigest).filter((d): d is string => d !== null)).size;
  if (verdict.ok) return { state: up.length ? "agree" : "no_workers", exactMedia: up.length > 0, digest: verdict.digest, reason: null, digests };
  const state: CohortState =
    up.length === 0 ? "no_workers" : verdict.reason === "no_contract" ? "no_contract" : verdict.reason === "contract_disagreement" ? "disagree" : "invalid";
  return { state, exactMedia: false, digest: null, reason: verdict.reason, digests };
}

/** Cache hit rate over settled receipts with a reported cached-token count (null when none). */
export function hitRate(s: PoolMetricsSnapshot): number | null {
  let prompt = 0;
  let cached = 0;
  for (const r of Object.values(s.recorder.receipts)) {
    prompt += r.promptTokens;
    cached += r.actualCachedTokens;
  }
  return prompt > 0 ? cached / prompt : null;
}
