/**
 * Active load per worker: prefill tokens (uncached part of each routed request, until its prefill
 * is done) and decode blocks, added when a request is routed and released when the edge settles
 * it; entries the edge never settles expire after `staleMs`.
 *
 * Decode blocks are counted once per distinct block, as Dynamo does: requests that share a prefix
 * on one worker (the turns of a chat, a repeated system prompt or video) occupy those KV blocks
 * once, so stickiness is not punished as if every request held a private copy. Blocks are told
 * apart by a chained key over the request's local block hashes (position-aware: a block's key
 * depends on everything before it); a partial tail block is private to its request.
 *
 * Key i names blocks [0, i], so a worker's distinct blocks are the union of its requests' chains as
 * prefixes: a request adds (or frees) its length minus its longest common prefix with the worker's
 * other requests. Each worker's requests are kept in lexicographic order of their keys, where that
 * longest prefix is the one shared with a neighbour, and a common prefix is found by binary search
 * (equal keys at i mean equal keys before i). So adding and releasing cost O(log requests × log
 * blocks), and sharedPrefixes that per worker whose requests start with the same block, instead of
 * a table update per block (a 100k-token request is 6 400 blocks). A 53-bit key collision could
 * blur a count, as it could a table of keys.
 *
 * The queued prefill an estimate should see (queuedPrefillTokens) is less than the counted one: a
 * request's tokens count in full until its prefill-done mark or release, but SGLang prefills a long
 * prompt chunk by chunk (chunked_prefill_size, 8 192 tokens on an H100/H200) and the worker's queue
 * drains at its prefill rate all the while. So each worker also keeps a fluid backlog: it drains
 * at the worker's prefill rate (`drainTokensPerSec`) from when it was last changed, a routed
 * request adds its tokens, and the estimate is the smaller of the drained backlog and the counted
 * tokens, so marks and releases still cut it (a reset worker's counted 0 empties it).
 */

export interface ActiveRequest {
  receiptId: string;
  slot: number;
  prefillTokens: number;
  /** Blocks the request occupies in total (full blocks + a partial tail). */
  decodeBlocks: number;
  /**
   * Chained keys of its full blocks (src/blocks/chain-keys.ts); the rest count as private blocks.
   * Kept by reference while the request is active (its place in the worker's order): not changed after add.
   */
  chainKeys?: readonly number[];
  startedAt: number;
  prefillDone: boolean;
}

import { ChainKeyTable } from "../blocks/chain-key-table.ts";

const NO_KEYS: readonly number[] = [];

