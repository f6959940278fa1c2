/**
 * SGLang's hierarchical cache (`--enable-hierarchical-cache`, HiRadixCache) as the simulator needs
 * it: a host-memory tier beside the GPU radix cache (radix-cache.ts), with SGLang's default write
 * policy, write_through (server_args.py @9d147fd L2118-2181), and its KV events with the medium
 * (mem_cache/hiradix_cache.py @9d147fd; sglang-fleet-shapes §2.3):
 *  - every page stored on the GPU is backed up to host memory: `BlockStored(CPU_PINNED)` right after
 *    the GPU's `BlockStored` (SGLang sends it when the DMA is acknowledged, `_finish_write_through_ack`
 *    L853-862; the simulator's copy is instant);
 *  - a GPU eviction of a backed-up page sends `BlockRemoved(GPU)` and keeps the host copy
 *    (`_detach_backuped` L1139-1149);
 *  - host memory full: least recently used host-only pages with no host child go first, one
 *    `BlockRemoved(CPU_PINNED)` (`evict_host` L1207-1236); pages still on the GPU stay;
 *  - a request whose prefix continues in host memory past the GPU match loads those pages back
 *    (`load_back` L1242-1315, not below 10 tokens, L205): they are stored on the GPU again
 *    (`BlockStored(GPU)`), count as cached, and cost bytes / bandwidth before the prefill;
 *  - flush_cache (AllBlocksCleared) empties both tiers;
 *  - optionally a storage backend (L3; `storageDir`, SGLang's `file` backend shared by several
 *    workers): every page written to host memory is written there too (one empty file per page
 *    hash; SGLang sends no event for it, L865), a prefix continuing there past host memory is
 *    prefetched into host memory (`BlockStored(CPU_PINNED)`, `_insert_helper_host` L1649-1690) and
 *    loaded back at the storage bandwidth.
 * Only the pages' hashes are kept: the KV itself is not simulated. Requires initHashing().
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { engineBlockHashes } from "./engine-block-hash.ts";
import { cacheSaltSeed, type KvEvent, type KvEventSink } from "./radix-cache.ts";

export const HOST_MEDIUM = "CPU_PINNED";
/** SGLang does not load back fewer tokens than this (hiradix_cache.py L205, L1264). */
export const MIN_LOAD_BACK_TOKENS = 10;

export interface HostTierOptions {
  pageSize: number;
  /** Host pool size in tokens (SGLang: `--hicache-ratio` × the device pool). */
  capacityTokens: number;
  /** KV bytes per token of the simulated model (load-back time). */
  kvBytesPerToken: number;
  /** Host → GPU bandwidth, GB/s. */
  loadGBps: number;
  /** A storage backend's directory (SGLang `file` backend), possibly shared with other workers; null: none. */
  storageDir?: string | null;
  /** Storage → GPU bandwidth, GB/s. */
  storageLoadGBps?: number;
}

/** What a request finds past its GPU match: tokens in host memory, then tokens in storage. */
export interface TierHit {
  hostTokens: number;
  storageTokens: number;
}

interface HostPage {
  parent: bigint | null;
  children: number;
  lastAccess: number;
}

export class HostTier {
  readonly opts: HostTierOptions;
  private readonly sink: KvEventSink;
  private readonly pages = new Map<bigint, HostPage>();
  private readonly onGpu = new Set<bigint>();
  private clock = 0;

  constructor(opts: HostTierOptions, sink: KvEventSink) {
    if (!(opts.capacityTokens >= opts.pageSize)) throw new RangeError(`host tier of ${opts.capacityTokens} tokens holds no page of ${opts.pageSize}`);
    this.opts = opts;
    this.sink = sink;
    if (opts.storageDir) mkdirSync(opts.storageDir, { recursive: true });
  }

  /** Pages held in host memory. */
  get size(): number {
    return this.pages.size;
  }

  has(hash: bigint): boolean {
    return this.pages.has(hash);
  }

  /** The GPU cache's event sink: forwards each event, then applies write-through. */
  readonly observe = (e: KvEvent): void => {
    this.sink(e);
    switch (e.type) {
      case "BlockStored":
        this.onGpu.add(e.hash);
        this.writeThrough(e);
        break;
      case "BlockRemoved":
        for (const h of e.hashes) this.onGpu.delete(h);
        break;
      case "AllBlocksCleared":
        this.pages.clear();
        this.onGpu.clear();
        break;
    }
  };

