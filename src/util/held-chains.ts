/**
 * The memory bound of a cache whose entries extend one another: each node keeps only its own piece
 * and points to the node it extends, so the turns and branches of one conversation share their
 * common part (the prompt-prefix cache, the turn chain, the media view hashes). A node's size
 * counts while some kept entry's chain includes it: a shared piece counts once, and one that no
 * kept entry reaches is left to the GC. `holders` is a reference count held along the tree (the
 * node itself when kept, plus each child that counts), so keeping or dropping an entry walks only
 * the nodes that start or stop counting, never the whole chain of a long conversation. Kept
 * entries are evicted least recently used first until the sizes fit the budget. The cache keeps
 * its own lookup structure and is told, by `onDrop`, of every entry that leaves.
 */
export interface HeldNode<N> {
  parent: N | null;
  /** 1 while kept, plus each child whose own holders are > 0; its sizes count while this is > 0 (some kept entry's chain includes it). */
  holders: number;
  /** Estimated bytes of the node's own piece. */
  bytes: number;
  /** Tokens of its own piece, where the cache bounds tokens too. */
  tokens?: number;
}

export interface HeldChainsOptions<N> {
  maxBytes: number;
  /** Default: no bound on tokens. */
  maxTokens?: number;
  /** Takes an entry out of the cache's lookup structure (dropped or evicted). */
  onDrop: (entry: N) => void;
}

export class HeldChains<N extends HeldNode<N>> {
  readonly maxBytes: number;
  readonly maxTokens: number;
  /** Sizes of the counted nodes (each shared node once). */
  bytes = 0;
  tokens = 0;
  /** Entries dropped because the sizes went over the budget. */
  evictions = 0;
  /** Kept entries, least recently used first (a Set keeps insertion order; touch re-inserts). */
  private readonly lru = new Set<N>();
  private readonly onDrop: (entry: N) => void;

  constructor(options: HeldChainsOptions<N>) {
    this.maxBytes = options.maxBytes;
    this.maxTokens = options.maxTokens ?? Infinity;
    this.onDrop = options.onDrop;
  }

  /** Kept entries. */
  get entries(): number {
    return this.lru.size;
  }

  /** Whether a piece of `bytes` may be stored: a larger one would flush over a quarter of the rest. */
  admits(bytes: number): boolean {
    return bytes <= this.maxBytes / 4;
  }

  /** Keeps `entry` as the most recent; its chain's nodes count from now on. Call evictOverBudget after. */
  keep(entry: N): void {
    this.lru.add(entry);
    // Up only while a node starts counting: a counted parent already holds the rest of the chain.
    for (let x: N | null = entry; x && x.holders++ === 0; x = x.parent) this.count(x, 1);
  }

  /** Makes a kept entry the most recent; one dropped meanwhile stays dropped. */
  touch(entry: N): void {
    if (this.lru.delete(entry)) this.lru.add(entry);
  }

  /** Forgets a kept entry; nodes of its chain that no other kept entry reaches stop counting. False when not kept. */
  drop(entry: N): boolean {
    if (!this.lru.delete(entry)) return false;
    this.onDrop(entry);
    // Up only while a node stops counting: its parent loses that child's hold.
    for (let x: N | null = entry; x && --x.holders === 0; x = x.parent) this.count(x, -1);
    return true;
  }

  /**
   * Drops every kept entry `bad` picks (a sampled check found a piece wrong: every entry whose
   * chain holds it goes); the count dropped. O(kept entries), for a rare event.
   */
  dropWhere(bad: (entry: N) => boolean): number {
    let dropped = 0;
    for (const entry of [...this.lru]) if (bad(entry) && this.drop(entry)) dropped++;
    return dropped;
  }

  /** Adds to a node's own sizes (data it gained later); they count at once when it is held. Call evictOverBudget after. */
  grow(node: N, bytes: number, tokens = 0): void {
    node.bytes += bytes;
    if (tokens !== 0) node.tokens = (node.tokens ?? 0) + tokens;
    if (node.holders > 0) {
      this.bytes += bytes;
      this.tokens += tokens;
    }
  }

  /** Drops kept entries, least recently used first, until the sizes fit the budget (the newest last, when its chain alone is over). */
  evictOverBudget(): void {
    for (const old of this.lru) {
      if (this.bytes <= this.maxBytes && this.tokens <= this.maxTokens) break;
      this.drop(old);
      this.evictions++;
    }
  }

  /** Forgets every entry and zeroes the sizes and the eviction count (the cache clears its lookup structure itself). */
  clear(): void {
    this.lru.clear();
    this.bytes = this.tokens = this.evictions = 0;
  }

  private count(x: N, sign: 1 | -1): void {
    this.bytes += sign * x.bytes;
    this.tokens += sign * (x.tokens ?? 0);
  }
}
