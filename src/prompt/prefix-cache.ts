/**
 * Prompt-prefix cache: the token ids and local block hashes of a conversation's earlier turns, kept
 * per isolate, so the next turn tokenizes and hashes only what is new.
 *
 * Why splitting is exact: the tokenizer cuts added tokens out of the text first (leftmost-longest)
 * and encodes the text between them independently. So at any offset p where the full scan matches
 * an added token, encode(text) = encode(text[:p]) ++ encode(text[p:]). The split token
 * (`<|im_start|>`, which opens every message) is used only when no added token can overlap an
 * occurrence of it from the left or extend it to the right; then every occurrence is such a match
 * start (checked once per tokenizer; otherwise the cache is bypassed).
 *
 * Each request stores its prefix up to its last split point (the generation prompt
 * `<|im_start|>assistant`), which the next turn starts with. A stored prefix extends the one it was
 * built from: it keeps only its own text, ids and block hashes and points to its parent, so turns
 * and branches of one conversation share their common part (memory is counted once per piece).
 *
 * Lookup walks the split points from the end of the prompt backwards, so a hit costs O(new text)
 * plus one compare of the prefix: each prefix's key is an xxh3 of its length and a window of its
 * text (head and tail), and a candidate is used only if its whole text equals the request's prefix.
 * A key collision therefore costs a compare, never a wrong token; colliding prefixes share a small
 * bucket. (Hashing the whole prefix instead, chained over the messages, was measured at ~75 % of a
 * hit.) Keys include the tokenizer (model family) and the block size. Bounded by cached tokens, LRU.
 *
 * Partitioned (src/edge/cache-salt.ts edgeCachePartition): a hit saves the time of tokenizing and
 * hashing a prefix, so it would tell a caller that someone else sent that prefix. Every entry keeps
 * its partition id in its scope, which a hit compares (the id is also mixed into the key, so
 * tenants never share a bucket); "" is the common partition. The tokenizer's segment cache is read
 * in the same partition.
 */
import { localBlockHashes, localBlockHashesOfParts, routedCopyBytes } from "../blocks/block-hash.ts";
import { xxh3_64 } from "../util/hash.ts";
import { HeldChains } from "../util/held-chains.ts";
import { ownString } from "../util/own-string.ts";
import { PieceText, SeenPieces } from "../util/piece-text.ts";
import { textAt } from "../util/text-at.ts";

/** What the cache needs from a tokenizer (QwenTokenizer satisfies it). */
export interface PrefixTokenizer {
  readonly family: string;
  readonly addedTokens: readonly { content: string }[];
  /** `partition`: the tokenizer caches' (QwenTokenizer.encode); `sourceChars`: the length of the unsliced string text was sliced from. */
  encode(text: string, partition: string, sourceChars?: number): number[];
}

export const SPLIT_TOKEN = "<|im_start|>";
/** Measured 20 B per cached token in Node (8 B ids, UTF-16 text); ~13 B with workerd's 4 B ids: 13–20 MB. */
export const DEFAULT_PREFIX_CACHE_TOKENS = 1_000_000;
/** The byte bound that holds whatever the tokens-per-character ratio (pieceBytes estimates each piece). */
export const DEFAULT_PREFIX_CACHE_BYTES = 20 * 1024 * 1024;
/** Characters of a prefix's head and tail that go into its key (the full text is compared on a hit). */
const KEY_HEAD_CHARS = 128;
const KEY_TAIL_CHARS = 512;
/** Prefixes with one key kept side by side; more evict the oldest of them. */
const MAX_BUCKET = 4;
/**
 * Prompt pieces a node's text is remembered as equal to (PieceText.matches): a turn chain's
 * entries stay the same objects turn after turn, so a conversation's held history is compared once,
 * not on every turn.
 */
const SEEN_PIECES = 4;
/** Estimated bytes of a node's SeenPieces: the object, two arrays of SEEN_PIECES slots, and the identities it may keep alive. */
const SEEN_BYTES = 256;

