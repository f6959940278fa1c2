/**
 * Sharding a pool's block index by chain root (docs/scale.md §3).
 *
 * Overlap counts consecutive blocks from a request's first block, so every block that can ever
 * count for a request lies in the subtree of that request's first block. Splitting the index by
 * the local hash of each chain's root block therefore loses nothing: the shard of a request's
 * first block holds every worker's full overlap for it, and a query touches exactly one shard.
 *
 * Stored events name their parent by engine hash, not by root, so whoever splits them (a relay
 * fanning out to shard objects, or ShardedIndex in process) remembers engine hash → shard for the
 * blocks it has placed: a chain root goes to shardOf(its local hash), every other block to its
 * parent's shard (ChainRootRouter).
 *
 * shardOf is jump consistent hashing (Lamping & Veach 2014) over the local hash: going from N to
 * N+1 shards moves only ~1/(N+1) of the chains, all of them into the new shard.
 */
import { RadixIndex, type ApplyResult, type ChainEnd, type StoredEventResult, type WireBlock, type WireDumpBlock } from "./radix-index.ts";
import type { RelayEvent } from "../relay-wire/relay-protocol.ts";
import type { LocalHashes } from "../blocks/block-hash.ts";

/** What RoutingCore (and the Durable Object) need from a block index. RadixIndex is one. */
export interface BlockIndex {
  readonly size: number;
  ensureWorker(slot: number): void;
  hasWorker(slot: number): boolean;
  workerBlockCount(slot: number): number;
  applyStoredWire(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[]): ApplyResult;
  /** A relay "stored" event: void as a whole when a block repeats or equals its parent. */
  applyStoredEvent(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[], admit?: (blocks: number) => boolean): StoredEventResult;
  applyDumpWire(slot: number, rows: readonly WireDumpBlock[]): { applied: number; failed: number };
  applyRemoved(slot: number, engineHashes: readonly string[]): number;
  clearWorker(slot: number): void;
  removeWorker(slot: number): void;
  findMatches(localHashes: readonly bigint[] | BigUint64Array, scores: Int32Array): void;
  /** Whether the worker holds the block a chain ends in (RadixIndex.holdsChainEnd). */
  holdsChainEnd(slot: number, end: ChainEnd): boolean;
  workerLocalHashesHex(slot: number): string[];
}

export const MAX_SHARDS = 1024;

/**
 * The Durable Object name of shard `k` of a pool. Shard 0 keeps the pool's own name (it is also the
 * pool object: registry authority, cohort, operator views), so one shard means today's layout.
 * Relay connect tokens are signed for this name, so a token for one shard opens no other.
 */
export function shardObjectName(model: string, shard: number): string {
  return shard === 0 ? model : `${model}#${shard}`;
}

/** The one shard a request reads: the shard of its first block (shard 0 without a full block). */
export function shardForRequest(localHashes: readonly bigint[] | BigUint64Array, shardCount: number): number {
  return localHashes.length === 0 ? 0 : shardOf(localHashes[0]!, shardCount);
}

function checkCount(shardCount: number): void {
  if (!Number.isInteger(shardCount) || shardCount < 1 || shardCount > MAX_SHARDS) throw new RangeError(`bad shard count ${shardCount}`);
}

/** Jump consistent hash of a 64-bit key given as two 32-bit words. */
function jump(lo: number, hi: number, shardCount: number): number {
  // Per-key pseudo-random sequence (mulberry32 seeded from both words); any per-key sequence keeps
  // jump hashing's minimal-movement property.
  let state = (Math.imul(hi ^ 0x9e3779b9, 0x85ebca6b) ^ lo) >>> 0;
  let b = -1;
  let j = 0;
  while (j < shardCount) {
    b = j;
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const r = (((t ^ (t >>> 14)) >>> 0) + 1) / 4294967296; // (0, 1]
    j = Math.floor((b + 1) / r);
  }
  return b;
}

const words = new Uint32Array(2);
const big = new BigUint64Array(words.buffer);

/** The shard of a chain whose root block has local hash `firstLocalHash`. */
export function shardOf(firstLocalHash: bigint, shardCount: number): number {
  checkCount(shardCount);
  if (shardCount === 1) return 0;
  big[0] = firstLocalHash;
  return jump(words[0]!, words[1]!, shardCount);
}

/** shardOf for a local hash in its wire form (16 hex digits). */
export function shardOfHex(localHex: string, shardCount: number): number {
  checkCount(shardCount);
  if (shardCount === 1) return 0;
  if (!/^[0-9a-fA-F]{1,16}$/.test(localHex)) throw new RangeError(`local hash ${JSON.stringify(localHex)} is not 16 hex digits`);
  const padded = localHex.padStart(16, "0");
  return jump(parseInt(padded.slice(8), 16), parseInt(padded.slice(0, 8), 16), shardCount);
}

