/**
 * SGLang's paged radix cache (mem_cache/radix_cache.py) as the simulator needs it: keys truncated to
 * whole pages, children keyed by their first page, node splits on partial matches (no events), LRU
 * eviction of unreferenced leaves (one BlockRemoved per node), and KV events with SGLang's SHA-256
 * page-chain hashes, each node continuing from its parent's last digest.
 *
 * Two SGLang key variants (sgl-project/sglang, cited in docs/simulator.md §Cache namespaces, EAGLE):
 *  - cache_salt namespaces (GenerateReqInput.cache_salt, managers/io_struct.py): children are keyed
 *    by (namespace, first page), so requests of different namespaces never share a node; a salted
 *    chain's event hashes start from sha256("sglang-cache-salt-v1\0" + salt) instead of nothing
 *    (mem_cache/utils.py compute_node_event_hash_values), and its BlockStored events carry the salt
 *    (kv_events.py BlockStoredWithMetadata);
 *  - EAGLE bigram keys (`bigram: true`; mem_cache/utils.py convert_to_bigram_key): the key of n
 *    tokens is the n-1 pairs (t_i, t_{i+1}), pages are whole pages of pairs, a page hashes its pairs'
 *    elements in order, and events carry the pairs (mem_cache/events.py _record_store_event).
 * Requires initHashing() (engine hashes use the project's sha256).
 */
import { engineBlockHashes } from "./engine-block-hash.ts";
import { sha256 } from "../../src/util/hash.ts";

/** One radix key element: a token id, or (bigram mode) a pair "a,b". */
type Unit = number | string;

/** One page: the tokens it holds and, in bigram mode, the pairs SGLang's events carry instead. */
export interface PageTokens {
  tokens: number[];
  /** EAGLE only: the page's key, `(t_j, t_{j+1})` for each token (what goes on the wire). */
  pairs?: [number, number][];
}

/** The tier an event is about: absent for the GPU; "CPU_PINNED" for HiCache's host memory (hicache.ts). */
type Medium = { medium?: "CPU_PINNED" };

export type KvEvent =
  | ({ type: "BlockStored"; hash: bigint; parent: bigint | null; blockSize: number; /** SGLang cache_salt (absent: none). */ cacheSalt?: string | null } & PageTokens & Medium)
  | ({ type: "BlockRemoved"; hashes: bigint[] } & Medium)
  | { type: "AllBlocksCleared" };

export type KvEventSink = (event: KvEvent) => void;

export interface RadixNode {
  readonly id: number;
  /** Key units of this edge; always a whole number of pages (empty only at the root). */
  key: Unit[];
  /** The cache_salt namespace (null: none); every node of a chain has its root child's. */
  namespace: string | null;
  /** Chained SHA-256 digest of every page of `key`. */
  digests: Uint8Array[];
  /** Engine (event) hash of every page of `key`. */
  hashes: bigint[];
  parent: RadixNode | null;
  children: Map<string, RadixNode>;
  /** Running requests that hold this node (and therefore every ancestor). */
  lockRef: number;
  /** Logical clock of the last match/insert touching this node. */
  lastAccess: number;
}

export interface CacheBlock extends PageTokens {
  hash: bigint;
  parent: bigint | null;
  cacheSalt?: string | null;
}

export interface RadixCacheOptions {
  /** EAGLE speculative decoding: bigram keys (SGLang's is_eagle radix cache). */
  bigram?: boolean;
}

const saltEncoder = new TextEncoder();

/** SGLang's salted-chain seed digest: sha256(b"sglang-cache-salt-v1\0" + salt). */
export function cacheSaltSeed(salt: string): Uint8Array {
  return sha256(saltEncoder.encode("sglang-cache-salt-v1\0" + salt));
}

export interface MatchResult {
  /** Matched prefix length in tokens (whole pages). */
  length: number;
  /** Deepest node of the match (the root when nothing matched). */
  node: RadixNode;
}

export class PagedRadixCache {
  readonly pageSize: number;
  readonly bigram: boolean;
  private readonly sink: KvEventSink;
  private root: RadixNode;
  private nextId = 1;
  private clock = 0;
  private tokens = 0;
  private protectedTokenCount = 0;

  constructor(pageSize: number, sink: KvEventSink = () => {}, opts: RadixCacheOptions = {}) {
    if (!Number.isInteger(pageSize) || pageSize < 1) throw new RangeError(`bad page size ${pageSize}`);
    this.pageSize = pageSize;
    this.bigram = opts.bigram ?? false;
    this.sink = sink;
    this.root = this.newNode([], [], [], null, null);
    this.root.lockRef = 1; // the root is never evicted
  }

  /** Tokens held by the tree. */
  get totalTokens(): number {
    return this.tokens;
  }

  /** Tokens in nodes held by running requests. */
  get protectedTokens(): number {
    return this.protectedTokenCount;
  }

  get evictableTokens(): number {
    return this.tokens - this.protectedTokenCount;
  }

  get rootNode(): RadixNode {
    return this.root;
  }