export interface PrefixCacheOptions {
  /** Total tokens of all cached pieces (default DEFAULT_PREFIX_CACHE_TOKENS). */
  maxTokens?: number;
  /** A larger new piece is not stored, so one huge prompt cannot flush the rest (default maxTokens / 4). */
  maxEntryTokens?: number;
  /** Estimated bytes of all cached pieces (default DEFAULT_PREFIX_CACHE_BYTES); a piece over a quarter is not stored. */
  maxBytes?: number;
}

/**
 * Estimated bytes one cached piece holds in V8: its text (UTF-16 worst case), its ids (a JS array of
 * small integers, 8 B a slot without pointer compression), its block hashes (a BigInt object each
 * plus its slot), the node, key, bucket and LRU slot around them (448 B: a one-turn piece of ~40
 * characters and 10 ids retained ~560 B in Node 22, heap after GC over 8k pieces), and the routed
 * copy of its hashes the edge keeps as long as the piece (routedCopyBytes). `partitionChars`: its
 * scope's partition id, counted as if each piece held its own copy.
 */
export function pieceBytes(chars: number, ids: number, hashes: number, partitionChars = 0): number {
  return 2 * chars + 8 * ids + 40 * hashes + 2 * partitionChars + 448 + routedCopyBytes(hashes);
}

export interface PrefixCacheStats {
  hits: number;
  misses: number;
  /** Requests whose tokenizer's added tokens make the split unsafe (never cached). */
  bypassed: number;
  reusedTokens: number;
  /** Ids copied into one array by EncodedPrompt.tokens() (what idPieces saves). */
  copiedTokens: number;
  /** Block hashes copied into one array by reading EncodedPrompt.localHashes of a prompt in several pieces (what hashPieces saves). */
  joinedHashes: number;
  stores: number;
  evictions: number;
  /** Prefixes that can be looked up. */
  entries: number;
  /** Tokens held (each shared piece once), including pieces kept only as parents. */
  tokens: number;
  maxTokens: number;
  /** Estimated bytes held (pieceBytes of each counted piece). */
  bytes: number;
  maxBytes: number;
}

export interface EncodedPrompt {
  /** Number of tokens: tokenizer.encode(text).length. */
  readonly length: number;
  /** localBlockHashes(tokenizer.encode(text), blockSize). */
  readonly localHashes: bigint[];
  /** Leading tokens taken from the cache (0 on a miss). */
  readonly reusedTokens: number;
  /**
   * localHashes as consecutive pieces: the cached prefixes' own arrays (the same objects on every
   * hit, never modified), then this request's. Per-piece work can be kept per piece (cache-salt.ts).
   */
  readonly hashPieces: readonly (readonly bigint[])[];
  /**
   * tokenizer.encode(text) as consecutive pieces, without copying: the cached prefixes' own arrays
   * (the same objects on every hit, never modified), then this request's up to its last split point
   * (the next turn's cached piece, when stored), then the rest. Every piece but the last ends at a
   * split point. Null when a seeded prefix holds only its last block's ids (then use tokens()).
   */
  readonly idPieces: readonly (readonly number[])[] | null;
  /**
   * tokenizer.encode(text) as a fresh array. Built on demand: routing needs only the count and the
   * hashes, and copying ~32k ids costs more than the rest of a cache hit.
   */
  tokens(): number[];
}

