/**
 * Exact Qwen (Qwen2-VL / Qwen2.5-VL / Qwen3-VL) tokenizer: compact rank-based byte-level BPE.
 * Built lazily on first use and cached per isolate; the BPE table and caches are shared by all
 * families. Design and measurements: docs/tokenizer.md.
 */
import { ADDED_TOKENS, VOCAB_B64 } from "../../generated/tokenizer/qwen-vocab.js";
import { BpeEngine, type EngineCacheStats } from "./engine.ts";
import { QwenTokenizerImpl, type AddedToken, type ModelFamily, type QwenTokenizer } from "./tokenizer.ts";
import { decodeVocab } from "./vocab.ts";

export type { ModelFamily, QwenTokenizer } from "./tokenizer.ts";
export type { EngineCacheStats } from "./engine.ts";

export const MODEL_FAMILIES: readonly ModelFamily[] = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"];

/** Cache bounds: 2 M characters of segment text within 6 MiB, and 2 × 50k BPE'd pieces within 3 MiB. */
export const DEFAULT_SEGMENT_CACHE_CHARS = 2_000_000;
export const DEFAULT_SEGMENT_CACHE_BYTES = 6 * 1024 * 1024;
export const DEFAULT_PIECE_CACHE_ENTRIES = 50_000;
export const DEFAULT_PIECE_CACHE_BYTES = 3 * 1024 * 1024;

let engine: BpeEngine | null = null;
const tokenizers = new Map<ModelFamily, QwenTokenizer>();

function sharedEngine(): BpeEngine {
  engine ??= new BpeEngine(decodeVocab(VOCAB_B64), {
    segmentCacheChars: DEFAULT_SEGMENT_CACHE_CHARS,
    segmentCacheBytes: DEFAULT_SEGMENT_CACHE_BYTES,
    pieceCacheEntries: DEFAULT_PIECE_CACHE_ENTRIES,
    pieceCacheBytes: DEFAULT_PIECE_CACHE_BYTES,
  });
  return engine;
}

export function getQwenTokenizer(family: ModelFamily): QwenTokenizer {
  let tok = tokenizers.get(family);
  if (tok) return tok;
  const list = ADDED_TOKENS[family];
  if (!list) throw new Error(`unknown model family ${String(family)}`);
  const added: AddedToken[] = list.map(([id, content, special]) => ({ id, content, special }));
  tok = new QwenTokenizerImpl(family, sharedEngine(), added);
  tokenizers.set(family, tok);
  return tok;
}

/** Stats of the shared caches (tests, metrics). */
export function tokenizerCacheStats(): EngineCacheStats {
  return sharedEngine().cacheStats();
}

/** Empties the shared segment and piece caches and resets their counters (tests, benchmarks). */
export function clearTokenizerCaches(): void {
  engine?.clearCaches();
}
