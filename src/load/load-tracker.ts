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
  /** Chained keys of its full blocks (src/blocks/chain-keys.ts); the rest count as private blocks. */
  chainKeys?: readonly number[];
  startedAt: number;
  prefillDone: boolean;
}

import { ChainKeyTable } from "../blocks/chain-key-table.ts";

export class LoadTracker {
  readonly #active = new Map<string, ActiveRequest>();
  #prefill: number[] = [];
  /** Shared block key → (slot → number of active requests on that worker holding it). */
  readonly #keys = new ChainKeyTable();
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
    for (const k of keys) if (this.#keys.inc(k, r.slot)) added++;
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
    for (const k of keys) if (this.#keys.dec(k, r.slot)) removed++;
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
    if (chainKeys.length === 0) return out;
    let alive = this.#keys.holders(chainKeys[0]!);
    let depth = 1;
    for (; depth < chainKeys.length && alive.length > 0; depth++) {
      const k = chainKeys[depth]!;
      const next: number[] = [];
      let present = true;
      for (const s of alive) {
        const h = this.#keys.holds(k, s);
        if (h === null) {
          present = false; // nobody holds it: every live worker's shared prefix ends here
          break;
        }
        if (h) next.push(s);
        else out.set(s, depth);
      }
      if (!present) break;
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
