import { RadixIndex, type ApplyResult, type ChainEnd, type StoredEventResult, type WireBlock, type WireDumpBlock } from "./radix-index.ts";
import type { BlockIndex } from "./block-index.ts";
import { ChainRootRouter, checkShardCount, shardOf } from "../relay-wire/chain-shards.ts";

/**
 * A pool's block index split across `shardCount` RadixIndex shards by chain root (the placement
 * rule: src/relay-wire/chain-shards.ts), behind the BlockIndex interface: RoutingCore keeps
 * registry, load and selection in one place and each query reads one shard. Decisions are identical to one RadixIndex (test/unit/block-index/sharded-index.test.ts).
 */
export class ShardedIndex implements BlockIndex {
  readonly shards: RadixIndex[];
  readonly #routers: (ChainRootRouter | undefined)[] = [];

  constructor(shardCount: number) {
    checkShardCount(shardCount);
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
