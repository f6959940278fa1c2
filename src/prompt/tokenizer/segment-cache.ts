/**
 * Bounded LRU of token ids per text segment (the text between two added tokens). Tokenization of a
 * segment does not depend on its neighbours, so a repeated system prompt or an earlier chat turn is
 * served from here instead of being tokenized again. Bounded by total cached characters and by an
 * estimate of the bytes held (UTF-16 key, 4 B per id, a fixed per-entry overhead).
 */
export interface SegmentCacheStats {
  hits: number;
  misses: number;
  entries: number;
  chars: number;
  maxChars: number;
  bytes: number;
  maxBytes: number;
}

/** Map entry, key string header and typed-array header, measured order of magnitude in V8. */
const ENTRY_OVERHEAD_BYTES = 160;

export function segmentEntryBytes(segment: string, ids: Int32Array): number {
  return 2 * segment.length + ids.byteLength + ENTRY_OVERHEAD_BYTES;
}

export class SegmentCache {
  private readonly map = new Map<string, Int32Array>();
  private chars = 0;
  private bytes = 0;
  private hits = 0;
  private misses = 0;
  readonly maxChars: number;
  readonly maxBytes: number;
  /** Segments longer than this are not cached, so one huge text cannot flush everything else. */
  readonly maxSegmentChars: number;

  constructor(maxChars: number, maxBytes = Number.POSITIVE_INFINITY) {
    this.maxChars = maxChars;
    this.maxBytes = maxBytes;
    this.maxSegmentChars = Math.max(1, Math.floor(maxChars / 4));
  }

  get(segment: string): Int32Array | undefined {
    const ids = this.map.get(segment);
    if (ids === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Re-insert to mark as most recently used (Map keeps insertion order).
    this.map.delete(segment);
    this.map.set(segment, ids);
    return ids;
  }

  set(segment: string, ids: Int32Array): void {
    if (segment.length > this.maxSegmentChars || this.map.has(segment)) return;
    this.map.set(segment, ids);
    this.chars += segment.length;
    this.bytes += segmentEntryBytes(segment, ids);
    if (this.chars <= this.maxChars && this.bytes <= this.maxBytes) return;
    for (const [key, old] of this.map) {
      if (this.chars <= this.maxChars && this.bytes <= this.maxBytes) break;
      this.map.delete(key);
      this.chars -= key.length;
      this.bytes -= segmentEntryBytes(key, old);
    }
  }

  clear(): void {
    this.map.clear();
    this.chars = 0;
    this.bytes = 0;
    this.hits = 0;
    this.misses = 0;
  }

  stats(): SegmentCacheStats {
    return { hits: this.hits, misses: this.misses, entries: this.map.size, chars: this.chars, maxChars: this.maxChars, bytes: this.bytes, maxBytes: this.maxBytes };
  }
}