/** An engine hash as the signed int64 decimal (SGLang emits int64 or uint64 for the same bits). */
export function canonicalEngineHash(h: string): string {
  const neg = h.charCodeAt(0) === 45;
  if (h.length - (neg ? 1 : 0) <= 15) return String(Number(h) + 0); // exact; "+0" folds "-0"
  return BigInt.asIntN(64, BigInt(h)).toString();
}

export type StoredRoute = { ok: true; shard: number; moves: { shard: number; hash: string }[]; placed: number } | { ok: false; error: "parent_not_found" };

/**
 * One worker's engine hash → shard map: where each of its blocks was placed. Mirrors the worker's
 * engine table in RadixIndex (store adds, removal deletes, clear empties), so a parent it does not
 * know is exactly a parent the index would not know.
 */
export class ChainRootRouter {
  readonly shardCount: number;
  readonly #shardOf = new Map<string, number>();

  constructor(shardCount: number) {
    checkCount(shardCount);
    this.shardCount = shardCount;
  }

  get size(): number {
    return this.#shardOf.size;
  }

  shardOfBlock(engineHash: string): number | undefined {
    return this.#shardOf.get(canonicalEngineHash(engineHash));
  }

  /**
   * Places a stored chain. `moves` are blocks this worker already had in another shard under the
   * same engine hash (the engine re-used it elsewhere): remove them there first. `placed` is how
   * many blocks the index will store (it stops at a block naming itself as parent).
   */
  routeStored(parent: string | null, blocks: readonly WireBlock[]): StoredRoute {
    let shard: number;
    let parentKey: string | null = null;
    if (parent === null) {
      if (blocks.length === 0) return { ok: true, shard: 0, moves: [], placed: 0 };
      shard = shardOfHex(blocks[0]!.l, this.shardCount);
    } else {
      parentKey = canonicalEngineHash(parent);
      const s = this.#shardOf.get(parentKey);
      if (s === undefined) return { ok: false, error: "parent_not_found" };
      shard = s;
    }
    const moves: { shard: number; hash: string }[] = [];
    let placed = 0;
    for (const b of blocks) {
      const key = canonicalEngineHash(b.h);
      if (key === parentKey) break;
      const was = this.#shardOf.get(key);
      if (was !== undefined && was !== shard) moves.push({ shard: was, hash: b.h });
      this.#shardOf.set(key, shard);
      placed++;
    }
    return { ok: true, shard, moves, placed };
  }

  /** One dump row: its shard, or null when its parent is unknown or itself (the index skips it). */
  routeDumpRow(row: WireDumpBlock): { shard: number; move: number | null } | null {
    const key = canonicalEngineHash(row.h);
    let shard: number;
    if (row.p === null) shard = shardOfHex(row.l, this.shardCount);
    else {
      const pk = canonicalEngineHash(row.p);
      const s = this.#shardOf.get(pk);
      if (s === undefined || pk === key) return null;
      shard = s;
    }
    const was = this.#shardOf.get(key);
    this.#shardOf.set(key, shard);
    return { shard, move: was !== undefined && was !== shard ? was : null };
  }

  /** Groups removed hashes by shard (unknown ones are dropped, as the index ignores them). */
  routeRemoved(hashes: readonly string[]): Map<number, string[]> {
    const out = new Map<number, string[]>();
    for (const h of hashes) {
      const key = canonicalEngineHash(h);
      const s = this.#shardOf.get(key);
      if (s === undefined) continue;
      this.#shardOf.delete(key);
      let list = out.get(s);
      if (!list) out.set(s, (list = []));
      list.push(h);
    }
    return out;
  }

  clear(): void {
    this.#shardOf.clear();
  }
}

/**
 * Relay fan-out: one worker's event batch split into per-shard batches (index k = shard k), in
 * order. `resync` is set when a stored chain names a parent this router never placed; the events
 * after it are still split (the index side drops what it cannot place, as it would unsharded).
 */
export function splitRelayEvents(router: ChainRootRouter, events: readonly RelayEvent[]): { perShard: RelayEvent[][]; resync: boolean } {
  const perShard: RelayEvent[][] = Array.from({ length: router.shardCount }, () => []);
  let resync = false;
  for (const ev of events) {
    if (ev.t === "stored") {
      const r = router.routeStored(ev.parent, ev.blocks);
      if (!r.ok) {
        resync = true;
        continue;
      }
      for (const m of r.moves) perShard[m.shard]!.push({ t: "removed", hashes: [m.hash] });
      perShard[r.shard]!.push(ev);
    } else if (ev.t === "removed") {
      for (const [s, hashes] of router.routeRemoved(ev.hashes)) perShard[s]!.push({ t: "removed", hashes });
    } else {
      router.clear();
      for (const list of perShard) list.push({ t: "cleared" });
    }
  }
  return { perShard, resync };
}

