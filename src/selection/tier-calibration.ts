/**
 * Calibrating the load-back bandwidths of tier-cost.ts from receipts. A settled request that
 * matched blocks in one lower tier (host memory or shared storage, not both: the time could not be
 * split between them) gives one sample: its measured time to prefill done minus every other part of
 * its TTFT estimate is taken as the load-back, and the tier's bytes over that time as a bandwidth.
 * The first MIN_SAMPLES accepted samples seed the estimate with their median; later ones move it by
 * an EWMA in log space (a bandwidth is a rate: halving and doubling weigh the same), and a sample
 * more than OUTLIER_FACTOR away from the estimate is refused (a queue stall, a lost event). Until
 * seeded, the configured bandwidth is used.
 */
import type { TierCostParams } from "./tier-cost.ts";

export type LoadTier = "host" | "storage";

/** Accepted samples before the estimate replaces the configured bandwidth. */
export const TIER_CALIBRATION_MIN_SAMPLES = 8;
/** Weight of one sample once seeded. */
const ALPHA = 0.1;
/** A sample this many times above or below the seeded estimate is an outlier. */
const OUTLIER_FACTOR = 4;
/** The estimate stays within the configuration's own bounds (config.ts hostLoadGBps/storageLoadGBps). */
const MIN_GBPS = 0.001;
const MAX_GBPS = 10_000;

export interface TierSample {
  tier: LoadTier;
  /** Bytes loaded back: blocks × block size × KV bytes per token. */
  bytes: number;
  /** What the cost model predicted the load-back takes, ms. */
  predictedMs: number;
  /** Measured time to prefill done minus the estimate's other parts (round trip, queue, prefill, decode), ms. */
  measuredMs: number;
}

export interface TierCalibrationView {
  /** Bandwidth the cost uses: the estimate once seeded, else the configured one (GB/s). */
  gbps: number;
  configuredGbps: number;
  /** Estimated GB/s; null until MIN_SAMPLES samples were accepted. */
  estimatedGbps: number | null;
  accepted: number;
  rejected: number;
  /** EWMA of measured / predicted load-back time over accepted samples; null before any. */
  measuredOverPredicted: number | null;
  /** Last accepted sample's predicted and measured load-back, ms. */
  lastPredictedMs: number | null;
  lastMeasuredMs: number | null;
}

interface TierState {
  seed: number[];
  logGbps: number | null;
  accepted: number;
  rejected: number;
  ratio: number | null;
  lastPredictedMs: number | null;
  lastMeasuredMs: number | null;
}

const empty = (): TierState => ({ seed: [], logGbps: null, accepted: 0, rejected: 0, ratio: null, lastPredictedMs: null, lastMeasuredMs: null });

export class TierCalibration {
  readonly #configured: TierCostParams;
  readonly #state: Record<LoadTier, TierState> = { host: empty(), storage: empty() };

  constructor(configured: TierCostParams) {
    this.#configured = configured;
  }

  /** Takes one sample; returns false when refused (bad numbers, out of range, outlier). */
  add(s: TierSample): boolean {
    const st = this.#state[s.tier];
    const gbps = s.bytes / (s.measuredMs * 1e6);
    const ok = Number.isFinite(gbps) && s.bytes > 0 && s.measuredMs > 0 && s.predictedMs > 0 && gbps >= MIN_GBPS && gbps <= MAX_GBPS;
    if (!ok || (st.logGbps !== null && Math.abs(Math.log(gbps) - st.logGbps) > Math.log(OUTLIER_FACTOR))) {
      st.rejected++;
      return false;
    }
    st.accepted++;
    const ratio = s.measuredMs / s.predictedMs;
    st.ratio = st.ratio === null ? ratio : st.ratio + ALPHA * (ratio - st.ratio);
    st.lastPredictedMs = s.predictedMs;
    st.lastMeasuredMs = s.measuredMs;
    if (st.logGbps === null) {
      st.seed.push(Math.log(gbps));
      if (st.seed.length >= TIER_CALIBRATION_MIN_SAMPLES) {
        const sorted = [...st.seed].sort((a, b) => a - b);
        st.logGbps = sorted[Math.floor(sorted.length / 2)]!;
        st.seed = [];
      }
    } else st.logGbps += ALPHA * (Math.log(gbps) - st.logGbps);
    return true;
  }

  /** The tier costs with each seeded estimate in place of the configured bandwidth. */
  params(): TierCostParams {
    return { ...this.#configured, hostLoadGBps: this.#gbps("host"), storageLoadGBps: this.#gbps("storage") };
  }

  view(tier: LoadTier): TierCalibrationView {
    const st = this.#state[tier];
    return {
      gbps: this.#gbps(tier),
      configuredGbps: tier === "host" ? this.#configured.hostLoadGBps : this.#configured.storageLoadGBps,
      estimatedGbps: st.logGbps === null ? null : clamp(Math.exp(st.logGbps)),
      accepted: st.accepted,
      rejected: st.rejected,
      measuredOverPredicted: st.ratio,
      lastPredictedMs: st.lastPredictedMs,
      lastMeasuredMs: st.lastMeasuredMs,
    };
  }

  #gbps(tier: LoadTier): number {
    const st = this.#state[tier];
    if (st.logGbps === null) return tier === "host" ? this.#configured.hostLoadGBps : this.#configured.storageLoadGBps;
    return clamp(Math.exp(st.logGbps));
  }
}

function clamp(gbps: number): number {
  return Math.min(MAX_GBPS, Math.max(MIN_GBPS, gbps));
}
