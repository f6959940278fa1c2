/**
 * Block hashes of a media request's routed view (template tokens with every media token set to its
 * item's pad value), reusing the earlier turns' blocks: per isolate, the view of each request up to
 * its last `<|im_start|>` (the generation prompt, which the next turn starts with) is kept with its
 * full blocks' local hashes, as the prompt-prefix cache keeps text (src/prompt/prefix-cache.ts).
 *
 * Exact: a local block hash is a function of the block's tokens only (block-hash.ts), and a kept
 * prefix is used only when its tokens equal the request's (compared, never trusted to a key). A
 * prefix extends the one it was found from and keeps only its own tokens and hashes, so the turns of
 * a conversation share memory, and its hashes array is the same object on every later turn (the
 * namespace mapping of cache-salt.ts is then done once per piece). Entries are per namespace and
 * block size, so no entry serves two tenants. Lookup: an xxh3 of the prefix length and a window of
 * its tokens at each `<|im_start|>` from the end, so a hit costs the new tokens plus one compare.
 * Bounded by estimated bytes, LRU.
 */
import { localBlockHashesOfParts } from "../../blocks/block-hash.ts";
import { xxh3_64 } from "../../util/hash.ts";

/** Estimated bytes of all kept views (4 B a token, ~48 B a block hash): ~40 conversations of 32k. */
export const DEFAULT_VIEW_HASHES_BYTES = 8 * 1024 * 1024;
const KEY_HEAD = 64;
const KEY_TAIL = 256;
const MAX_BUCKET = 4;

interface Node {
  parent: Node | null;
  key: bigint;
  scope: string;
  /** Own tokens: the view from the parent's end to `end`. */
  tokens: Uint32Array;
  /** Local hashes of blocks [parent.blocks, blocks). */
  hashes: bigint[];
  end: number;
  blocks: number;
  holders: number;
  bytes: number;
}

export interface ViewHashes {
  localHashes: bigint[];
  /** localHashes as consecutive pieces: kept prefixes' own arrays (the same objects on every hit), then this request's. */
  hashPieces: bigint[][];
  /** Leading view tokens whose block hashes came from a kept prefix. */
  reusedTokens: number;
}

export interface ViewHashStats {
  hits: number;
  misses: number;
  hashedBlocks: number;
  entries: number;
  bytes: number;
  maxBytes: number;
}

function chainOf(n: Node): Node[] {
  const out: Node[] = [];
  for (let x: Node | null = n; x; x = x.parent) out.push(x);
  return out.reverse();
}

function equalAt(view: Uint32Array, at: number, piece: Uint32Array): boolean {
  for (let i = 0; i < piece.length; i++) if (view[at + i] !== piece[i]) return false;
  return true;
}

export class ViewHashCache {
  readonly maxBytes: number;
  private readonly buckets = new Map<bigint, Node[]>();
  private readonly lru = new Set<Node>();
  private readonly encoder = new TextEncoder();
  private bytes = 0;
  private s = { hits: 0, misses: 0, hashedBlocks: 0 };

  constructor(maxBytes = DEFAULT_VIEW_HASHES_BYTES) {
    this.maxBytes = maxBytes;
  }

