/**
 * The approximate index as it was before one expiry entry per route (src/block-index/approx-index.ts
 * at e83dddc): one heap entry, one String engine hash and one map entry per (worker, block) a route
 * covers, and a prune that drops every entry past the target in one call. Kept as the reference the
 * differential tests and the paired benchmark compare against; the heap breaks ties in expiry
 * arbitrarily, so its prunes are only compared by rule.
 */
import { ApproxConfigSchema, type ApproxConfig } from "../../../src/block-index/approx-index.ts";
import { RadixIndex, type StoredBlock } from "../../../src/block-index/radix-index.ts";
import type { LocalHashes } from "../../../src/blocks/block-hash.ts";

interface HeapEntry {
  at: number;
  slot: number;
  id: number;
}

const TWO21 = 2097152;

function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x27d4eb2f, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b) ^ c;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}

export class OracleApproxIndex {
  readonly config: ApproxConfig;
  readonly #tree = new RadixIndex();
  /** Per worker slot: block id (path hash) → expiry time. */
  readonly #expiry: (Map<number, number> | undefined)[] = [];
  #heap: HeapEntry[] = [];
  #count = 0;
  #scores = new Int32Array(64);
  readonly #words = new Uint32Array(2);
  readonly #big = new BigUint64Array(this.#words.buffer);
  /** Entries dropped by TTL and by the size bound (metrics, tests). */
  expired = 0;
  pruned = 0;

  constructor(config: Partial<ApproxConfig> = {}) {
    this.config = ApproxConfigSchema.parse(config);
  }

  /** Assumed (worker, block) entries currently held. */
  get size(): number {
    return this.#count;
  }

  workerBlockCount(slot: number): number {
    return this.#expiry[slot]?.size ?? 0;
  }

  /** Block ids along the path of `localHashes` (53-bit, exact in a double). */
  pathIds(localHashes: LocalHashes): number[] {
    const out = new Array<number>(localHashes.length);
    let a = 0x3c6ef372;
    let b = 0x1b873593;
    for (let i = 0; i < localHashes.length; i++) {
      this.#big[0] = localHashes[i]!;
      const lo = this.#words[0]! | 0;
      const hi = this.#words[1]! | 0;
      a = mix(a, lo, hi);
      b = mix(b ^ 0x5bd1e995, hi, lo);
      out[i] = (a >>> 0) * TWO21 + (b >>> 11);
    }
    return out;
  }

  /** The request was routed to `slot`: assume its blocks cached there, refreshing their TTL. */
  record(slot: number, localHashes: LocalHashes, now: number): void {
    if (localHashes.length === 0) return;
    this.#tree.ensureWorker(slot);
    if (this.#scores.length <= slot) this.#scores = new Int32Array(Math.max(slot + 1, this.#scores.length * 2));
    const ids = this.pathIds(localHashes);
    const blocks: StoredBlock[] = ids.map((id, i) => ({ engineHash: String(id), localHash: localHashes[i]! }));
    this.#tree.applyStored(slot, null, blocks);
    const map = (this.#expiry[slot] ??= new Map());
    const at = now + this.config.ttlMs;
    for (const id of ids) {
      if (!map.has(id)) this.#count++;
      map.set(id, at);
      this.#heap.push({ at, slot, id });
      siftUp(this.#heap, this.#heap.length - 1);
    }
    if (this.#count > this.config.maxBlocks) this.#prune(Math.floor(this.config.maxBlocks * this.config.pruneTargetRatio));
    // Refreshes leave stale heap entries behind; rebuild once they dominate.
    if (this.#heap.length > 2 * this.#count + 1024) this.#rebuildHeap();
  }

  /** Drops every entry that expired by `now`. */
  expire(now: number): number {
    let n = 0;
    const heap = this.#heap;
    while (heap.length > 0 && heap[0]!.at <= now) {
      const e = popMin(heap);
      if (this.#dropIfLive(e)) n++;
    }
    this.expired += n;
    return n;
  }

  /** Expires, then computes overlaps for `localHashes`; read them with overlapOf(slot). */
  match(localHashes: LocalHashes, now: number): void {
    this.expire(now);
    // Nothing assumed: every overlap is 0 without walking the request's blocks.
    if (this.#count === 0) this.#scores.fill(0);
    else this.#tree.findMatches(localHashes, this.#scores);
  }

  /** Overlap of `slot` from the last match(). */
  overlapOf(slot: number): number {
    return this.#scores[slot] ?? 0;
  }

  /** Forgets everything assumed for a worker (restart, down, removal). */
  clear(slot: number): void {
    const map = this.#expiry[slot];
    if (map) this.#count -= map.size;
    this.#expiry[slot] = undefined;
    if (this.#tree.hasWorker(slot)) this.#tree.clearWorker(slot);
    if (slot < this.#scores.length) this.#scores[slot] = 0;
  }

  #dropIfLive(e: HeapEntry): boolean {
    const map = this.#expiry[e.slot];
    if (!map || map.get(e.id) !== e.at) return false;
    map.delete(e.id);
    this.#count--;
    this.#tree.applyRemoved(e.slot, [String(e.id)]);
    return true;
  }

  #prune(target: number): void {
    const heap = this.#heap;
    let n = 0;
    while (this.#count > target && heap.length > 0) if (this.#dropIfLive(popMin(heap))) n++;
    this.pruned += n;
  }

  #rebuildHeap(): void {
    const heap: HeapEntry[] = [];
    this.#expiry.forEach((map, slot) => {
      if (map) for (const [id, at] of map) heap.push({ at, slot, id });
    });
    for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(heap, i);
    this.#heap = heap;
  }
}

function less(a: HeapEntry, b: HeapEntry): boolean {
  return a.at < b.at;
}

function siftUp(h: HeapEntry[], i: number): void {
  const x = h[i]!;
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (!less(x, h[p]!)) break;
    h[i] = h[p]!;
    i = p;
  }
  h[i] = x;
}

function siftDown(h: HeapEntry[], i: number): void {
  const n = h.length;
  const x = h[i]!;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && less(h[r]!, h[l]!) ? r : l;
    if (!less(h[c]!, x)) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = x;
}

function popMin(h: HeapEntry[]): HeapEntry {
  const top = h[0]!;
  const last = h.pop()!;
  if (h.length > 0) {
    h[0] = last;
    siftDown(h, 0);
  }
  return top;
}
