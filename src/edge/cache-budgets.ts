/**
 * Every cache the edge keeps per isolate, with its byte budget and eviction policy, in one place
 * (docs/reliability.md "Edge memory"). An isolate has 128 MB; these budgets add up to ~70 MiB of
 * estimated bytes, leaving the rest to the tokenizer's BPE table (~25 MB, fixed) and piece memo (4 MiB, fixed), the code and the
 * requests in flight. Small caches bounded by configuration (one entry per configured model: the
 * pool profile in chat/pool-profile-cache.ts, the parsed config in functions/index.ts, per-template parse results) are
 * not listed. A test fills each listed cache far past its budget (test/unit/edge/cache-budgets.test.ts).
 */
import { layoutMemoStats, MEMO_MAX_BYTES } from "../layout/layout.ts";
import { sharedPrefixCache, type PrefixCacheStats } from "../prompt/prefix-cache.ts";
import { MODEL_FAMILIES, tokenizerCacheStats } from "../prompt/tokenizer/index.ts";
import type { SegmentCacheStats } from "../prompt/tokenizer/segment-cache.ts";
import { sharedTurnChain, type TurnChainStats } from "../prompt/turn-chain.ts";
import { mediaMemoStats } from "./chat/media-deps.ts";
import { routedItemStats } from "./chat/routed-items.ts";
import { sharedViewHashes, type ViewHashStats } from "./chat/view-hashes.ts";
import { exactnessStats, type ExactnessStats } from "./exactness.ts";
import { mediaPolicyChecks, storeSignatures } from "./media.ts";
import type { MediaMemoStats } from "./media-memo.ts";

export interface CacheBudget {
  name: string;
  /** Estimated bytes held now. */
  bytes: number;
  maxBytes: number;
  entries: number;
  policy: string;
}

export function edgeCacheBudgets(): CacheBudget[] {
  const prefix = sharedPrefixCache().stats();
  const tok = tokenizerCacheStats();
  const memo = layoutMemoStats();
  const turns = sharedTurnChain().stats();
  const media = mediaMemoStats();
  const routed = routedItemStats();
  const views = sharedViewHashes().stats();
  return [
    { name: "prompt_prefix", bytes: prefix.bytes, maxBytes: prefix.maxBytes, entries: prefix.entries, policy: "LRU by prefix; tokens and bytes bounded" },
    { name: "token_segments", bytes: tok.segments.bytes, maxBytes: tok.segments.maxBytes, entries: tok.segments.entries, policy: "LRU; characters and bytes bounded" },
    { name: "bpe_pieces", bytes: tok.pieces.bytes, maxBytes: tok.pieces.maxBytes, entries: tok.pieces.entries, policy: "two generations; entries and bytes bounded" },
    // One memo per tokenizer encode function (one per model family at most).
    { name: "layout_memo", bytes: memo.bytes, maxBytes: MEMO_MAX_BYTES * MODEL_FAMILIES.length, entries: memo.entries, policy: "cleared when full" },
    // Rendered text of conversations' earlier turns, keyed by their messages' raw JSON (prompt/turn-chain.ts).
    { name: "turn_chain", bytes: turns.bytes, maxBytes: turns.maxBytes, entries: turns.entries, policy: "LRU by conversation prefix; bytes bounded" },
    // Media items verified for earlier turns, per client and namespace (edge/media-memo.ts), and their layouts (chat/routed-items.ts).
    { name: "media_items", bytes: media.bytes, maxBytes: media.maxBytes, entries: media.entries, policy: "LRU; bytes bounded" },
    { name: "media_layouts", bytes: routed.bytes, maxBytes: routed.maxBytes, entries: routed.entries, policy: "LRU; bytes bounded" },
    // Media requests' routed views and block hashes up to their generation prompt (chat/view-hashes.ts).
    { name: "media_views", bytes: views.bytes, maxBytes: views.maxBytes, entries: views.entries, policy: "LRU by conversation prefix; bytes bounded" },
  ];
}

/** GET /admin/edge-caches: the budgets, then each cache's counters (lookups, and the work done and saved) in this isolate. */
export interface EdgeCacheReport {
  caches: CacheBudget[];
  promptPrefix: PrefixCacheStats;
  /** The tokenizer's segment cache (whole texts between added tokens: hits, misses, entries, characters, bytes). */
  tokenSegments: SegmentCacheStats;
  turnChain: TurnChainStats;
  mediaItems: MediaMemoStats;
  mediaLayouts: ReturnType<typeof routedItemStats>;
  mediaViews: ViewHashStats;
  /** URLs checked against the media policy (a remembered item's is not checked again) and store URLs signed (a kept one is given again). */
  mediaWork: { policyChecks: number; storeSignatures: number };
  /** The incremental path's sampled checks against the full path, and the mismatches they found, per kind (exactness.ts). */
  exactness: ExactnessStats;
}

export function edgeCacheReport(): EdgeCacheReport {
  const turnChain = sharedTurnChain().stats();
  return {
    caches: edgeCacheBudgets(),
    promptPrefix: sharedPrefixCache().stats(),
    tokenSegments: tokenizerCacheStats().segments,
    turnChain,
    mediaItems: mediaMemoStats(),
    mediaLayouts: routedItemStats(),
    mediaViews: sharedViewHashes().stats(),
    mediaWork: { policyChecks: mediaPolicyChecks(), storeSignatures: storeSignatures() },
    exactness: exactnessStats(turnChain),
  };
}