/** A cached prefix = its parent's prefix + its own piece. */
interface Node {
  parent: Node | null;
  key: bigint;
  scope: string;
  /** Own text; the prefix is the parents' texts then this. */
  text: string;
  /** Own token ids (the tokenizer's array itself: copying ~37k ids into a typed array costs ~0.5 ms). */
  ids: readonly number[];
  /** Local hashes of blocks [parent.blocks, blocks). */
  hashes: bigint[];
  /** Prefix totals: characters, tokens, full blocks. */
  end: number;
  count: number;
  blocks: number;
  /** What HeldChains counts: its hold (HeldNode.holders: > 0 while a cached prefix's chain includes it), its pieceBytes and its ids' count. */
  holders: number;
  bytes: number;
  tokens: number;
  /** Seeded (seed()): `ids` holds only the tokens after the last full block, until fillSeeded. */
  seeded?: true;
  /** The prompt pieces its text was found equal to (made when first compared with a prompt whose pieces have identities; SEEN_BYTES). */
  seen: SeenPieces | null;
  /** A head identity (PieceText.headThrough) its whole prefix was last found equal to; null: none (counted in the node's 448 B). */
  whole: object | null;
}

/** A text prefix's tokenization as a stored record keeps it (PrefixCache.seed). */
export interface SeedPrefix {
  /** Ends where the tokenizer splits (just before a SPLIT_TOKEN); the whole text, from the prompt's start. */
  text: string;
  /** tokenizer.encode(text).length. */
  count: number;
  /** localBlockHashes of its full blocks. */
  hashes: bigint[];
  /** Its tokens after the last full block (count mod blockSize of them). */
  tailIds: number[];
}

interface TokenizerInfo {
  id: number;
  family: string;
  safe: boolean;
}

/**
 * True when every occurrence of `split` in any text is a match start of the tokenizer's added-token
 * scan: split is an added token, no other added token starts with it (longest match would win), and
 * no added token's proper suffix lines up with it (a match starting earlier could cover it).
 */
export function splitIsSafe(addedTokens: readonly { content: string }[], split: string): boolean {
  if (!addedTokens.some((t) => t.content === split)) return false;
  for (const { content: t } of addedTokens) {
    if (t !== split && t.startsWith(split)) return false;
    for (let d = 1; d < t.length; d++) {
      const tail = t.slice(d);
      if (tail.startsWith(split) || split.startsWith(tail)) return false;
    }
  }
  return true;
}

const encoder = new TextEncoder();
type Ids = readonly number[];
const EMPTY: readonly number[] = [];

/** Where encoded() counts the copies its prompt's readers make. */
interface CopyCounters {
  copied(ids: number): void;
  joined(hashes: number): void;
}

function encoded(count: CopyCounters, chunks: readonly Ids[], length: number, hashPieces: readonly bigint[][], reusedTokens: number, reencode?: () => number[]): EncodedPrompt {
  const tokens = reencode ?? ((): number[] => {
    count.copied(length);
    const out = new Array<number>(length);
    let n = 0;
    for (const c of chunks) for (let i = 0; i < c.length; i++) out[n++] = c[i]!;
    return out;
  });
  // Joined when read: a media prompt routes on its view's hashes, a namespaced one on the pieces.
  let joined: bigint[] | null = null;
  return {
    length,
    get localHashes() {
      if (joined) return joined;
      if (hashPieces.length === 1) return (joined = hashPieces[0]!);
      joined = ([] as bigint[]).concat(...hashPieces);
      count.joined(joined.length);
      return joined;
    },
    reusedTokens,
    hashPieces,
    idPieces: reencode ? null : chunks,
    tokens,
  };
}

/**
 * The ids of a span of a prompt that starts and ends at split points, read from the prompt's ids
 * (EncodedPrompt.idPieces) instead of encoded again: `text` is the span, `from` the index of its
 * first token, `splitId` SPLIT_TOKEN's id. Where splitIsSafe holds every SPLIT_TOKEN of a text is
 * that one token, so the span's ids run from `from` up to the split token after its own ones. Null
 * where they do not line up: the span does not start with a split token (unless empty), its first
 * id is not one, or no split token follows it.
 */
