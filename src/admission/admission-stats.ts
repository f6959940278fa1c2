/**
 * Admission counters of one pool object, per band, as plain JSON for the metrics snapshot
 * (src/metrics/pool-families.ts renders them for Prometheus, KEDA and HPA).
 */
import { Histogram, type HistogramSnapshot } from "../metrics/histogram.ts";

/** Queue wait, seconds (admitted after waiting). */
export const WAIT_BUCKETS: readonly number[] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Why a waiting request got 429: the queue was full, its deadline passed, or a higher band took its place. */
export type RefusalReason = "queue_full" | "deadline" | "evicted";

export interface BandStatsSnapshot {
  /** Routed at once (under the bound). */
  admittedImmediately: number;
  /** Routed after waiting in the queue. */
  admittedAfterWait: number;
  refused: Record<RefusalReason, number>;
  /** Clients that left the queue before admission. */
  left: number;
  /** Requests that entered the queue. */
  queued: number;
  waitSeconds: HistogramSnapshot;
}

interface BandStats {
  admittedImmediately: number;
  admittedAfterWait: number;
  refused: Record<RefusalReason, number>;
  left: number;
  queued: number;
  wait: Histogram;
}

export class AdmissionStats {
  readonly #bands: BandStats[];

  constructor(bands: number) {
    this.#bands = Array.from({ length: bands }, () => ({
      admittedImmediately: 0,
      admittedAfterWait: 0,
      refused: { queue_full: 0, deadline: 0, evicted: 0 },
      left: 0,
      queued: 0,
      wait: new Histogram(WAIT_BUCKETS),
    }));
  }

  admitted(band: number, waited: boolean, waitedMs: number): void {
    const b = this.#bands[band]!;
    if (!waited) {
      b.admittedImmediately++;
      return;
    }
    b.admittedAfterWait++;
    b.wait.observe(waitedMs / 1000);
  }

  refused(band: number, reason: RefusalReason): void {
    this.#bands[band]!.refused[reason]++;
  }

  left(band: number): void {
    this.#bands[band]!.left++;
  }

  queued(band: number): void {
    this.#bands[band]!.queued++;
  }

  snapshot(): BandStatsSnapshot[] {
    return this.#bands.map((b) => ({
      admittedImmediately: b.admittedImmediately,
      admittedAfterWait: b.admittedAfterWait,
      refused: { ...b.refused },
      left: b.left,
      queued: b.queued,
      waitSeconds: b.wait.snapshot(),
    }));
  }
}
