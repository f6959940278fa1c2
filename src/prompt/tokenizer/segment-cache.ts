/**
 * Bounded LRU of token ids per text segment (the text between two added tokens). Tokenization of a
 * segment does not depend on its neighbours, so a repeated system prompt or an earlier chat turn is
 * served from here instead of being tokenized again. Bounded by total cached characters.
 */
export interface SegmentCacheStats {
  hits: number;
  misses: number;
  entries: number;
  chars: number;
  maxChars: number;
}

export class SegmentCache {
  private readonly map = new Map<string, Int32Array>();
  private chars = 0;
  private hits = 0;
  private misses = 0;
  readonly maxChars: number;
  /** Segments longer than this are not cached, so one huge text cannot flush everything else. */
  readonly maxSegmentChars: number;

  constructor(maxChars: number) {
    this.maxChars = maxChars;
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
    if (this.chars <= this.maxChars) return;
    for (const [key] of this.map) {
      if (this.chars <= this.maxChars) break;
      this.map.delete(key);
      this.chars -= key.length;
    }
  }

  clear(): void {
    this.map.clear();
    this.chars = 0;
    this.hits = 0;
    this.misses = 0;
  }

  stats(): SegmentCacheStats {
    return { hits: this.hits, misses: this.misses, entries: this.map.size, chars: this.chars, maxChars: this.maxChars };
  }
}
