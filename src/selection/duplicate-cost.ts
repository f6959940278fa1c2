/**
 * Duplication cost, a term of cost "ttft" (ttft-cost.ts): prefilling on worker w a prefix that
 * another worker already holds makes a second copy of it. The request's own TTFT is what the
 * estimate prices; the copy's cost falls on later requests: a full cache makes room for each new
 * token by evicting a token of some other prefix (LRU), which the next request needing it prefills
 * again, and a conversation moved off its holder leaves its history there to age out. Without this
 * term a greedy TTFT estimate moves a request whenever the holder's queue costs more than the prefill
 * the cache saves, and under bursts it copies popular documents and running conversations onto every
 * worker, so the fleet caches less distinct content than it holds room for.
 *
 *   duplicateMs(w) = weight × (tokens of the request held by another candidate, not by w) / w's prefill rate
 *
 * counted only on a worker whose cache is full (Candidate.cacheFull, block-views.ts: it has evicted
 * since it started or last cleared, or the blocks indexed for it reach 0.9 of its hello's
 * kvCapacityTokens): a cache with room holds the copy without displacing anything, so
 * while caches fill (and on traffic whose working set fits, such as agent loops on a large fleet) the
 * term is off and load alone decides. "Held" is the GPU overlap plus host-memory blocks (a shared
 * storage backend is everyone's: loading from it copies nothing another worker could serve better).
 * With weight 1 a move must save more of the holder's queue than twice the prefill it repeats; 0
 * turns the term off.
 *
 * HiCache: on a worker whose GPU evictions only demote blocks to its host tier (Candidate
 * demotesToHost: BlockViews.demotesToHost), a displaced token is not lost: the next request needing
 * it loads it back (tier-cost.ts). There the term prices the displaced tokens at their load-back
 * (~32 ms for 8k tokens at 37 GB/s, against 800 ms of prefill at 10k tokens/s), until the host
 * tier evicts too, from when every token stored pushes one out of host memory: prefill again.
 *
 * Bound: the term on w is at most max(0, targetMs − w's own estimate). A request then stays on a
 * holder only while the holder's estimate is at most max(targetMs, w's estimate): the term trades
 * later requests' hits for this one's wait only up to a TTFT target, never past it (unbounded,
 * weight 1 lets a holder queue up to twice a document's prefill: a 240k-token prompt at 10k
 * tokens/s, ~48 s). Once w's own estimate passes the target the copy is no worse than waiting, so
 * the term is off. The default (30 s) is above twice the longest document's prefill in the routing
 * suite (120k tokens: 12 s, so its questions may still wait up to ~24 s on the holder), where
 * holding still pays: on docqa seed 4 it binds nowhere (goodput 1× 1.18, 0.5× 0.98 req/s, as
 * unbounded), while 10 s gave up most of the term's gain (1.15, 0.92).
 */
import type { Candidate } from "./selection.ts";
import { hostLoadBackMs, type TierCostParams } from "./tier-cost.ts";

export interface DuplicateCostParams {
  /** Cost of one duplicated token in units of its own prefill time; 0: off. */
  weight: number;
  /** TTFT target (ms): the term on a worker never lifts its estimate past it (see the bound above). */
  targetMs: number;
}

export const DEFAULT_DUPLICATE_COST: Readonly<DuplicateCostParams> = { weight: 1, targetMs: 30_000 };

const heldBlocks = (c: Candidate) => c.overlapBlocks + (c.hostBlocks ?? 0);

/** Per candidate, the request's tokens that another candidate holds and it does not (at most `isl`), when its cache is full; else 0. */
export function duplicateTokens(candidates: readonly Candidate[], isl: number, blockSize: number): number[] {
  // The two largest holdings: each candidate is compared with the best of the others.
  let first = 0;
  let second = 0;
  for (const c of candidates) {
    const h = heldBlocks(c);
    if (h > first) {
      second = first;
      first = h;
    } else if (h > second) second = h;
  }
  return candidates.map((c) => {
    if (!c.cacheFull) return 0;
    const own = heldBlocks(c);
    const other = own === first ? second : first;
    return Math.max(0, Math.min(isl, other * blockSize) - Math.min(isl, own * blockSize));
  });
}

/**
 * What the `tokens` a copy displaces cost the requests that need them again, ms: their prefill at
 * `tokensPerSec`, or their load-back where the worker's GPU evictions only demote (`demotedTo`: the
 * load-back pricing; null: they are lost).
 */
export function displacedMs(tokens: number, tokensPerSec: number, demotedTo: TierCostParams | null): number {
  if (tokens <= 0) return 0;
  // Tokens as one-token blocks: a prompt's last block may be partial.
  return demotedTo ? hostLoadBackMs(demotedTo, tokens, 1) : (tokens * 1000) / tokensPerSec;
}

/** The term for a copy displacing `displaced` ms of others' cache (displacedMs) on a worker whose estimate without it is `estimateMs`, ms. */
export function duplicateCostMs(params: DuplicateCostParams, displaced: number, estimateMs: number): number {
  if (params.weight <= 0 || displaced <= 0) return 0;
  return Math.min(params.weight * displaced, Math.max(0, params.targetMs - estimateMs));
}
