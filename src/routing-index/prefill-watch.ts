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
 *
 * A watched request whose block cannot be seen is given up on, its prefill ended (endUnseenPrefills):
 * the oldest beyond the per-slot bound, those of a worker whose view stops
 * following its stored blocks (`release`), and any past its deadline (`overdue`): otherwise it would
 * count as queued prefill for its whole decode.
 */
import type { ChainEnd } from "../block-index/radix-index.ts";
import type { LoadSync } from "./load-sync.ts";

/** Requests watched per worker slot; beyond it the oldest are given up on (their prefill ended). */
export const MAX_WATCHED_PER_SLOT = 4096;
/**
 * A watched prefill is given up on at route time + WATCH_DEADLINE_FACTOR × its expected end + WATCH_DEADLINE_SLACK_MS
 * (watchDeadline). The expected end is a rate estimate (the worker's reported prefill rate or the
 * pool's default, not measured), so the bound is wide: ending a live prefill early makes its
 * worker look idle too soon, and is worse than counting a lost one a little longer.
 */
export const WATCH_DEADLINE_FACTOR = 4;
export const WATCH_DEADLINE_SLACK_MS = 10_000;

/**
 * When to give up on a prefill routed at `now` behind `queuedTokens` of the worker's counted
 * prefill, with `tokens` of its own to prefill at `tokensPerSec`.
 */
export function watchDeadline(now: number, queuedTokens: number, tokens: number, tokensPerSec: number): number {
  const expectedMs = ((Math.max(0, queuedTokens) + tokens) / tokensPerSec) * 1000;
  return now + WATCH_DEADLINE_FACTOR * expectedMs + WATCH_DEADLINE_SLACK_MS;
}

/**
 * Watched prefills whose end the index will not see (given up on: the slot's bound, a deadline, a
 * view that stopped following its worker): they stop counting as queued prefill now, on every shard,
 * as the edge's markPrefillDone does (settled ones are skipped). Not a measured prefill end, so no
 * load-back calibration sample (Router.prefillDone) comes of it.
 */
export function endUnseenPrefills(loadSync: Pick<LoadSync, "markPrefillDone">, receiptIds: readonly string[]): void {
  for (const id of receiptIds) loadSync.markPrefillDone(id);
}

interface Watched {
  receiptId: string;
  end: ChainEnd;
  deadline: number;
}

export class PrefillWatch {
  readonly #bySlot: (Watched[] | undefined)[] = [];
  readonly maxPerSlot: number;
  /** No watched request's deadline is earlier (entries dropped since may leave it early: a sweep then finds none). */
  #nextDeadline = Infinity;

  constructor(maxPerSlot = MAX_WATCHED_PER_SLOT) {
    this.maxPerSlot = maxPerSlot;
  }

  /** Watches a request; returns the receipts given up on for the slot's bound (the oldest). */
  watch(slot: number, receiptId: string, end: ChainEnd, deadline: number): string[] {
    const list = (this.#bySlot[slot] ??= []);
    list.push({ receiptId, end, deadline });
    if (deadline < this.#nextDeadline) this.#nextDeadline = deadline;
    if (list.length <= this.maxPerSlot) return [];
    return list.splice(0, list.length - this.maxPerSlot).map((w) => w.receiptId);
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

  /**
   * The receipts past their deadline, on every slot, dropped from the watch (settled ones among
   * them too: the caller's release skips those). A look at one number while none is due.
   */
  overdue(now: number): string[] {
    if (now < this.#nextDeadline) return [];
    const due: string[] = [];
    let next = Infinity;
    for (const list of this.#bySlot) {
      if (!list) continue;
      let kept = 0;
      for (const w of list) {
        if (w.deadline <= now) due.push(w.receiptId);
        else {
          list[kept++] = w;
          if (w.deadline < next) next = w.deadline;
        }
      }
      list.length = kept;
    }
    this.#nextDeadline = next;
    return due;
  }

  /** Every receipt watched on the slot, dropped from the watch: the worker's stored blocks can no longer be followed. */
  release(slot: number): string[] {
    const list = this.#bySlot[slot];
    this.#bySlot[slot] = undefined;
    return list ? list.map((w) => w.receiptId) : [];
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