/** Length of the common prefix of two chains of keys (binary search: equal at i means equal before i). */
function commonPrefix(a: readonly number[], b: readonly number[]): number {
  let lo = 0;
  let hi = Math.min(a.length, b.length);
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (a[mid - 1] === b[mid - 1]) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Lexicographic order of chains of keys (a prefix first). */
function compareChains(a: readonly number[], b: readonly number[]): number {
  const k = commonPrefix(a, b);
  return k === a.length || k === b.length ? a.length - b.length : a[k]! - b[k]!;
}

/** First index of `sorted` whose chain orders after `keys` (equal chains stay in arrival order). */
function upperBound(sorted: readonly ActiveRequest[], keys: readonly number[]): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareChains(sorted[mid]!.chainKeys!, keys) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Longest common prefix of `keys` with the chains either side of index `at` of `sorted`. */
function neighbourPrefix(sorted: readonly ActiveRequest[], at: number, keys: readonly number[]): number {
  const before = at > 0 ? commonPrefix(sorted[at - 1]!.chainKeys!, keys) : 0;
  const after = at < sorted.length ? commonPrefix(sorted[at]!.chainKeys!, keys) : 0;
  return Math.max(before, after);
}

export class LoadTracker {
  readonly #active = new Map<string, ActiveRequest>();
  #prefill: number[] = [];
  /** Per slot: its active requests with chain keys, in lexicographic order of their keys. */
  #chains: (ActiveRequest[] | undefined)[] = [];
  /** First chain key → the slots whose active requests start with it (sharedPrefixes asks only those). */
  readonly #firstKeys = new ChainKeyTable();
  /** Per slot: distinct shared keys held. */
  #unique: number[] = [];
  /** Per slot: blocks not covered by chain keys (partial tails, unhashed parts). */
  #private: number[] = [];
  #count: number[] = [];
  /** Per slot: the fluid prefill backlog (tokens) as of #backlogAt (ms, the tracker's callers' clock). */
  #backlog: number[] = [];
  #backlogAt: number[] = [];
  readonly staleMs: number;
  readonly #drainTokensPerSec: ((slot: number) => number) | null;
  #lastExpiry = -Infinity;

  /** `drainTokensPerSec`: the slot's prefill rate, at which its backlog drains; absent, queued prefill is the counted one. */
  constructor(staleMs = 300_000, drainTokensPerSec: ((slot: number) => number) | null = null) {
    this.staleMs = staleMs;
    this.#drainTokensPerSec = drainTokensPerSec;
  }

  add(r: ActiveRequest): void {
    this.#active.set(r.receiptId, r);
    // Drained to the route's time and cut to what is counted before its tokens join.
    this.#backlog[r.slot] = this.queuedPrefillTokens(r.slot, r.startedAt) + r.prefillTokens;
    this.#backlogAt[r.slot] = Math.max(this.#backlogAt[r.slot] ?? -Infinity, r.startedAt);
    this.#prefill[r.slot] = (this.#prefill[r.slot] ?? 0) + r.prefillTokens;
    const keys = r.chainKeys ?? NO_KEYS;
    if (keys.length > 0) {
      const sorted = (this.#chains[r.slot] ??= []);
      const at = upperBound(sorted, keys);
      this.#unique[r.slot] = (this.#unique[r.slot] ?? 0) + keys.length - neighbourPrefix(sorted, at, keys);
      sorted.splice(at, 0, r);
      this.#firstKeys.inc(keys[0]!, r.slot);
    }
    this.#private[r.slot] = (this.#private[r.slot] ?? 0) + Math.max(0, r.decodeBlocks - keys.length);
    this.#count[r.slot] = (this.#count[r.slot] ?? 0) + 1;
  }

  markPrefillDone(receiptId: string): void {
    const r = this.#active.get(receiptId);
    if (!r || r.prefillDone) return;
    r.prefillDone = true;
    this.#prefill[r.slot] = (this.#prefill[r.slot] ?? 0) - r.prefillTokens;
  }

  release(receiptId: string): ActiveRequest | undefined {
    const r = this.#active.get(receiptId);
    if (!r) return undefined;
    this.#active.delete(receiptId);
    if (!r.prefillDone) this.#prefill[r.slot] = (this.#prefill[r.slot] ?? 0) - r.prefillTokens;
    const keys = r.chainKeys ?? NO_KEYS;
    const sorted = this.#chains[r.slot];
    if (keys.length > 0 && sorted) {
      // Equal chains sit together just before the upper bound; a blurred order (a key collision) falls back to a scan.
      let at = upperBound(sorted, keys) - 1;
      while (at >= 0 && sorted[at] !== r && compareChains(sorted[at]!.chainKeys!, keys) === 0) at--;
      if (at < 0 || sorted[at] !== r) at = sorted.indexOf(r);
      if (at >= 0) {
        sorted.splice(at, 1);
        this.#unique[r.slot] = (this.#unique[r.slot] ?? 0) - (keys.length - neighbourPrefix(sorted, at, keys));
        this.#firstKeys.dec(keys[0]!, r.slot);
      }
    }
    this.#private[r.slot] = (this.#private[r.slot] ?? 0) - Math.max(0, r.decodeBlocks - keys.length);
    this.#count[r.slot] = (this.#count[r.slot] ?? 0) - 1;
    return r;
  }

  releaseWorker(slot: number): number {
    let n = 0;
    for (const r of [...this.#active.values()]) if (r.slot === slot && this.release(r.receiptId)) n++;
    return n;
  }

  /**
   * Releases requests the edge never settled. Scans everything, so it runs at most once a second
   * however many decisions call it.
   */
  expireStale(now: number): number {
    if (now - this.#lastExpiry < 1_000 && now >= this.#lastExpiry) return 0;
    this.#lastExpiry = now;
    let n = 0;
    for (const r of [...this.#active.values()]) if (now - r.startedAt > this.staleMs && this.release(r.receiptId)) n++;
    return n;
  }

  /** Uncached tokens of the worker's requests not marked done or released: its prefill as counted. */
  prefillTokens(slot: number): number {
    return this.#prefill[slot] ?? 0;
  }
  /**
   * The worker's prefill still queued at `now` by the estimate: its backlog drained at its prefill
   * rate since it last changed, at most the counted tokens. A clock that steps back drains nothing.
   */
  queuedPrefillTokens(slot: number, now: number): number {
    const counted = Math.max(0, this.#prefill[slot] ?? 0);
    const backlog = this.#backlog[slot];
    if (backlog === undefined || this.#drainTokensPerSec === null) return counted;
    const elapsedMs = Math.max(0, now - (this.#backlogAt[slot] ?? now));
    return Math.min(counted, Math.max(0, backlog - (this.#drainTokensPerSec(slot) * elapsedMs) / 1000));
  }
  /** Distinct KV blocks held by the worker's active requests. */
  decodeBlocks(slot: number): number {
    return (this.#unique[slot] ?? 0) + (this.#private[slot] ?? 0);
  }
  /**
   * For every worker whose active requests hold the request's first block: how many leading blocks
   * of the request they already hold (its longest common prefix with a neighbour in the worker's
   * order), without walking the chain.
   */
  sharedPrefixes(chainKeys: readonly number[]): Map<number, number> {
    const out = new Map<number, number>();
    if (chainKeys.length === 0) return out;
    this.#firstKeys.eachHolder(chainKeys[0]!, (slot) => {
      const sorted = this.#chains[slot]!;
      const held = neighbourPrefix(sorted, upperBound(sorted, chainKeys), chainKeys);
      if (held > 0) out.set(slot, held);
    });
    return out;
  }
  activeRequests(slot: number): number {
    return this.#count[slot] ?? 0;
  }
  get size(): number {
    return this.#active.size;
  }
  get(receiptId: string): ActiveRequest | undefined {
    return this.#active.get(receiptId);
  }
}
