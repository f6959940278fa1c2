/**
 * Addressing a pool's routing index: the Durable Object name of each shard, and the one shard a
 * request reads (its first block's chain root: src/relay-wire/chain-shards.ts).
 */
import { shardOf } from "../relay-wire/chain-shards.ts";

/**
 * The Durable Object name of shard `k` of a pool. Shard 0 keeps the pool's own name (it is also the
 * pool object: registry authority, cohort, operator views), so one shard means the unsharded layout.
 * Relay connect tokens are signed for this name, so a token for one shard opens no other.
 */
export function shardObjectName(model: string, shard: number): string {
  return shard === 0 ? model : `${model}#${shard}`;
}

/** The one shard a request reads: the shard of its first block (shard 0 without a full block). */
export function shardForRequest(localHashes: readonly bigint[] | BigUint64Array, shardCount: number): number {
  return localHashes.length === 0 ? 0 : shardOf(localHashes[0]!, shardCount);
}