/**
 * A pool's block index split across `shardCount` RadixIndex shards by chain root, behind the
 * BlockIndex interface: RoutingCore keeps registry, load and selection in one place and each query
 * reads one shard. Decisions are identical to one RadixIndex (test/unit/shard-index.test.ts).
 */
export class ShardedIndex implements BlockIndex {
  readonly shards: RadixIndex[];
  readonly #routers: (ChainRootRouter | undefined)[] = [];

  constructor(shardCount: number) {
    checkCount(shardCount);
    this.shards = Array.from({ length: shardCount }, () => new RadixIndex());
  }

  get shardCount(): number {
    return this.shards.length;
  }

  get size(): number {
    let n = 0;
    for (const s of this.shards) n += s.size;
    return n;
  }

  /** (worker, block) entries per shard: the balance of the split. */
  shardSizes(): number[] {
    return this.shards.map((s) => s.size);
  }

  /** The one shard a request with these local hashes reads. */
  shardFor(localHashes: LocalHashes): number {
    return shardForRequest(localHashes, this.shards.length);
  }

  ensureWorker(slot: number): void {
    for (const s of this.shards) s.ensureWorker(slot);
    this.#routers[slot] ??= new ChainRootRouter(this.shards.length);
  }

  hasWorker(slot: number): boolean {
    return this.#routers[slot] !== undefined;
  }

  workerBlockCount(slot: number): number {
    let n = 0;
    for (const s of this.shards) n += s.workerBlockCount(slot);
    return n;
  }

  applyStoredWire(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[]): ApplyResult {
    const router = this.#routers[slot];
    if (!router) return { ok: false, applied: 0, error: "unknown_worker" };
    const r = router.routeStored(parentEngineHash, blocks);
    if (!r.ok) return { ok: false, applied: 0, error: r.error };
    for (const m of r.moves) this.shards[m.shard]!.applyRemoved(slot, [m.hash]);
    if (blocks.length === 0) return { ok: true, applied: 0 };
    return this.shards[r.shard]!.applyStoredWire(slot, parentEngineHash, blocks);
  }

  applyStoredEvent(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[], admit?: (blocks: number) => boolean): StoredEventResult {
    // Checked before routing: a void event must not move any block between shards.
    const seen = new Set<string>();
    for (const b of blocks) {
      if (b.h === parentEngineHash) return { ok: false, applied: 0, voided: "self_parent" };
      if (seen.has(b.h)) return { ok: false, applied: 0, voided: "duplicate_in_event" };
      seen.add(b.h);
    }
    if (admit && !admit(blocks.length)) return { ok: false, applied: 0, refused: true };
    return this.applyStoredWire(slot, parentEngineHash, blocks);
  }

  applyDumpWire(slot: number, rows: readonly WireDumpBlock[]): { applied: number; failed: number } {
    const router = this.#routers[slot];
    if (!router) return { applied: 0, failed: rows.length };
    let applied = 0;
    for (const row of rows) {
      const r = router.routeDumpRow(row);
      if (!r) continue;
      if (r.move !== null) this.shards[r.move]!.applyRemoved(slot, [row.h]);
      applied += this.shards[r.shard]!.applyDumpWire(slot, [row]).applied;
    }
    return { applied, failed: rows.length - applied };
  }

  applyRemoved(slot: number, engineHashes: readonly string[]): number {
    const router = this.#routers[slot];
    if (!router) return 0;
    let n = 0;
    for (const [s, hashes] of router.routeRemoved(engineHashes)) n += this.shards[s]!.applyRemoved(slot, hashes);
    return n;
  }

  clearWorker(slot: number): void {
    for (const s of this.shards) s.clearWorker(slot);
    this.#routers[slot]?.clear();
  }

  removeWorker(slot: number): void {
    for (const s of this.shards) s.removeWorker(slot);
    this.#routers[slot] = undefined;
  }

  findMatches(localHashes: readonly bigint[] | BigUint64Array, scores: Int32Array): void {
    if (localHashes.length === 0) {
      scores.fill(0);
      return;
    }
    this.shards[shardOf(localHashes[0]!, this.shards.length)]!.findMatches(localHashes, scores);
  }

  holdsChainEnd(slot: number, end: ChainEnd): boolean {
    return this.shards[shardOf(end.root, this.shards.length)]!.holdsChainEnd(slot, end);
  }

  workerLocalHashesHex(slot: number): string[] {
    return this.shards.flatMap((s) => s.workerLocalHashesHex(slot));
  }
}
