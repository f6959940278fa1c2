/**
 * Bounded LRU of token ids per text segment (the text between two added tokens). Tokenization of a
 * segment does not depend on its neighbours, so a repeated system prompt or an earlier chat turn is
 * served from here instead of being tokenized again. Bounded by total cached characters and by an
 * estimate of the bytes held (UTF-16 text, 4 B per id, a fixed per-entry overhead).
 *
 * Keyed by a fingerprint of the text (its length, head, tail and evenly spaced characters), not by
 * the text: V8 copies a string into its string table to use it as a Map key, which for a 130 kB
 * segment cost more than the rest of a lookup. The text decides: an entry is used only when its
 * text equals the segment, so a fingerprint collision costs a compare, never wrong ids; colliding
 * segments share a bucket of at most MAX_BUCKET.
 *
 * Partitioned (src/edge/cache-salt.ts edgeCachePartition): a segment is a message's whole text, so a
 * hit would tell a caller that someone sent that text before. An entry is used only by a lookup of
 * its own partition (compared with the text; also mixed into the fingerprint, so tenants never share
 * a bucket); "" is the common partition.
 */
import { ownString } from "../../util/own-string.ts";

export interface SegmentCacheStats {
  hits: number;
  misses: number;
  entries: number;
  chars: number;
  maxChars: number;
  bytes: number;
  maxBytes: number;
}

/** Map entry, bucket, string header and typed-array header, measured order of magnitude in V8. */
const ENTRY_OVERHEAD_BYTES = 160;
/** Characters sampled from each of head, tail and middle for a fingerprint (shorter texts: all of them). */
const SAMPLE_CHARS = 64;
const MAX_BUCKET = 4;

/** `partition`: the entry's partition id (its characters are counted as if each entry held its own copy). */
export function segmentEntryBytes(segment: string, ids: Int32Array, partition: string): number {
  return 2 * segment.length + ids.byteLength + 2 * partition.length + ENTRY_OVERHEAD_BYTES;
}

/** A hash of s's length and of up to 3 × SAMPLE_CHARS of its characters. */
export function fingerprint(s: string): number {
  const n = s.length;
  let h = Math.imul(n ^ 0x2f6b1c35, 0x9e3779b1);
  const mix = (c: number): void => {
    h = Math.imul(h ^ c, 0x01000193);
  };
  if (n <= 3 * SAMPLE_CHARS) {
    for (let i = 0; i < n; i++) mix(s.charCodeAt(i));
  } else {
    const step = Math.floor((n - 2 * SAMPLE_CHARS) / SAMPLE_CHARS);
    for (let i = 0; i < SAMPLE_CHARS; i++) mix(s.charCodeAt(i));
    for (let i = 0; i < SAMPLE_CHARS; i++) mix(s.charCodeAt(SAMPLE_CHARS + i * step));
    for (let i = n - SAMPLE_CHARS; i < n; i++) mix(s.charCodeAt(i));
  }
  return (h ^ (h >>> 15)) >>> 0;
}

interface Entry {
  text: string;
  ids: Int32Array;
  partition: string;
}

/** fingerprint(segment) moved by the partition's own hash ("" leaves it as it is). */
function keyOf(segment: string, partition: string): number {
  const h = fingerprint(segment);
  return partition === "" ? h : (Math.imul(h ^ fingerprint(partition), 0x85ebca6b) ^ 0x5bd1e995) >>> 0;
}

export class SegmentCache {
  /** Fingerprint → entries, least recently used bucket first (a hit moves its bucket to the end). */
  private readonly map = new Map<number, Entry[]>();
  private entries = 0;
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

  get(segment: string, partition: string): Int32Array | undefined {
    const key = keyOf(segment, partition);
    const bucket = this.map.get(key);
    const entry = bucket?.find((e) => e.partition === partition && e.text === segment);
    if (bucket === undefined || entry === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Re-insert to mark as most recently used (Map keeps insertion order).
    this.map.delete(key);
    this.map.set(key, bucket);
    return entry.ids;
  }

  /**
   * `sourceChars`: the length of the string segment was sliced from (unknown: infinite). A slice
   * keeps its whole source alive, so it is stored as is only when it is most of it; otherwise it is
   * copied (ownString): copying a 130 kB prompt costs ~1 ms here, mostly first touches of fresh pages.
   * `partition`: whose entry it is (get finds it only under the same partition).
   */
  set(segment: string, ids: Int32Array, partition: string, sourceChars = Number.POSITIVE_INFINITY): void {
    if (segment.length > this.maxSegmentChars) return;
    const key = keyOf(segment, partition);
    let bucket = this.map.get(key);
    if (bucket?.some((e) => e.partition === partition && e.text === segment)) return;
    if (bucket === undefined) this.map.set(key, (bucket = []));
    else if (bucket.length >= MAX_BUCKET) this.remove(bucket, bucket[0]!);
    const text = 2 * segment.length >= sourceChars ? segment : ownString(segment);
    bucket.push({ text, ids, partition });
    this.entries++;
    this.chars += text.length;
    this.bytes += segmentEntryBytes(text, ids, partition);
    for (const [k, b] of this.map) {
      if (this.chars <= this.maxChars && this.bytes <= this.maxBytes) break;
      while (b.length > 0) this.remove(b, b[0]!);
      this.map.delete(k);
    }
  }

  private remove(bucket: Entry[], e: Entry): void {
    bucket.splice(bucket.indexOf(e), 1);
    this.entries--;
    this.chars -= e.text.length;
    this.bytes -= segmentEntryBytes(e.text, e.ids, e.partition);
  }

  clear(): void {
    this.map.clear();
    this.entries = 0;
    this.chars = 0;
    this.bytes = 0;
    this.hits = 0;
    this.misses = 0;
  }

  stats(): SegmentCacheStats {
    return { hits: this.hits, misses: this.misses, entries: this.entries, chars: this.chars, maxChars: this.maxChars, bytes: this.bytes, maxBytes: this.maxBytes };
  }
}
