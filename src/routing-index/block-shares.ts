/**
 * Per-worker shares of one index object's block budget, so that one relay (honest but large, or
 * holding a stolen key and sending fabricated blocks) cannot take the room the other workers need.
 *
 * Each worker with KV events has a bound and a guarantee:
 *  - bound: twice what its own KV pool can hold, `ceil(kvCapacityTokens / blockSize) × 2` blocks
 *    (the capacity from its hello, /server_info `max_total_num_tokens`; the headroom covers a
 *    relay view that lags the worker's removals); no capacity in the hello: no such bound;
 *  - guarantee: the smaller of its bound and an even split of the object's limit among the live
 *    workers with events (`floor(limit / n)`). A worker is what one relay key names: the rank
 *    targets of a DP-attention worker (rank-target.ts) split its part, each `1 / dpSize` of it
 *    (the `&rank=` of a connect is not signed, so one key's ranks must not count as many workers).
 * A worker may store past its guarantee only into room that no other worker's unused guarantee
 * reserves, and never past its bound. When a worker still under its guarantee finds no room (a
 * worker joined, or the limit shrank as slots were added), the worker furthest past its own
 * guarantee is shed: its view is dropped and marked approximate, never the other way round.
 */
import type { ApproxIndex } from "../block-index/approx-index.ts";
import type { BlockBudget } from "../block-index/block-budget.ts";
import type { BlockIndex } from "../block-index/block-index.ts";
import type { SlottedWorker, WorkerRegistry } from "./worker-registry.ts";

/** Capacity headroom factor: the relay's view may hold removed blocks until their events arrive. */
export const KV_CAPACITY_HEADROOM = 2;

/** Most blocks the index holds for a worker, from its own KV capacity (Infinity when unknown). */
export function capacityBlocks(w: Pick<SlottedWorker, "kvCapacityTokens" | "blockSize">): number {
  if (!w.kvCapacityTokens) return Infinity;
  return Math.ceil(w.kvCapacityTokens / w.blockSize) * KV_CAPACITY_HEADROOM;
}

/** A worker that holds blocks in this index. */
function holdsBlocks(w: SlottedWorker): boolean {
  return w.kvEvents && w.status !== "down";
}

/** The target's part of one worker's share: one of its `dpSize` ranks (up siblings agree on it). */
function rankWeight(w: Pick<SlottedWorker, "dpSize">): number {
  return 1 / Math.max(1, w.dpSize ?? 1);
}

/** The blocks `w` is sure to find room for, given one worker's share. */
function guaranteeOf(w: SlottedWorker, share: number): number {
  return Math.min(capacityBlocks(w), Math.floor(share * rankWeight(w)));
}

export class BlockShares {
  readonly #registry: WorkerRegistry;
  readonly #index: BlockIndex;
  readonly #approx: ApproxIndex;
  readonly #budget: BlockBudget;

  constructor(registry: WorkerRegistry, index: BlockIndex, approx: ApproxIndex, budget: BlockBudget) {
    this.#registry = registry;
    this.#index = index;
    this.#approx = approx;
    this.#budget = budget;
  }

  /** The even split of the object's limit among the workers that hold blocks (a worker's ranks count as one). */
  #share(): number {
    let n = 0;
    for (const o of this.#registry.values()) if (holdsBlocks(o)) n += rankWeight(o);
    return Math.floor(this.#budget.limitFor(this.#registry.slotCount) / Math.max(1, n));
  }

  /** The blocks the worker is sure to find room for. */
  guarantee(w: SlottedWorker): number {
    return guaranteeOf(w, this.#share());
  }

  /**
   * How many more blocks the worker may store now (its bound, the others' unused guarantees, the
   * object's limit), and how many of its guarantee it has not used yet. Two passes over the
   * registry, nothing allocated: this runs for every relay message that stores blocks.
   */
  look(w: SlottedWorker): { room: number; owed: number } {
    const share = this.#share();
    let reserved = 0;
    for (const o of this.#registry.values()) {
      if (o === w || !holdsBlocks(o)) continue;
      const unused = guaranteeOf(o, share) - this.#index.workerBlockCount(o.slot);
      if (unused > 0) reserved += unused;
    }
    const held = this.#index.workerBlockCount(w.slot);
    const free = this.#budget.limitFor(this.#registry.slotCount) - reserved - this.#index.size - this.#approx.size;
    return { room: Math.max(0, Math.min(capacityBlocks(w) - held, free)), owed: guaranteeOf(w, share) - held };
  }

  /** The worker (other than `w`) furthest past its guarantee, if any is past it. */
  furthestOver(w: SlottedWorker): SlottedWorker | undefined {
    const share = this.#share();
    let worst: SlottedWorker | undefined;
    let most = 0;
    for (const o of this.#registry.values()) {
      if (o === w || !holdsBlocks(o)) continue;
      const over = this.#index.workerBlockCount(o.slot) - guaranteeOf(o, share);
      if (over > most) [worst, most] = [o, over];
    }
    return worst;
  }
}