  /**
   * Longest cached prefix of `tokens` in namespace `namespace`, in whole pages of key units
   * (tokens; bigram mode: pairs); splits a node the match ends inside.
   */
  matchPrefix(tokens: readonly number[], namespace: string | null = null, length = tokens.length): MatchResult {
    const { key, keyLength } = this.keyOf(tokens, length);
    return this.walk(key, keyLength, namespace, ++this.clock);
  }

  /**
   * Follows `key` down the tree as far as it is cached, touching every node on the way (LRU) and
   * splitting the node the match ends inside, so the returned node ends exactly at `length`.
   */
  private walk(key: readonly Unit[], keyLength: number, namespace: string | null, now: number): MatchResult {
    let node = this.root;
    node.lastAccess = now;
    let pos = 0;
    while (pos < keyLength) {
      const child = node.children.get(this.childKey(namespace, key, pos));
      if (!child) break;
      child.lastAccess = now;
      const common = this.commonPages(child.key, key, keyLength, pos);
      if (common < child.key.length) {
        node = this.split(child, common);
        pos += common;
        break;
      }
      node = child;
      pos += common;
    }
    return { length: pos, node };
  }

  /**
   * Inserts `tokens` (truncated to whole pages). Returns the deepest node now covering them and how
   * many tokens were already cached. New pages emit one BlockStored each.
   */
  insert(tokens: readonly number[], namespace: string | null = null): { node: RadixNode; alreadyCached: number } {
    const { key, keyLength } = this.keyOf(tokens, tokens.length);
    const now = ++this.clock;
    let { node, length: pos } = this.walk(key, keyLength, namespace, now);
    const alreadyCached = pos;
    if (pos < keyLength) {
      const rest = key.slice(pos, keyLength);
      const prior = node.digests.length > 0 ? node.digests[node.digests.length - 1]! : namespace !== null ? cacheSaltSeed(namespace) : null;
      const { digests, hashes } = this.pageHashes(rest, prior);
      const leaf = this.newNode(rest, digests, hashes, node, namespace);
      leaf.lastAccess = now;
      node.children.set(this.childKey(namespace, rest, 0), leaf);
      this.tokens += rest.length;
      this.emitStored(leaf);
      node = leaf;
    }
    return { node, alreadyCached };
  }

  /** Pins `node` and its ancestors against eviction. */
  incLockRef(node: RadixNode): void {
    for (let n: RadixNode | null = node; n && n !== this.root; n = n.parent) {
      if (n.lockRef === 0) this.protectedTokenCount += n.key.length;
      n.lockRef++;
    }
  }

  decLockRef(node: RadixNode): void {
    for (let n: RadixNode | null = node; n && n !== this.root; n = n.parent) {
      if (n.lockRef <= 0) throw new Error(`lock underflow on radix node ${n.id}`);
      n.lockRef--;
      if (n.lockRef === 0) this.protectedTokenCount -= n.key.length;
    }
  }

  /**
   * Evicts least-recently-used unreferenced leaves (whole nodes) until at least `numTokens` tokens
   * were freed or nothing evictable is left. Returns the tokens freed.
   */
  evict(numTokens: number): number {
    if (numTokens <= 0) return 0;
    const heap = new NodeHeap();
    for (const leaf of this.leaves()) if (leaf.lockRef === 0) heap.push(leaf);
    let freed = 0;
    while (freed < numTokens) {
      const leaf = heap.pop();
      if (!leaf) break;
      if (leaf.lockRef > 0 || leaf.children.size > 0) continue;
      const parent = leaf.parent!;
      parent.children.delete(this.childKey(leaf.namespace, leaf.key, 0));
      leaf.parent = null;
      this.tokens -= leaf.key.length;
      freed += leaf.key.length;
      this.sink({ type: "BlockRemoved", hashes: leaf.hashes.slice() });
      if (parent !== this.root && parent.children.size === 0 && parent.lockRef === 0) heap.push(parent);
    }
    return freed;
  }

  /** Drops everything (flush_cache). Only valid while no request holds a node. */
  reset(): void {
    if (this.protectedTokenCount > 0) throw new Error("cannot reset a radix cache with locked nodes");
    this.root = this.newNode([], [], [], null, null);
    this.root.lockRef = 1;
    this.tokens = 0;
    this.sink({ type: "AllBlocksCleared" });
  }

  /** Every cached page, parents before children. */
  dump(): CacheBlock[] {
    const out: CacheBlock[] = [];
    const stack: RadixNode[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      let parent = node.parent ? lastHash(node.parent) : null;
      for (let p = 0; p < node.hashes.length; p++) {
        const h = node.hashes[p]!;
        out.push({ hash: h, parent, ...this.pageTokens(node.key, p), ...(node.namespace !== null ? { cacheSalt: node.namespace } : {}) });
        parent = h;
      }
      for (const child of node.children.values()) stack.push(child);
    }
    return out;
  }

  /** Node count excluding the root (tests). */
  nodeCount(): number {
    let n = 0;
    const stack: RadixNode[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      n += node.children.size;
      for (const c of node.children.values()) stack.push(c);
    }
    return n;
  }

