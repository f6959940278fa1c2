/**
 * Active load per worker: prefill tokens (uncached part of each routed request, until its prefill
 * is done) and decode blocks (request blocks while it is running). Added when a request is routed,
 * released when the edge settles it; entries the edge never settles expire after `staleMs`.
 */

export interface ActiveRequest {
  receiptId: string;
  slot: number;
  prefillTokens: number;
  decodeBlocks: number;
  startedAt: number;
  prefillDone: boolean;
}

export class LoadTracker {
  readonly #active = new Map<string, ActiveRequest>();
  #prefill: number[] = [];
  #decode: number[] = [];
  #count: number[] = [];
  readonly staleMs: number;

  constructor(staleMs = 300_000) {
    this.staleMs = staleMs;
  }

  add(r: ActiveRequest): void {
    this.#active.set(r.receiptId, r);
    this.#prefill[r.slot] = (this.#prefill[r.slot] ?? 0) + r.prefillTokens;
    this.#decode[r.slot] = (this.#decode[r.slot] ?? 0) + r.decodeBlocks;
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
    this.#decode[r.slot] = (this.#decode[r.slot] ?? 0) - r.decodeBlocks;
    this.#count[r.slot] = (this.#count[r.slot] ?? 0) - 1;
    return r;
  }

  releaseWorker(slot: number): number {
    let n = 0;
    for (const r of [...this.#active.values()]) if (r.slot === slot && this.release(r.receiptId)) n++;
    return n;
  }

  expireStale(now: number): number {
    let n = 0;
    for (const r of [...this.#active.values()]) if (now - r.startedAt > this.staleMs && this.release(r.receiptId)) n++;
    return n;
  }

  prefillTokens(slot: number): number {
    return this.#prefill[slot] ?? 0;
  }
  decodeBlocks(slot: number): number {
    return this.#decode[slot] ?? 0;
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
