/**
 * A pool's admission state as plain JSON (src/admission/ fills it; pool-families.ts renders it):
 * what waits now, per band and per tenant, and what was admitted, refused or left since start.
 */
import type { HistogramSnapshot } from "./histogram.ts";

/** Why a waiting request got 429: the queue was full, its deadline passed, or a higher band took its place. */
export type RefusalReason = "queue_full" | "deadline" | "evicted";
export const REFUSAL_REASONS: readonly RefusalReason[] = ["queue_full", "deadline", "evicted"];

export interface BandStatsSnapshot {
  /** The band's name (priority, default, flex). */
  band: string;
  /** Requests waiting now. */
  queued: number;
  /** Routed at once (under the bound). */
  admittedImmediately: number;
  /** Routed after waiting in the queue. */
  admittedAfterWait: number;
  refused: Record<RefusalReason, number>;
  /** Clients that left the queue before admission. */
  left: number;
  /** Requests that entered the queue. */
  enqueued: number;
  /** Seconds waited by requests admitted after waiting. */
  waitSeconds: HistogramSnapshot;
}

export interface AdmissionSnapshot {
  bands: BandStatsSnapshot[];
  /** Requests waiting now per tenant label (the tenants with most waiting, at most MAX_TENANTS_SHOWN). */
  queuedByTenant: Record<string, number>;
}

/** Tenants named in a snapshot at most: a scrape's label count stays bounded whatever the queue holds. */
export const MAX_TENANTS_SHOWN = 20;