  /**
   * The radix key of the first `length` tokens and its length truncated to whole pages: the tokens
   * themselves (not copied: a 32k-token prompt is a large-object allocation per copy), or (bigram)
   * their pairs.
   */
  private keyOf(tokens: readonly number[], length: number): { key: readonly Unit[]; keyLength: number } {
    const key: readonly Unit[] = this.bigram ? bigramUnits(tokens.slice(0, length)) : tokens;
    const n = this.bigram ? key.length : length;
    return { key, keyLength: n - (n % this.pageSize) };
  }

  /** Children are keyed by namespace and first page (SGLang's get_child_key with extra_key). */
  private childKey(namespace: string | null, key: readonly Unit[], pos: number): string {
    return (namespace === null ? "-" : "+" + namespace) + "\u0001" + key.slice(pos, pos + this.pageSize).join(";");
  }

  /** SHA-256 page chain of `units` from `prior`; a bigram page hashes both elements of each pair. */
  private pageHashes(units: readonly Unit[], prior: Uint8Array | null): { digests: Uint8Array[]; hashes: bigint[] } {
    if (!this.bigram) return engineBlockHashes(units as number[], this.pageSize, prior);
    return engineBlockHashes(units.flatMap((u) => pairOf(u)), 2 * this.pageSize, prior);
  }

  /** Page `p` of a node's key as events carry it. */
  private pageTokens(key: readonly Unit[], p: number): PageTokens {
    const page = key.slice(p * this.pageSize, (p + 1) * this.pageSize);
    if (!this.bigram) return { tokens: page as number[] };
    const pairs = page.map(pairOf);
    return { tokens: pairs.map((x) => x[0]), pairs };
  }

  /** Common prefix of `nodeKey` and `key[pos..]`, in whole pages. */
  private commonPages(nodeKey: readonly Unit[], key: readonly Unit[], keyLength: number, pos: number): number {
    const max = Math.min(nodeKey.length, keyLength - pos);
    let i = 0;
    while (i < max && nodeKey[i] === key[pos + i]) i++;
    return i - (i % this.pageSize);
  }

  /** Splits `child` after `at` tokens; the new upper node keeps the hashes of its pages. */
  private split(child: RadixNode, at: number): RadixNode {
    const pages = at / this.pageSize;
    const parent = child.parent!;
    const upper = this.newNode(child.key.slice(0, at), child.digests.slice(0, pages), child.hashes.slice(0, pages), parent, child.namespace);
    upper.lockRef = child.lockRef;
    upper.lastAccess = child.lastAccess;
    parent.children.set(this.childKey(child.namespace, upper.key, 0), upper);
    child.key = child.key.slice(at);
    child.digests = child.digests.slice(pages);
    child.hashes = child.hashes.slice(pages);
    child.parent = upper;
    upper.children.set(this.childKey(child.namespace, child.key, 0), child);
    return upper;
  }

  private *leaves(): Generator<RadixNode> {
    const stack: RadixNode[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      if (node.children.size === 0 && node !== this.root) yield node;
      for (const c of node.children.values()) stack.push(c);
    }
  }

  private emitStored(node: RadixNode): void {
    let parent = node.parent && node.parent !== this.root ? lastHash(node.parent) : null;
    for (let p = 0; p < node.hashes.length; p++) {
      const h = node.hashes[p]!;
      this.sink({
        type: "BlockStored",
        hash: h,
        parent,
        ...this.pageTokens(node.key, p),
        blockSize: this.pageSize,
        ...(node.namespace !== null ? { cacheSalt: node.namespace } : {}),
      });
      parent = h;
    }
  }

  private newNode(key: Unit[], digests: Uint8Array[], hashes: bigint[], parent: RadixNode | null, namespace: string | null): RadixNode {
    return { id: this.nextId++, key, namespace, digests, hashes, parent, children: new Map(), lockRef: 0, lastAccess: this.clock };
  }
}

/** `[t0, t1, t2]` → `["t0,t1", "t1,t2"]` (SGLang's convert_to_bigram_key, as comparable units). */
function bigramUnits(tokens: readonly number[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < tokens.length; i++) out.push(`${tokens[i]},${tokens[i + 1]}`);
  return out;
}

function pairOf(u: Unit): [number, number] {
  const s = String(u);
  const i = s.indexOf(",");
  return [Number(s.slice(0, i)), Number(s.slice(i + 1))];
}

function lastHash(node: RadixNode): bigint | null {
  return node.hashes.length > 0 ? node.hashes[node.hashes.length - 1]! : null;
}

/** Min-heap by (lastAccess, id): the least recently used leaf first, ties by creation order. */
class NodeHeap {
  private readonly items: RadixNode[] = [];

  push(node: RadixNode): void {
    const a = this.items;
    a.push(node);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(a[i]!, a[p]!)) break;
      [a[i], a[p]] = [a[p]!, a[i]!];
      i = p;
    }
  }

  pop(): RadixNode | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && less(a[l]!, a[m]!)) m = l;
        if (r < a.length && less(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top;
  }
}

function less(a: RadixNode, b: RadixNode): boolean {
  return a.lastAccess !== b.lastAccess ? a.lastAccess < b.lastAccess : a.id < b.id;
}
