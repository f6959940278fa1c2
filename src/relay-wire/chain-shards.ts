/**
 * Which shard of a pool's block index each block lives in (docs/scale.md §3): the rule a relay
 * follows when it fans a worker's blocks out to shard objects, and that the index follows when it
 * splits itself in one process (src/block-index/sharded-index.ts).
 *
 * Overlap counts consecutive blocks from a request's first block, so every block that can ever
 * count for a request lies in the subtree of that request's first block. Splitting by the local
 * hash of each chain's root block therefore loses nothing: the shard of a request's first block
 * holds every worker's full overlap for it, and a query touches exactly one shard.
 *
 * Stored events name their parent by engine hash, not by root, so whoever splits them remembers
 * engine hash → shard for the blocks it has placed: a chain root goes to shardOf(its local hash),
 * every other block to its parent's shard (ChainRootRouter).
 *
 * shardOf is jump consistent hashing over the local hash (src/util/jump-hash.ts): going from N to
 * N+1 shards moves only ~1/(N+1) of the chains, all of them into the new shard.
 */
import { jumpHash } from "../util/jump-hash.ts";

export const MAX_SHARDS = 1024;

/** A block as a relay event or dump row names it: decimal engine hash, 16-hex local hash. */
export interface ShardedBlock {
  readonly h: string;
  readonly l: string;
}

/** A dump row: a block and its parent's engine hash (null = first block of a chain). */
export interface ShardedDumpRow extends ShardedBlock {
  readonly p: string | null;
}

/** Throws RangeError unless `shardCount` is a whole number in 1…MAX_SHARDS. */
export function checkShardCount(shardCount: number): void {
  if (!Number.isInteger(shardCount) || shardCount < 1 || shardCount > MAX_SHARDS) throw new RangeError(`bad shard count ${shardCount}`);
}

const words = new Uint32Array(2);
const big = new BigUint64Array(words.buffer);

/** The shard of a chain whose root block has local hash `firstLocalHash`. */
export function shardOf(firstLocalHash: bigint, shardCount: number): number {
  checkShardCount(shardCount);
  if (shardCount === 1) return 0;
  big[0] = firstLocalHash;
  return jumpHash(words[0]!, words[1]!, shardCount);
}

/** shardOf for a local hash in its wire form (16 hex digits). */
export function shardOfHex(localHex: string, shardCount: number): number {
  checkShardCount(shardCount);
  if (shardCount === 1) return 0;
  if (!/^[0-9a-fA-F]{1,16}$/.test(localHex)) throw new RangeError(`local hash ${JSON.stringify(localHex)} is not 16 hex digits`);
  const padded = localHex.padStart(16, "0");
  return jumpHash(parseInt(padded.slice(8), 16), parseInt(padded.slice(0, 8), 16), shardCount);
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
    checkShardCount(shardCount);
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
  routeStored(parent: string | null, blocks: readonly ShardedBlock[]): StoredRoute {
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
  routeDumpRow(row: ShardedDumpRow): { shard: number; move: number | null } | null {
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
