/**
 * Routed requests whose prefill the index has not seen end yet, per worker slot, by where each
 * request's chain of full blocks ends (radix-index.ts chainEndOf).
 *
 * Why: a request's prefill tokens count as its worker's queue until its prefill is over
 * (src/load/load-tracker.ts), and the edge can tell only for a streamed request (its first
 * output). An unstreamed one would count until its answer ends, for the whole decode, and make its
 * worker look busy for seconds after it is not. The worker's own KV events tell it for every
 * request: SGLang puts a request's prompt pages into its radix tree when its prefill is done ("This
 * updates radix so others can match": `cache_unfinished_req` in process_batch_result_prefill,
 * python/sglang/srt/managers/scheduler_output_processor_mixin.py; a chunked prompt's earlier chunks
 * as they finish), each new page a BlockStored event, so the request's last full block is stored
 * when its last chunk is done. A worker that holds the block the chain ends in has therefore
 * finished that prefill (or holds the same prefix for another request, which makes this request's
 * prefill a cache hit).
 */
import type { ChainEnd } from "../block-index/radix-index.ts";

/** Requests watched per worker slot; the oldest beyond it go unwatched (they end at their settle). */
export const MAX_WATCHED_PER_SLOT = 4096;

interface Watched {
  receiptId: string;
  end: ChainEnd;
}

export class PrefillWatch {
  readonly #bySlot: (Watched[] | undefined)[] = [];
  readonly maxPerSlot: number;

  constructor(maxPerSlot = MAX_WATCHED_PER_SLOT) {
    this.maxPerSlot = maxPerSlot;
  }

  watch(slot: number, receiptId: string, end: ChainEnd): void {
    const list = (this.#bySlot[slot] ??= []);
    list.push({ receiptId, end });
    if (list.length > this.maxPerSlot) list.splice(0, list.length - this.maxPerSlot);
  }

  /**
   * After the worker's stored blocks were applied: the receipts whose chain end the worker now holds
   * (`holds`), dropped from the watch with those no longer `pending` (settled, or marked done by the edge).
   */
  finished(slot: number, holds: (end: ChainEnd) => boolean, pending: (receiptId: string) => boolean): string[] {
    const list = this.#bySlot[slot];
    if (!list || list.length === 0) return [];
    const done: string[] = [];
    let kept = 0;
    for (const w of list) {
      if (!pending(w.receiptId)) continue;
      if (holds(w.end)) done.push(w.receiptId);
      else list[kept++] = w;
    }
    list.length = kept;
    return done;
  }

  /** Requests watched on the slot (settled ones included until the slot's next check). */
  watched(slot: number): number {
    return this.#bySlot[slot]?.length ?? 0;
  }

  /** The worker's load was released (reset, down, removed): nothing of it to watch. */
  clear(slot: number): void {
    this.#bySlot[slot] = undefined;
  }
}
