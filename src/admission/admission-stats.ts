/**
 * Admission counters of one pool object, per band, as plain JSON for the metrics snapshot
 * (src/metrics/pool-families.ts renders them for Prometheus, KEDA and HPA).
 */
import { Histogram } from "../metrics/histogram.ts";
import type { BandStatsSnapshot, RefusalReason } from "../metrics/admission-snapshot.ts";

export type { RefusalReason } from "../metrics/admission-snapshot.ts";

/** Queue wait, seconds (admitted after waiting). */
export const WAIT_BUCKETS: readonly number[] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

interface BandStats {
  admittedImmediately: number;
  admittedAfterWait: number;
  refused: Record<RefusalReason, number>;
  left: number;
  /** Requests that entered the queue. */
  entered: number;
  wait: Histogram;
}

export class AdmissionStats {
  readonly #bands: BandStats[];
  readonly #names: readonly string[];

  constructor(names: readonly string[]) {
    this.#names = names;
    this.#bands = names.map(() => ({
      admittedImmediately: 0,
      admittedAfterWait: 0,
      refused: { queue_full: 0, deadline: 0, evicted: 0 },
      left: 0,
      entered: 0,
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
    this.#bands[band]!.entered++;
  }

  /** Per band, with what waits now (`queuedNow`, per band) beside the counters. */
  snapshot(queuedNow: readonly number[]): BandStatsSnapshot[] {
    return this.#bands.map((b, k) => ({
      band: this.#names[k]!,
      queued: queuedNow[k] ?? 0,
      admittedImmediately: b.admittedImmediately,
      admittedAfterWait: b.admittedAfterWait,
      refused: { ...b.refused },
      left: b.left,
      enqueued: b.entered,
      waitSeconds: b.wait.snapshot(),
    }));
  }
}