  /**
   * The pages right after the first `gpuTokens` of `tokens` (up to `limit`, whole pages) held in
   * host memory, then in storage (prefetched into host memory here): what a request loads back.
   * Nothing below SGLang's load-back threshold.
   */
  lookup(tokens: readonly number[], salt: string | null, gpuTokens: number, limit: number): TierHit {
    const none = { hostTokens: 0, storageTokens: 0 };
    const P = this.opts.pageSize;
    const end = Math.floor(Math.min(limit, tokens.length) / P) * P;
    const dir = this.opts.storageDir ?? null;
    if (end <= gpuTokens || (this.pages.size === 0 && dir === null)) return none;
    const { hashes } = engineBlockHashes(tokens.slice(0, end), P, salt !== null ? cacheSaltSeed(salt) : null);
    const now = ++this.clock;
    let i = gpuTokens / P;
    for (; i < hashes.length; i++) {
      const page = this.pages.get(hashes[i]!);
      if (!page) break;
      page.lastAccess = now;
    }
    const host = i - gpuTokens / P;
    let stored = 0;
    for (; dir !== null && i < hashes.length && existsSync(join(dir, hashes[i]!.toString())); i++) {
      if (!this.prefetch(hashes[i]!, i === 0 ? null : hashes[i - 1]!, tokens.slice(i * P, (i + 1) * P), salt)) break;
      stored++;
    }
    return (host + stored) * P >= MIN_LOAD_BACK_TOKENS ? { hostTokens: host * P, storageTokens: stored * P } : none;
  }

  /** Milliseconds to load a hit's KV to the GPU. */
  loadBackMs(hit: TierHit): number {
    const ms = (tokens: number, gbps: number) => ((tokens * this.opts.kvBytesPerToken) / (gbps * 1e9)) * 1000;
    return ms(hit.hostTokens, this.opts.loadGBps) + (hit.storageTokens > 0 ? ms(hit.storageTokens, this.opts.storageLoadGBps ?? 2) : 0);
  }

  /** A storage page lands in host memory (its parent's host copy first); false when there is no room. */
  private prefetch(hash: bigint, parent: bigint | null, tokens: number[], salt: string | null): boolean {
    if (this.pages.has(hash)) return true;
    this.writeThrough({ type: "BlockStored", hash, parent, tokens, blockSize: this.opts.pageSize, ...(salt !== null ? { cacheSalt: salt } : {}) });
    return this.pages.has(hash);
  }

  private writeThrough(e: Extract<KvEvent, { type: "BlockStored" }>): void {
    const held = this.pages.get(e.hash);
    if (held) {
      held.lastAccess = ++this.clock;
      return;
    }
    // A host page hangs off its parent's host copy (write-through backs parents up first).
    if (e.parent !== null && !this.pages.has(e.parent)) return;
    if ((this.pages.size + 1) * this.opts.pageSize > this.opts.capacityTokens && !this.evict(1)) return;
    this.pages.set(e.hash, { parent: e.parent, children: 0, lastAccess: ++this.clock });
    if (e.parent !== null) this.pages.get(e.parent)!.children++;
    this.sink({ ...e, medium: HOST_MEDIUM });
    // SGLang backs host pages up to its storage backend, with no event (hiradix_cache.py L865).
    const dir = this.opts.storageDir ?? null;
    if (dir !== null) writeFileSync(join(dir, e.hash.toString()), "");
  }

  /** Evicts up to `n` least recently used host-only leaf pages; false when none could go. */
  private evict(n: number): boolean {
    const gone: bigint[] = [];
    while (gone.length < n) {
      let victim: bigint | null = null;
      let oldest = Infinity;
      for (const [h, p] of this.pages) {
        if (p.children === 0 && !this.onGpu.has(h) && p.lastAccess < oldest) {
          oldest = p.lastAccess;
          victim = h;
        }
      }
      if (victim === null) break;
      const page = this.pages.get(victim)!;
      this.pages.delete(victim);
      if (page.parent !== null) {
        const parent = this.pages.get(page.parent);
        if (parent) parent.children--;
      }
      gone.push(victim);
    }
    if (gone.length > 0) this.sink({ type: "BlockRemoved", hashes: gone, medium: HOST_MEDIUM });
    return gone.length >= n;
  }
}