export function splitSpanIds(pieces: readonly (readonly number[])[], from: number, text: string, splitId: number): number[] | null {
  if (text.length > 0 && !text.startsWith(SPLIT_TOKEN)) return null;
  let splits = 0;
  for (let at = text.indexOf(SPLIT_TOKEN); at !== -1; at = text.indexOf(SPLIT_TOKEN, at + SPLIT_TOKEN.length)) splits++;
  const out: number[] = [];
  let seen = 0;
  let skip = from;
  for (const piece of pieces) {
    if (skip >= piece.length) {
      skip -= piece.length;
      continue;
    }
    for (let i = skip; i < piece.length; i++) {
      const id = piece[i]!;
      if (out.length === 0 && id !== splitId) return null;
      if (id === splitId && seen++ === splits) return out;
      out.push(id);
    }
    skip = 0;
  }
  return null;
}

/** An entry's scope: its partition, tokenizer and block size (compared on every hit). */
function scopeOf(partition: string, info: TokenizerInfo, blockSize: number): string {
  return `${partition}\u0001${info.family}#${info.id}/${blockSize}`;
}

/** The partition's part of an entry's key (0 for the common one). */
function partitionHash(partition: string): bigint {
  return partition === "" ? 0n : xxh3_64(encoder.encode(partition));
}

/** Nodes from the root to n. */
function chainOf(n: Node): Node[] {
  const out: Node[] = [];
  for (let x: Node | null = n; x; x = x.parent) out.push(x);
  return out.reverse();
}

/** Whether `text` is n's prefix: compared piece by piece (each a flat compare), never joining the chain's texts. */
function chainSpells(n: Node, text: string): boolean {
  if (text.length !== n.end) return false;
  for (let x: Node | null = n; x; x = x.parent) if (!textAt(text, x.text, x.end - x.text.length)) return false;
  return true;
}

/** The prefix's ids at positions [start, n.count) (a short run: under one block). */
function idsFrom(n: Node, start: number): number[] {
  const out: number[] = [];
  for (let x: Node | null = n; x && x.count > start; x = x.parent) {
    const begin = x.count - x.ids.length;
    for (let i = x.count - 1; i >= Math.max(start, begin); i--) out.push(x.ids[i - begin]!);
  }
  return out.reverse();
}

/**
 * `text.slice(start, end)` that does not keep all of `text` alive (ownString) unless it is most of
 * it: a short new turn must not pin the whole request.
 */
function ownText(text: PieceText, start: number, end: number): string {
  const s = text.slice(start, end);
  return text.single && 2 * s.length >= text.length ? s : ownString(s);
}

export class PrefixCache {
  readonly maxTokens: number;
  readonly maxEntryTokens: number;
  readonly maxBytes: number;
  /** Key → cached prefixes with that key. */
  private readonly buckets = new Map<bigint, Node[]>();
  /** The cached prefixes (LRU) and the tokens and bytes their pieces hold. */
  private readonly held: HeldChains<Node>;
  private readonly info = new WeakMap<object, TokenizerInfo>();
  private nextTokenizerId = 0;
  private hits = 0;
  private misses = 0;
  private bypassed = 0;
  private reusedTokens = 0;
  private copiedTokens = 0;
  private joinedHashes = 0;
  private stores = 0;
  // [tokenizer id | block size | prefix length | partition hash | UTF-8 of head | UTF-8 of tail]
  private readonly buf = new Uint8Array(20 + 3 * (KEY_HEAD_CHARS + KEY_TAIL_CHARS));
  private readonly bufView = new DataView(this.buf.buffer);
  private readonly counters: CopyCounters = {
    copied: (ids) => {
      this.copiedTokens += ids;
    },
    joined: (hashes) => {
      this.joinedHashes += hashes;
    },
  };

  constructor(options: PrefixCacheOptions = {}) {
    this.maxTokens = options.maxTokens ?? DEFAULT_PREFIX_CACHE_TOKENS;
    this.maxEntryTokens = options.maxEntryTokens ?? Math.floor(this.maxTokens / 4);
    this.maxBytes = options.maxBytes ?? DEFAULT_PREFIX_CACHE_BYTES;
    this.held = new HeldChains<Node>({ maxBytes: this.maxBytes, maxTokens: this.maxTokens, onDrop: (n) => this.unlist(n) });
  }

