/**
 * One worker's KV blocks per cache tier: a WorkerBlockSet for the GPU and one for host memory
 * (SGLang HiCache's CPU_PINNED), each kept by its own events, so a block evicted from the GPU with
 * a host copy (`BlockRemoved(GPU)`, the host copy stays: mem_cache/hiradix_cache.py @9d147fd
 * `_detach_backuped` L1139-1149) leaves the GPU set and stays in the host set until
 * `BlockRemoved(CPU_PINNED)` (`evict_host` L1207-1236). AllBlocksCleared empties both.
 * Host-tier changes go out tagged `tier: "CPU_PINNED"`; GPU ones untagged, as before tiers existed.
 */
import type { KvCacheEvent } from "../../src/engine-events/event-decode.ts";
import { HOST_TIER, type KvTier } from "../../src/relay-wire/relay-protocol.ts";
import { WorkerBlockSet, type ApplyOutcome, type DumpBlock } from "./worker-block-set.ts";

export class TieredBlockSet {
  readonly gpu: WorkerBlockSet;
  readonly host: WorkerBlockSet;

  constructor(blockSize: number) {
    this.gpu = new WorkerBlockSet(blockSize);
    this.host = new WorkerBlockSet(blockSize);
  }

  get blockSize(): number {
    return this.gpu.blockSize;
  }

  /** Blocks in every tier (a block in both counts twice: it is two copies). */
  get size(): number {
    return this.gpu.size + this.host.size;
  }

  get needsResync(): boolean {
    return this.gpu.needsResync || this.host.needsResync;
  }

  clear(): void {
    this.gpu.clear();
    this.host.clear();
  }

  apply(events: readonly KvCacheEvent[]): ApplyOutcome {
    const out: ApplyOutcome = { events: [], dropped: [], stored: 0, removed: 0 };
    for (const ev of events) {
      if (ev.type === "AllBlocksCleared") {
        this.clear();
        out.events.push({ t: "cleared" });
        continue;
      }
      const tier = tierOf(ev.medium);
      if (tier === null) {
        out.dropped.push({ reason: "untracked_medium", count: ev.blockHashes.length, detail: `${ev.type} on ${ev.medium}` });
        continue;
      }
      const r = (tier === HOST_TIER ? this.host : this.gpu).apply([ev]);
      out.stored += r.stored;
      out.removed += r.removed;
      out.dropped.push(...r.dropped);
      for (const e of r.events) out.events.push(tier === HOST_TIER && e.t !== "cleared" ? { ...e, tier } : e);
    }
    return out;
  }

  /** GPU rows, then host rows tagged with their tier; parents before children within each tier. */
  dumpBlocks(): DumpBlock[] {
    const rows = this.gpu.dumpBlocks();
    for (const r of this.host.dumpBlocks()) rows.push({ ...r, tier: HOST_TIER });
    return rows;
  }

  /** Replaces both sets with dumped rows; returns how many rows were skipped. */
  restore(rows: readonly DumpBlock[]): number {
    const host = rows.filter((r) => r.tier === HOST_TIER);
    return this.gpu.restore(rows.filter((r) => r.tier !== HOST_TIER)) + this.host.restore(host);
  }
}

/** The tier an SGLang medium names; null for one the relay keeps no view of. */
export function tierOf(medium: string): KvTier | null {
  return medium === "GPU" || medium === HOST_TIER ? (medium as KvTier) : null;
}
