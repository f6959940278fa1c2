/**
 * Recently routed block chains, per worker, until the worker's own KV events can have arrived.
 * A request's blocks reach the index only after the worker has prefilled it and the relay has
 * forwarded the events; a repeat (or the next turn of a chat) arriving before that would otherwise
 * see no overlap and could land elsewhere. Entries live for `ttlMs` (a few seconds, well above the
 * event path's latency) and are bounded per worker; the index stays the source of truth after that.
 */

interface PendingChain {
  hashes: readonly bigint[];
  expiresAt: number;
}

export class PendingRoutes {
  readonly #bySlot: PendingChain[][] = [];
  readonly ttlMs: number;
  readonly maxPerWorker: number;

  constructor(ttlMs = 5_000, maxPerWorker = 64) {
    this.ttlMs = ttlMs;
    this.maxPerWorker = maxPerWorker;
  }

  add(slot: number, hashes: readonly bigint[], now: number): void {
    if (hashes.length === 0) return;
    const list = (this.#bySlot[slot] ??= []);
    list.push({ hashes, expiresAt: now + this.ttlMs });
    if (list.length > this.maxPerWorker) list.shift();
  }

  /** Longest common leading run between `hashes` and any live chain routed to `slot`. */
  overlap(slot: number, hashes: readonly bigint[], now: number): number {
    const list = this.#bySlot[slot];
    if (!list || list.length === 0) return 0;
    let best = 0;
    let live = 0;
    for (const c of list) {
      if (c.expiresAt <= now) continue;
      list[live++] = c;
      const n = Math.min(c.hashes.length, hashes.length);
      let k = 0;
      while (k < n && c.hashes[k] === hashes[k]) k++;
      if (k > best) best = k;
    }
    list.length = live;
    return best;
  }

  clear(slot: number): void {
    this.#bySlot[slot] = [];
  }
}