  /**
   * tokenizer.encode(text) and its local block hashes, reusing the longest cached prefix of
   * `partition` (whose entries this request may use and adds to; "" the common one). Requires initHashing().
   */
  encode(tokenizer: PrefixTokenizer, whole: string | PieceText, blockSize: number, partition: string): EncodedPrompt {
    if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
    // In pieces (the turn chain's): a hit reads the last part and compares piece by piece, never joining the prompt.
    const text = typeof whole === "string" ? PieceText.of(whole) : whole;
    const info = this.tokenizerInfo(tokenizer);
    if (!info.safe) {
      this.bypassed++;
      const tokens = tokenizer.encode(text.toString(), partition);
      return encoded(this.counters, [tokens], tokens.length, [localBlockHashes(tokens, blockSize)], 0);
    }
    const scope = scopeOf(partition, info, blockSize);
    const partitionKey = partitionHash(partition);
    // The last split point (0: none after the start; an empty prefix is never worth a key), then
    // earlier ones until a cached prefix matches. Occurrences cannot overlap (`<|im_start|>` has no border).
    const lastFound = text.lastIndexOf(SPLIT_TOKEN);
    const last = lastFound > 0 ? lastFound : 0;
    const lastKey = last > 0 ? this.key(info, blockSize, partitionKey, text, last) : 0n;
    let hit: Node | null = null;
    let chain: Node[] = [];
    let grew = false;
    const seenOf = (x: Node): SeenPieces => {
      if (x.seen) return x.seen;
      grew = true;
      this.held.grow(x, SEEN_BYTES);
      return (x.seen = new SeenPieces(SEEN_PIECES));
    };
    // No search past a hit: the split before it can lie a whole long message back.
    for (let p = last; p > 0 && !hit; p = hit || p < SPLIT_TOKEN.length ? 0 : text.lastIndexOf(SPLIT_TOKEN, p - SPLIT_TOKEN.length)) {
      const bucket = this.buckets.get(p === last ? lastKey : this.key(info, blockSize, partitionKey, text, p));
      if (!bucket) continue;
      for (const n of bucket) {
        if (n.scope !== scope || n.end !== p) continue;
        // The text decides, not the key (comparing flat slices runs at memcmp speed; parts of pieces
        // found equal before are not compared again, nor a prefix found equal to a head the text holds).
        if (this.spells(n, text, seenOf)) {
          hit = n;
          chain = chainOf(n);
          // The next turn's hit goes on from this one: its compare stops here.
          n.whole = text.headThrough(n.end);
          break;
        }
      }
    }
    const from = hit ? hit.end : 0;
    // Two encodes, split at the last split point, so the stored prefix's token count is known.
    const mid = last > from ? tokenizer.encode(text.slice(from, last), partition, text.length) : EMPTY;
    const tail = tokenizer.encode(from === 0 && last === 0 ? text.toString() : text.slice(Math.max(from, last), text.length), partition, text.length);
    const reused = hit ? hit.count : 0;
    const length = reused + mid.length + tail.length;

    // Hash from the first block the cached hashes do not cover (the prefix's partial last block on).
    const reusedBlocks = hit ? hit.blocks : 0;
    const head = reusedBlocks * blockSize;
    const fresh = localBlockHashesOfParts(hit && head < reused ? [idsFrom(hit, head), mid, tail] : [mid, tail], blockSize);

    if (hit) {
      this.hits++;
      this.reusedTokens += reused;
      this.held.touch(hit);
    } else this.misses++;
    // What the compares remembered counts from now on.
    if (grew) this.held.evictOverBudget();
    if (last > from && mid.length <= this.maxEntryTokens && this.held.admits(pieceBytes(last - from, mid.length, mid.length / blockSize + 1, partition.length))) {
      const count = reused + mid.length;
      const blocks = Math.floor(count / blockSize);
      const pieceText = ownText(text, from, last);
      const hashes = fresh.slice(0, blocks - reusedBlocks);
      this.store({
        parent: hit,
        key: lastKey,
        scope,
        text: pieceText,
        ids: mid,
        hashes,
        end: last,
        count,
        blocks,
        holders: 0,
        bytes: pieceBytes(pieceText.length, mid.length, hashes.length, partition.length),
        tokens: mid.length,
        seen: null,
        whole: null,
      });
    }
    // A seeded prefix (always a chain's root) has no ids for its full blocks: they are encoded anew
    // when asked for, and kept, so the conversation's later turns get idPieces.
    const seededRoot = chain[0]?.seeded ? chain[0] : null;
    const reencode = seededRoot
      ? (): number[] => {
          const ids = tokenizer.encode(text.toString(), partition);
          this.fillSeeded(seededRoot, ids);
          return ids;
        }
      : undefined;
    return encoded(this.counters, [...chain.map((x) => x.ids), mid, tail], length, [...chain.map((x) => x.hashes), fresh], reused, reencode);
  }

