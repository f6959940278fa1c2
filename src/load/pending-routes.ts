/**
 * Recently routed block chains, per worker, until the worker's own KV events can have arrived.
 * A request's blocks reach the index only after the worker has prefilled it and the relay has
 * forwarded the events; a repeat (or the next turn of a chat) arriving before that would otherwise
 * see no overlap and could land elsewhere. Entries live for `ttlMs` (a few seconds, well above the
 * event path's latency) and are bounded per worker; the index stays the source of truth after that.
 * Chains are bucketed by their first block, so one lookup finds every chain that can overlap.
 */
import type { LocalHashes } from "../blocks/block-hash.ts";

interface PendingChain {
  slot: number;
  hashes: LocalHashes;
  expiresAt: number;
}

export class PendingRoutes {
  readonly #byFirst = new Map<bigint, PendingChain[]>();
  /** Per slot, insertion order (for the per-worker bound and expiry). */
  readonly #order: (PendingChain[] | undefined)[] = [];
  readonly ttlMs: number;
  readonly maxPerWorker: number;

  constructor(ttlMs = 5_000, maxPerWorker = 256) {
    this.ttlMs = ttlMs;
    this.maxPerWorker = maxPerWorker;
  }

  add(slot: number, hashes: LocalHashes, now: number): void {
    if (hashes.length === 0) return;
    const chain: PendingChain = { slot, hashes, expiresAt: now + this.ttlMs };
    const first = hashes[0]!;
    const bucket = this.#byFirst.get(first);
    if (bucket) {
      // A live chain of this worker that the new one repeats or extends adds nothing: drop it, so
      // repeats and the turns of one chat keep a bucket short instead of growing it per request.
      for (let i = bucket.length - 1; i >= 0; i--) {
        const c = bucket[i]!;
        if (c.slot === slot && c.hashes.length <= hashes.length && isPrefix(c.hashes, hashes)) this.#forget(c);
      }
    }
    // (#forget removes a bucket it empties, so look it up again.)
    const live = this.#byFirst.get(first);
    if (live) live.push(chain);
    else this.#byFirst.set(first, [chain]);
    const order = (this.#order[slot] ??= []);
    order.push(chain);
    while (order.length > this.maxPerWorker || (order.length > 0 && order[0]!.expiresAt <= now)) this.#drop(order.shift()!);
  }

  /** Drops a chain from its bucket and from its worker's order list. */
  #forget(c: PendingChain): void {
    this.#drop(c);
    const order = this.#order[c.slot];
    const i = order ? order.indexOf(c) : -1;
    if (i >= 0) order!.splice(i, 1);
  }

  #drop(c: PendingChain): void {
    const first = c.hashes[0]!;
    const bucket = this.#byFirst.get(first);
    if (!bucket) return;
    const i = bucket.indexOf(c);
    if (i >= 0) bucket.splice(i, 1);
    if (bucket.length === 0) this.#byFirst.delete(first);
  }

  /** Per worker slot: the longest common leading run between `hashes` and its live chains. */
  overlaps(hashes: LocalHashes, now: number): Map<number, number> {
    const out = new Map<number, number>();
    if (hashes.length === 0) return out;
    const bucket = this.#byFirst.get(hashes[0]!);
    if (!bucket) return out;
    for (const c of bucket) {
      if (c.expiresAt <= now) continue;
      const n = Math.min(c.hashes.length, hashes.length);
      const best = out.get(c.slot) ?? 0;
      if (n <= best) continue; // this chain cannot beat what the worker already has
      let k = 1; // the bucket shares the first block
      while (k < n && c.hashes[k] === hashes[k]) k++;
      if (k > best) out.set(c.slot, k);
    }
    return out;
  }

  /** Longest common leading run between `hashes` and any live chain routed to `slot`. */
  overlap(slot: number, hashes: LocalHashes, now: number): number {
    return this.overlaps(hashes, now).get(slot) ?? 0;
  }

  /** Chains held (live or not yet dropped). */
  get size(): number {
    let n = 0;
    for (const order of this.#order) n += order?.length ?? 0;
    return n;
  }

  clear(slot: number): void {
    for (const c of this.#order[slot] ?? []) this.#drop(c);
    this.#order[slot] = undefined;
  }
}

function isPrefix(a: LocalHashes, b: LocalHashes): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
