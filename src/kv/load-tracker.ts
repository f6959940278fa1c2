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
 */

export interface ActiveRequest {
  receiptId: string;
  slot: number;
  prefillTokens: number;
  /** Blocks the request occupies in total (full blocks + a partial tail). */
  decodeBlocks: number;
  /** Chained keys of its full blocks (see `chainKeysOf`); the rest count as private blocks. */
  chainKeys?: readonly number[];
  startedAt: number;
  prefillDone: boolean;
}

const hashSlot = new BigUint64Array(1);
const hashWords = new Uint32Array(hashSlot.buffer);

/**
 * Position-aware 53-bit keys for a chain of local block hashes: key_i mixes key_{i-1} with block
 * i's hash. Collisions only blur a load estimate, never a routing decision on cache contents.
 */
export function chainKeysOf(localHashes: readonly bigint[] | BigUint64Array): number[] {
  const out = new Array<number>(localHashes.length);
  let a = 0x9e3779b9 | 0;
  let b = 0x85ebca6b | 0;
  for (let i = 0; i < localHashes.length; i++) {
    // The two 32-bit words through a typed-array view: no BigInt arithmetic per block.
    hashSlot[0] = localHashes[i]!;
    const lo = hashWords[0]! | 0;
    const hi = hashWords[1]! | 0;
    a = Math.imul(a ^ lo, 0x01000193) ^ Math.imul(b, 0x5bd1e995);
    b = Math.imul(b ^ hi, 0x27d4eb2d) ^ (a >>> 15);
    out[i] = (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff);
  }
  return out;
}

/**
 * Who holds a shared block key: most keys are held by one worker, so that case is a plain number
 * (slot × HOLDER_SPAN + count) instead of a Map per key (a 32k-token request has ~2 000 keys).
 */
type Holders = number | Map<number, number>;
const HOLDER_SPAN = 2 ** 21;

function holds(h: Holders, slot: number): boolean {
  return typeof h === "number" ? Math.floor(h / HOLDER_SPAN) === slot : h.has(slot);
}

export class LoadTracker {
  readonly #active = new Map<string, ActiveRequest>();
  #prefill: number[] = [];
  /** Shared block key → (slot → number of active requests on that worker holding it). */
  readonly #keys = new Map<number, Holders>();
  /** Per slot: distinct shared keys held. */
  #unique: number[] = [];
  /** Per slot: blocks not covered by chain keys (partial tails, unhashed parts). */
  #private: number[] = [];
  #count: number[] = [];
  readonly staleMs: number;
  #lastExpiry = -Infinity;

  constructor(staleMs = 300_000) {
    this.staleMs = staleMs;
  }

  add(r: ActiveRequest): void {
    this.#active.set(r.receiptId, r);
    this.#prefill[r.slot] = (this.#prefill[r.slot] ?? 0) + r.prefillTokens;
    const keys = r.chainKeys ?? [];
    let added = 0;
    for (const k of keys) {
      const h = this.#keys.get(k);
      if (h === undefined) {
        this.#keys.set(k, r.slot * HOLDER_SPAN + 1);
        added++;
      } else if (typeof h === "number") {
        const holder = Math.floor(h / HOLDER_SPAN);
        if (holder === r.slot) this.#keys.set(k, h + 1);
        else {
          this.#keys.set(k, new Map([[holder, h % HOLDER_SPAN], [r.slot, 1]]));
          added++;
        }
      } else {
        const c = h.get(r.slot) ?? 0;
        if (c === 0) added++;
        h.set(r.slot, c + 1);
      }
    }
    this.#unique[r.slot] = (this.#unique[r.slot] ?? 0) + added;
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
    const keys = r.chainKeys ?? [];
    let removed = 0;
    for (const k of keys) {
      const h = this.#keys.get(k);
      if (h === undefined) continue;
      if (typeof h === "number") {
        if (Math.floor(h / HOLDER_SPAN) !== r.slot) continue;
        if (h % HOLDER_SPAN > 1) this.#keys.set(k, h - 1);
        else {
          this.#keys.delete(k);
          removed++;
        }
        continue;
      }
      const c = (h.get(r.slot) ?? 0) - 1;
      if (c > 0) {
        h.set(r.slot, c);
        continue;
      }
      if (h.delete(r.slot)) removed++;
      if (h.size === 1) {
        for (const [holder, count] of h) this.#keys.set(k, holder * HOLDER_SPAN + count);
      } else if (h.size === 0) this.#keys.delete(k);
    }
    this.#unique[r.slot] = (this.#unique[r.slot] ?? 0) - removed;
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

  prefillTokens(slot: number): number {
    return this.#prefill[slot] ?? 0;
  }
  /** Distinct KV blocks held by the worker's active requests. */
  decodeBlocks(slot: number): number {
    return (this.#unique[slot] ?? 0) + (this.#private[slot] ?? 0);
  }
  /**
   * For every worker whose active requests hold the request's first block: how many leading blocks
   * of the request they already hold. One walk down the chain for all workers together, so the
   * cost follows the few workers that share a prefix, not the pool size.
   */
  sharedPrefixes(chainKeys: readonly number[]): Map<number, number> {
    const out = new Map<number, number>();
    const first = chainKeys.length > 0 ? this.#keys.get(chainKeys[0]!) : undefined;
    if (first === undefined) return out;
    let alive = typeof first === "number" ? [Math.floor(first / HOLDER_SPAN)] : [...first.keys()];
    let depth = 1;
    for (; depth < chainKeys.length && alive.length > 0; depth++) {
      const h = this.#keys.get(chainKeys[depth]!);
      if (h === undefined) break;
      const next: number[] = [];
      for (const s of alive) {
        if (holds(h, s)) next.push(s);
        else out.set(s, depth);
      }
      alive = next;
    }
    for (const s of alive) out.set(s, depth);
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
