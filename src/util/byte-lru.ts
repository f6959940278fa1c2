/**
 * A map bounded by the estimated bytes of its entries, evicting the least recently used. The
 * caller estimates each entry's bytes when it stores it. Reading an entry (get, not peek) or
 * storing it (set, a replacement too) makes it the most recent; a store that takes the total past
 * `maxBytes` evicts from the least recent end until the total fits again, which may be the stored
 * entry itself when it alone is larger than the budget (callers that refuse large entries check
 * before they store). A bound on the count of entries is the case where each weighs 1. A Map
 * keeps insertion order, so making an entry the most recent is a delete and a re-insert.
 */
export class ByteLru<K, V> {
  readonly maxBytes: number;
  private readonly map = new Map<K, { value: V; bytes: number }>();
  private total = 0;
  private evicted = 0;
  private readonly onEvict: ((key: K, value: V) => void) | undefined;

  /** `onEvict`: told of each entry the budget pushes out (not of those deleted or replaced). */
  constructor(maxBytes: number, onEvict?: (key: K, value: V) => void) {
    this.maxBytes = maxBytes;
    this.onEvict = onEvict;
  }

  /** Entries held. */
  get size(): number {
    return this.map.size;
  }

  /** Estimated bytes of the entries held. */
  get bytes(): number {
    return this.total;
  }

  /** Entries the budget has pushed out since this map was made. */
  get evictions(): number {
    return this.evicted;
  }

  /** The value of `key`, now the most recent entry; undefined when absent. */
  get(key: K): V | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, e);
    return e.value;
  }

  /** The value of `key` without making it more recent; undefined when absent. */
  peek(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  /** Stores `value` under `key` as the most recent entry (replacing any entry of `key`), then evicts down to the budget. */
  set(key: K, value: V, bytes: number): void {
    this.delete(key);
    this.map.set(key, { value, bytes });
    this.total += bytes;
    for (const [k, e] of this.map) {
      if (this.total <= this.maxBytes) break;
      this.map.delete(k);
      this.total -= e.bytes;
      this.evicted++;
      this.onEvict?.(k, e.value);
    }
  }

  /** Forgets `key`; false when it was absent. */
  delete(key: K): boolean {
    const e = this.map.get(key);
    if (e === undefined) return false;
    this.map.delete(key);
    this.total -= e.bytes;
    return true;
  }
}
