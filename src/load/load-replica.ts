/**
 * Load replication between the shards of a sharded pool (docs/scale.md §3).
 *
 * Each shard object routes the requests whose first block it owns, so each one sees only its own
 * share of the pool's load. To pick workers on the whole pool's load, every shard sends the load
 * changes it makes (a request added, its prefill done, it released) to the other shards in batches
 * at most `loadSyncMs` apart; they apply them to their LoadTracker under ids namespaced by the
 * sending shard. Workers are named by id (slots differ between shards). A replica entry whose
 * release never arrives expires like any unsettled request (LoadTracker.staleMs).
 *
 * Staleness is measured, not assumed: every op carries its origin time and the receiver records
 * the lag (receive time − origin time) in a bounded sample window.
 */
import { z } from "zod";

export const MAX_LOAD_OPS_PER_BATCH = 10_000;
const MAX_CHAIN_KEYS = 1 << 16;

export const LoadOpSchema = z.discriminatedUnion("op", [
  z.object({
    op: z.literal("add"),
    id: z.string().min(1).max(64),
    workerId: z.string().min(1).max(128),
    prefillTokens: z.number().int().min(0),
    decodeBlocks: z.number().int().min(0),
    chainKeys: z.array(z.number()).max(MAX_CHAIN_KEYS),
    at: z.number(),
  }),
  z.object({ op: z.literal("done"), id: z.string().min(1).max(64), at: z.number() }),
  z.object({ op: z.literal("release"), id: z.string().min(1).max(64), at: z.number() }),
]);
export type LoadOp = z.infer<typeof LoadOpSchema>;

export const LoadOpBatchSchema = z.object({
  from: z.number().int().min(0).max(1023),
  ops: z.array(LoadOpSchema).max(MAX_LOAD_OPS_PER_BATCH),
});
export type LoadOpBatch = z.infer<typeof LoadOpBatchSchema>;

/** The LoadTracker id of a request routed by another shard. */
export function replicaReceiptId(fromShard: number, id: string): string {
  return `~${fromShard}:${id}`;
}

export interface LagSummary {
  samples: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** The last `capacity` lag samples (ms) and their quantiles. */
export class LagWindow {
  readonly #samples: Float64Array;
  #next = 0;
  #filled = 0;

  constructor(capacity = 2048) {
    this.#samples = new Float64Array(capacity);
  }

  record(ms: number): void {
    this.#samples[this.#next] = Math.max(0, ms);
    this.#next = (this.#next + 1) % this.#samples.length;
    if (this.#filled < this.#samples.length) this.#filled++;
  }

  summary(): LagSummary {
    if (this.#filled === 0) return { samples: 0, p50Ms: null, p99Ms: null, maxMs: null };
    const sorted = Array.from(this.#samples.subarray(0, this.#filled)).sort((a, b) => a - b);
    const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
    return { samples: this.#filled, p50Ms: q(0.5), p99Ms: q(0.99), maxMs: sorted[sorted.length - 1]! };
  }
}

export interface LoadSyncStats {
  /** Ops this shard queued for the others. */
  opsSent: number;
  batchesSent: number;
  /** Deliveries to a peer that failed (that peer's view stays behind until entries expire). */
  sendFailures: number;
  opsReceived: number;
  opsApplied: number;
  /** Ops naming a worker this shard does not know (yet) or a request it never saw. */
  opsSkipped: number;
  /** Origin → applied here. */
  lag: LagSummary;
}

/**
 * Ids released before their add arrived (delivery out of order, or the add was skipped): a later
 * add for one of them is dropped instead of becoming load that nothing will ever release.
 * Bounded in count and age.
 */
export class Tombstones {
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #at = new Map<string, number>();

  constructor(ttlMs: number, max: number) {
    this.#ttlMs = ttlMs;
    this.#max = max;
  }

  add(id: string, now: number): void {
    this.#at.delete(id);
    this.#at.set(id, now);
    // Insertion order is age order: drop from the front.
    for (const [k, t] of this.#at) {
      if (this.#at.size <= this.#max && now - t <= this.#ttlMs) break;
      this.#at.delete(k);
    }
  }

  /** True (and forgets it) when `id` was released before its add. */
  take(id: string): boolean {
    return this.#at.delete(id);
  }

  get size(): number {
    return this.#at.size;
  }
}