  /**
   * Seeds the tokenization of a prefix computed elsewhere (a stored response, written by the edge
   * itself), so a request starting with `prefix.text` encodes and hashes only what follows it. The
   * prefix must end at a split point, as every stored prefix does; used only by a request whose text
   * starts with it (compared, as any entry) in `partition` (the seeding caller's). Requires initHashing().
   */
  seed(tokenizer: PrefixTokenizer, blockSize: number, prefix: SeedPrefix, partition: string): void {
    const info = this.tokenizerInfo(tokenizer);
    const end = prefix.text.length;
    if (!info.safe || end === 0) return;
    const scope = scopeOf(partition, info, blockSize);
    const key = this.key(info, blockSize, partitionHash(partition), PieceText.of(prefix.text), end);
    if (this.buckets.get(key)?.some((n) => n.scope === scope && n.end === end && chainSpells(n, prefix.text))) return;
    const blocks = Math.floor(prefix.count / blockSize);
    if (prefix.hashes.length !== blocks || prefix.tailIds.length !== prefix.count - blocks * blockSize) return;
    const bytes = pieceBytes(end, prefix.tailIds.length, blocks, partition.length);
    if (prefix.count > this.maxEntryTokens || !this.held.admits(bytes)) return;
    this.store({ parent: null, key, scope, text: prefix.text, ids: prefix.tailIds, hashes: prefix.hashes, end, count: prefix.count, blocks, holders: 0, bytes, tokens: prefix.tailIds.length, seeded: true, seen: null, whole: null });
  }

  /**
   * Drops every cached prefix whose chain holds a piece `prompt` was built from (its idPieces and
   * hashPieces are those pieces' own arrays, the one it stored included): a sampled check found
   * its ids or hashes wrong (edge/chat/exactness-check.ts). The count dropped.
   */
  dropPiecesOf(prompt: EncodedPrompt): number {
    const pieces = new Set<object>([...prompt.hashPieces, ...(prompt.idPieces ?? [])]);
    return this.held.dropWhere((n) => {
      for (let x: Node | null = n; x; x = x.parent) if (pieces.has(x.ids) || pieces.has(x.hashes)) return true;
      return false;
    });
  }

  stats(): PrefixCacheStats {
    return {
      hits: this.hits,
      misses: this.misses,
      bypassed: this.bypassed,
      reusedTokens: this.reusedTokens,
      copiedTokens: this.copiedTokens,
      joinedHashes: this.joinedHashes,
      stores: this.stores,
      evictions: this.held.evictions,
      entries: this.held.entries,
      tokens: this.held.tokens,
      maxTokens: this.maxTokens,
      bytes: this.held.bytes,
      maxBytes: this.maxBytes,
    };
  }

