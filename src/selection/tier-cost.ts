/**
 * What a cached block below the GPU costs: SGLang's HiCache loads a host-memory (CPU_PINNED) hit
 * back to the GPU before the request's prefill continues (mem_cache/hiradix_cache.py @9d147fd
 * `load_back` L1242-1315), so the block saves its prefill but costs its bytes over the host→GPU
 * bandwidth. Bytes per token come from the model's KV geometry:
 *   layers × KV heads × head dim × 2 (K and V) × bytes per element.
 */

export interface TierCostParams {
  /** KV cache bytes one token takes on the worker (all layers, K and V). */
  kvBytesPerToken: number;
  /** Host-memory → GPU load-back bandwidth, GB/s (10^9 bytes). */
  hostLoadGBps: number;
  /** Shared storage backend (L3) → GPU bandwidth, GB/s. */
  storageLoadGBps: number;
}

/**
 * Qwen3-VL-8B (the default model): 36 layers × 8 KV heads × 128 head dim × 2 (K, V) × 2 bytes
 * (bf16) = 147 456 bytes per token. Host → GPU 37 GB/s: FlexKV's H2D measurement on H20
 * (sglang mem_cache/storage/flexkv/README.md); SGLang publishes no figure of its own. Storage 2 GB/s:
 * a cautious figure for a file or network backend (sglang issue #26305 measured an L3 `file` hit
 * slower than recomputing); calibrate it per pool.
 */
export const DEFAULT_TIER_COST: Readonly<TierCostParams> = { kvBytesPerToken: 147_456, hostLoadGBps: 37, storageLoadGBps: 2 };

/** Blocks an approximate shared-storage view keeps before aging out its oldest: 2^18 (4M tokens at block size 16). */
export const DEFAULT_STORAGE_CAPACITY_BLOCKS = 262_144;

/** Milliseconds to load `blocks` blocks of `blockSize` tokens back from host memory. */
export function hostLoadBackMs(p: TierCostParams, blocks: number, blockSize: number): number {
  return transferMs(p.kvBytesPerToken, blocks * blockSize, p.hostLoadGBps);
}

/** Milliseconds to load `blocks` blocks from a shared storage backend. */
export function storageLoadMs(p: TierCostParams, blocks: number, blockSize: number): number {
  return transferMs(p.kvBytesPerToken, blocks * blockSize, p.storageLoadGBps);
}

function transferMs(bytesPerToken: number, tokens: number, gbps: number): number {
  return tokens <= 0 ? 0 : ((tokens * bytesPerToken) / (gbps * 1e9)) * 1000;
}
