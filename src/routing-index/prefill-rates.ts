/**
 * The prefill rate the index prices and drains a worker at, one rule for the cost (ttft-cost.ts),
 * the queued prefill's drain (LoadTracker) and the prefill watch's deadline: the rate its relay's
 * hello reports (`--prefill-tokens-per-sec`), else the rate learned from its own prefills
 * (src/load/prefill-rate-learner.ts), else the pool's default (KVEDGE_REGIONS
 * defaultPrefillTokensPerSec, DEFAULT_TTFT_PARAMS).
 *
 * Learning: a routed request that qualifies (enough tokens, the worker's counted prefill empty or
 * small) is kept until the first signal that its prefill ended (the edge's mark at the stream's first
 * output, or the worker's stored blocks: Router.prefillDone); route → signal, less the round trip
 * the estimate knows (edge ↔ worker from the regions table), is one sample. The mark's own wait in
 * the edge's receipt queue is taken off by its ageMs before it gets here. What stays in a sample
 * unmodelled (index → edge with the route answer, edge → index with the mark; the relay's flush for
 * a stored-blocks signal) is a few ms, which lowers the learned rate by that share of the prefill:
 * minTokens keeps it small. Requests with host or storage blocks (their load-back) and PD pairs (the
 * decode side's first token) are not sampled.
 */
import { PrefillRateLearner } from "../load/prefill-rate-learner.ts";

/** Requests kept waiting for their signal at most (the oldest is dropped beyond). */
const MAX_PENDING_SAMPLES = 10_000;

interface PendingSample {
  slot: number;
  life: number;
  at: number;
  tokens: number;
  fixedMs: number;
}

export class PrefillRates {
  readonly #defaultRate: number;
  readonly #learner: PrefillRateLearner | null;
  readonly #pending = new Map<string, PendingSample>();

  /** `learner`: null = no learning (the hello's rate, else the default). */
  constructor(defaultTokensPerSec: number, learner: PrefillRateLearner | null) {
    this.#defaultRate = defaultTokensPerSec;
    this.#learner = learner;
  }

  /** The rate (tokens/s) a worker is priced and drained at. */
  of(w: { slot: number; prefillTokensPerSec?: number | null }): number {
    return w.prefillTokensPerSec ?? this.learned(w.slot) ?? this.#defaultRate;
  }

  /** The rate learned for the slot's worker; null while learning is off or has too few samples. */
  learned(slot: number): number | null {
    return this.#learner?.rate(slot) ?? null;
  }

  /**
   * A request routed at `at` with `tokens` uncached behind `countedAhead` of the worker's counted
   * prefill; `fixedMs`: the known part of route → signal that is not prefill (the edge ↔ worker round trip).
   */
  routed(receiptId: string, slot: number, at: number, tokens: number, countedAhead: number, fixedMs: number): void {
    const learner = this.#learner;
    if (!learner || !learner.qualifies(tokens, countedAhead)) return;
    this.#pending.set(receiptId, { slot, life: learner.life(slot), at, tokens: tokens + countedAhead, fixedMs });
    if (this.#pending.size > MAX_PENDING_SAMPLES) this.#pending.delete(this.#pending.keys().next().value!);
  }

  /** The first signal that the request's prefill ended, dated `doneAt` on the index's clock; later ones find nothing. */
  prefillDone(receiptId: string, doneAt: number): void {
    const s = this.#pending.get(receiptId);
    if (!s) return;
    this.#pending.delete(receiptId);
    this.#learner!.sample(s.slot, s.life, s.tokens, doneAt - s.at - s.fixedMs);
  }

  /** The request settled (or was given up on) without a signal: no sample. */
  forget(receiptId: string): void {
    this.#pending.delete(receiptId);
  }

  /** The slot's worker started a new life, went down or was removed: what was learned of it is void. */
  reset(slot: number): void {
    this.#learner?.reset(slot);
  }
}