  /**
   * localBlockHashes(view, blockSize), from the longest kept prefix ending at an `imStart` token.
   * `scope` names what else the view's meaning depends on (the namespace). Requires initHashing().
   */
  hashes(view: Uint32Array, blockSize: number, imStart: number, scope: string): ViewHashes {
    const fullScope = `${blockSize}\u0000${scope}`;
    const scopeHash = Number(xxh3_64(this.encoder.encode(fullScope)) & 0xffffffffn);
    const last = view.lastIndexOf(imStart);
    let hit: Node | null = null;
    let chain: Node[] = [];
    const lastKey = last > 0 ? this.key(view, last, scopeHash) : 0n;
    for (let p = last; p > 0 && !hit; p = view.lastIndexOf(imStart, p - 1)) {
      const bucket = this.buckets.get(p === last ? lastKey : this.key(view, p, scopeHash));
      for (const n of bucket ?? []) {
        if (n.end !== p || n.scope !== fullScope) continue;
        const c = chainOf(n);
        if (c.every((x) => equalAt(view, x.end - x.tokens.length, x.tokens))) {
          hit = n;
          chain = c;
          break;
        }
      }
    }
    const reusedBlocks = hit ? hit.blocks : 0;
    const fresh = localBlockHashesOfParts([view.subarray(reusedBlocks * blockSize)], blockSize);
    this.s.hashedBlocks += fresh.length;
    const pieces = hit ? [...chain.map((x) => x.hashes), fresh] : [fresh];
    const localHashes = hit ? ([] as bigint[]).concat(...pieces) : fresh;
    if (hit) {
      this.s.hits++;
      this.lru.delete(hit);
      this.lru.add(hit);
    } else this.s.misses++;
    const from = hit ? hit.end : 0;
    if (last > from) {
      const blocks = Math.floor(last / blockSize);
      const tokens = view.slice(from, last);
      const hashes = localHashes.slice(reusedBlocks, blocks);
      const bytes = 4 * tokens.length + 48 * hashes.length + 2 * fullScope.length + 240;
      if (bytes <= this.maxBytes / 4) this.store({ parent: hit, key: lastKey, scope: fullScope, tokens, hashes, end: last, blocks, holders: 0, bytes });
    }
    return { localHashes, hashPieces: pieces, reusedTokens: hit ? hit.end : 0 };
  }

  stats(): ViewHashStats {
    return { ...this.s, entries: this.lru.size, bytes: this.bytes, maxBytes: this.maxBytes };
  }

  /** [prefix length | scope hash | the prefix's first KEY_HEAD and last KEY_TAIL tokens]. */
  private key(view: Uint32Array, end: number, scopeHash: number): bigint {
    const head = view.subarray(0, Math.min(KEY_HEAD, end));
    const tail = view.subarray(Math.max(0, end - KEY_TAIL), end);
    const buf = new Uint32Array(2 + head.length + tail.length);
    buf[0] = end;
    buf[1] = scopeHash;
    buf.set(head, 2);
    buf.set(tail, 2 + head.length);
    return xxh3_64(new Uint8Array(buf.buffer));
  }

  private store(n: Node): void {
    const bucket = this.buckets.get(n.key);
    if (bucket?.some((x) => x.end === n.end && x.scope === n.scope && x.parent === n.parent)) return;
    if (bucket && bucket.length >= MAX_BUCKET) this.drop(bucket[0]!);
    const b = this.buckets.get(n.key);
    if (b) b.push(n);
    else this.buckets.set(n.key, [n]);
    this.lru.add(n);
    for (let x: Node | null = n; x; x = x.parent) if (x.holders++ === 0) this.bytes += x.bytes;
    for (const old of this.lru) {
      if (this.bytes <= this.maxBytes) break;
      if (old !== n) this.drop(old);
    }
    // Its own chain alone over the budget (one conversation longer than all of it): not kept.
    if (this.bytes > this.maxBytes) this.drop(n);
  }

  /** Forgets a prefix; its pieces are freed once no kept prefix extends them. */
  private drop(n: Node): void {
    const bucket = this.buckets.get(n.key);
    if (!bucket || !this.lru.delete(n)) return;
    const i = bucket.indexOf(n);
    if (i >= 0) bucket.splice(i, 1);
    if (bucket.length === 0) this.buckets.delete(n.key);
    for (let x: Node | null = n; x; x = x.parent) if (--x.holders === 0) this.bytes -= x.bytes;
  }
}

let shared: ViewHashCache | null = null;

/** The isolate's cache (edge/chat/layout.ts; its budget is listed in cache-budgets.ts). */
export function sharedViewHashes(): ViewHashCache {
  return (shared ??= new ViewHashCache());
}
