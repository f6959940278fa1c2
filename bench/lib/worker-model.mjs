// The simulated worker's side of a request in the bench simulators (one model, shared): admission
// against the paged radix cache with a KV capacity (match, pin, evict, reserve), a single prefill
// lane, the prompt cached after prefill, and prompt + output cached at finish (as SGLang does).
import { prefillMs, decodeStepMs } from "../../services/sglang-sim/timing.ts";

/**
 * Admits `req` on worker state `st` at time `now`. Returns the match, the reserved tokens, the
 * uncached prompt tokens and when prefill completes; updates the lane, reservation and active count.
 */
export function admit(st, req, now, capacityTokens, timing) {
  const cache = st.cache;
  const ids = req.tokens;
  const match = cache.matchPrefix(ids.slice(0, ids.length - 1));
  cache.incLockRef(match.node);
  const need = ids.length - match.length + req.output.length;
  const free = capacityTokens - cache.totalTokens - st.reserved;
  if (need > free) cache.evict(need - free);
  st.reserved += need;
  const uncached = ids.length - match.length;
  const prefilledAt = Math.max(now, st.laneFree) + prefillMs(timing, uncached);
  st.laneFree = prefilledAt;
  st.active++;
  return { match, need, uncached, prefilledAt };
}

/** Prefill done: the prompt's pages enter the cache. `r` carries node, cached and reservedNeed. Returns when decoding ends. */
export function prefilled(st, r, req, now, pageSize, timing) {
  const { node } = st.cache.insert(req.tokens);
  st.cache.incLockRef(node);
  st.cache.decLockRef(r.node);
  r.node = node;
  const moved = req.tokens.length - (req.tokens.length % pageSize) - r.cached;
  const m = Math.min(r.reservedNeed, Math.max(0, moved));
  st.reserved -= m;
  r.reservedNeed -= m;
  return now + req.output.length * decodeStepMs(timing, st.active);
}

/** Finish: prompt + output (minus the last token) are cached; reservations and pins released. */
export function finished(st, r, req) {
  const { node } = st.cache.insert(req.tokens.concat(req.output.slice(0, req.output.length - 1)));
  st.cache.incLockRef(node);
  st.cache.decLockRef(r.node);
  st.cache.decLockRef(node);
  st.reserved -= r.reservedNeed;
  st.active--;
}