  clear(): void {
    this.buckets.clear();
    this.held.clear();
    this.hits = this.misses = this.bypassed = this.reusedTokens = this.copiedTokens = this.joinedHashes = this.stores = 0;
  }

  private tokenizerInfo(tokenizer: PrefixTokenizer): TokenizerInfo {
    let info = this.info.get(tokenizer);
    if (!info) {
      // Identity, not just the family name: two tokenizers never share entries.
      info = { id: this.nextTokenizerId++, family: tokenizer.family, safe: splitIsSafe(tokenizer.addedTokens, SPLIT_TOKEN) };
      this.info.set(tokenizer, info);
    }
    return info;
  }

  /**
   * Whether text[0, n.end) is n's prefix: each node's own text compared from n up, until a node
   * whose whole prefix was found equal to a head identity that `text` also holds over it (the
   * same object stands for the same text: PieceText.headThrough), so a turn compares only what
   * it added since the last hit, not its whole history piece by piece.
   */
  private spells(n: Node, text: PieceText, seenOf: (x: Node) => SeenPieces): boolean {
    for (let x: Node | null = n; x; x = x.parent) {
      if (x.whole !== null && text.headThrough(x.end) === x.whole) return true;
      if (!text.matches(x.end - x.text.length, x.text, text.identified ? seenOf(x) : null)) return false;
    }
    return true;
  }

  /** Key of text[0:p]: xxh3 of the scope (tokenizer, block size, partition), p, and the prefix's first and last characters. */
  private key(info: TokenizerInfo, blockSize: number, partitionKey: bigint, text: PieceText, p: number): bigint {
    const v = this.bufView;
    v.setUint32(0, info.id, true);
    v.setUint32(4, blockSize, true);
    v.setUint32(8, p, true);
    v.setBigUint64(12, partitionKey, true);
    let n = 20;
    const headEnd = Math.min(p, KEY_HEAD_CHARS);
    n += encoder.encodeInto(text.slice(0, headEnd), this.buf.subarray(n)).written;
    n += encoder.encodeInto(text.slice(Math.max(headEnd, p - KEY_TAIL_CHARS), p), this.buf.subarray(n)).written;
    return xxh3_64(this.buf.subarray(0, n));
  }

  private store(n: Node): void {
    if (n.count === 0) return;
    const bucket = this.buckets.get(n.key);
    if (bucket && bucket.length >= MAX_BUCKET) this.held.drop(bucket[0]!);
    const b = this.buckets.get(n.key);
    if (b) b.push(n);
    else this.buckets.set(n.key, [n]);
    this.held.keep(n);
    this.stores++;
    this.held.evictOverBudget();
  }

  /** A seeded prefix's ids from an encode of a text it starts; kept when they end in its own last-block ids. */
  private fillSeeded(n: Node, ids: readonly number[]): void {
    if (!n.seeded || ids.length < n.count) return;
    const own = ids.slice(0, n.count);
    for (let i = 0; i < n.ids.length; i++) if (own[n.count - n.ids.length + i] !== n.ids[i]) return;
    this.held.grow(n, pieceBytes(n.text.length, own.length, n.hashes.length, n.scope.indexOf("\u0001")) - n.bytes, own.length - n.ids.length);
    n.ids = own;
    delete n.seeded;
    this.held.evictOverBudget();
  }

  /** Takes a cached prefix that HeldChains dropped out of its bucket (the GC frees pieces no cached prefix extends). */
  private unlist(n: Node): void {
    const bucket = this.buckets.get(n.key)!;
    if (bucket.length === 1) this.buckets.delete(n.key);
    else bucket.splice(bucket.indexOf(n), 1);
  }
}

let shared: PrefixCache | null = null;
/** The isolate's prefix cache (the edge's text path and the bench use this one). */
export function sharedPrefixCache(): PrefixCache {
  shared ??= new PrefixCache();
  return shared;
}
