/**
 * Recurring load, a term of cost "ttft" (ttft-cost.ts): the prefill work that the conversations
 * living on a worker keep bringing back. A request that takes most of its prompt from the worker's
 * cache (a chat's next turn, an agent's next step) is a continuation: its conversation stays where
 * its prefix is, so its next turns come to that worker too, whatever that worker's queue is by then.
 * The in-flight load the estimate reads cannot see them between turns (a tool call, a user thinking),
 * so without this term a worker holding several busy conversations looks idle and keeps winning new
 * ones (a shared system prompt tips every tie its way), and its conversations cannot leave later
 * without prefilling their whole history again.
 *
 * Per worker, an exponentially decayed sum (time constant `tauMs`) of its continuations' uncached
 * tokens: in steady state their arrival rate × tau. Over the worker's prefill rate and tau it is the
 * share of the worker's prefill time those conversations take; the cost adds `horizonMs` × that share.
 * First turns and one-off prompts (a new question on a cached document) are not continuations: they
 * promise nothing about the future and are already counted while in flight.
 */

export interface RecurringLoadParams {
  /** What a worker whose continuations take all of its prefill time adds to its cost, ms; 0: off. */
  horizonMs: number;
  /** Time constant of the decayed sum, ms. */
  tauMs: number;
  /** A request is a continuation when at least this share of its prompt was cached on the worker. */
  continuationShare: number;
}

export const DEFAULT_RECURRING_LOAD: Readonly<RecurringLoadParams> = { horizonMs: 1_000, tauMs: 10_000, continuationShare: 0.5 };

export class RecurringLoad {
  readonly #p: RecurringLoadParams;
  /** Per slot: decayed uncached tokens of continuations as of `#at[slot]`. */
  readonly #tokens: number[] = [];
  readonly #at: number[] = [];

  constructor(params: RecurringLoadParams = DEFAULT_RECURRING_LOAD) {
    this.#p = params;
  }

  /** A request was routed to `slot` with `cachedTokens` of its `isl` prompt tokens cached there. */
  record(slot: number, isl: number, cachedTokens: number, now: number): void {
    if (this.#p.horizonMs <= 0 || isl <= 0 || cachedTokens < this.#p.continuationShare * isl) return;
    this.#tokens[slot] = this.tokens(slot, now) + Math.max(0, isl - cachedTokens);
    this.#at[slot] = now;
  }

  /** The slot's decayed continuation tokens at `now`. */
  tokens(slot: number, now: number): number {
    const v = this.#tokens[slot] ?? 0;
    if (v === 0) return 0;
    return v * Math.exp(-Math.max(0, now - this.#at[slot]!) / this.#p.tauMs);
  }

  /** The cost term for the slot, ms, at a prefill rate of `tokensPerSec`. */
  costMs(slot: number, now: number, tokensPerSec: number): number {
    if (this.#p.horizonMs <= 0) return 0;
    const busyMs = (this.tokens(slot, now) / tokensPerSec) * 1000;
    return (this.#p.horizonMs * busyMs) / this.#p.tauMs;
  }
}
