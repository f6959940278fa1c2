/**
 * What a prefill/decode pair adds to the time to first token: the prompt's KV moving from the
 * prefill to the decode worker before the decode can start (SGLang's Mooncake/NIXL transfer). The
 * prefill sends the KV of the whole prompt, cached part included, since the decode keeps no radix
 * cache by default (python/sglang/srt/disaggregation/prefill.py L296-301 @9d147fd sends only past
 * `decode_prefix_len`, which is 0 without `--disaggregation-decode-enable-radix-cache`). Bytes per
 * token come from the model's KV geometry (tier-cost.ts: layers × KV heads × head dim × 2 × bytes).
 */

export interface PdTransferParams {
  /** KV cache bytes one token takes (all layers, K and V). */
  kvBytesPerToken: number;
  /** Prefill → decode transfer bandwidth, GB/s (10^9 bytes). */
  transferGBps: number;
}

/**
 * 25 GB/s: one 200 Gb/s RDMA NIC between the pair, the assumption when none is configured
 * (KVEDGE_ROUTING pdTransferGBps); SGLang publishes no figure of its own.
 */
export const DEFAULT_PD_TRANSFER_GBPS = 25;

/** Milliseconds to move the KV of `promptTokens` tokens from a prefill to its decode worker. */
export function pdTransferMs(p: PdTransferParams, promptTokens: number): number {
  if (promptTokens <= 0) return 0;
  return ((promptTokens * p.kvBytesPerToken) / (p.transferGBps * 1e9)) * 1000;
}
