/** What RoutingCore (and the Durable Object) need from a block index. RadixIndex is one; ShardedIndex (sharded-index.ts) another. */
import type { ApplyResult, ChainEnd, StoredEventResult, WireBlock, WireDumpBlock } from "./radix-index.ts";

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
