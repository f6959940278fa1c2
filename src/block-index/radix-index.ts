/**
 * The router's block index: a radix tree over local block hashes (xxh3 of each full block's
 * tokens), one shared tree for all workers of a pool. Each node records which workers hold that
 * block. The engine's own block hashes are opaque 64-bit ids: they are only used to find the node a
 * parent link or a removal refers to (one lookup table per worker), so the router never has to
 * reproduce the engine's hash function. Overlap = consecutive leading blocks a worker holds.
 *
 * Layout (why: ≤ 100 B per indexed block and no GC pressure at millions of blocks, where one JS
 * object + Map per node and a Map of strings per worker cost several hundred bytes per block):
 * - Nodes live in Int32Array chunks of CHUNK_NODES records, one record of `5 + W` words per node:
 *   parent id, local hash lo/hi, child count, prefix key, then a W-word bitmask of worker slots
 *   (W = 2 covers 64 workers; the mask widens, re-laying out the records once, when a higher slot
 *   appears). Node n is record n & IN_CHUNK of chunk n >>> CHUNK_BITS. Chunks, not one growable
 *   array: growth adds a chunk instead of copying every record into a fresh 1.5× array, whose
 *   first touch of new pages cost more than the stores themselves while an index fills (page
 *   faults), and the reserve stays under one chunk. Freed records are chained in a free list and
 *   reused. Node 0 is the root.
 * - The prefix key is a 32-bit rolling hash of the node's path (mix(parent key, local hash)). The
 *   child table is keyed by it: open addressing over [prefix key, child id] pairs (linear probing,
 *   backward-shift deletion, load ≤ 0.7); a hit is confirmed exactly against the child's record
 *   (parent id + local hash), so key collisions only cost a probe. Because the keys of a query's
 *   nodes follow from the query alone, findMatches computes them up front and touches the buckets
 *   and records of the next blocks before walking: the cache misses of a cold path overlap instead
 *   of forming one dependent chain per level (that chain, ~2 misses per block, dominates at 1 M
 *   blocks). Stores do the same for a chain's child and engine buckets.
 * - Each worker slot has its own open-addressing table engine hash (lo, hi) → node id (load ≤
 *   0.7). Iterating it enumerates that worker's blocks, so clearing a worker is O(its blocks).
 *
 * Semantics (a path = the sequence of local hashes from the root; a node interns one path):
 * - stored(w, parent, blocks): start at the node of engine hash `parent` of w (root if null),
 *   walk/create one child per block, mark w on it and point w's engine hash at it. If that engine
 *   hash pointed at another node before, w is detached from that node first (the engine re-used a
 *   hash for another position).
 * - removed(w, hashes): forget each engine hash and detach w from its node. Removing one of two
 *   engine hashes of w that alias the same node detaches w (as before); the remaining alias keeps
 *   the node alive (an extra reference) so later stores below it stay consistent.
 * - A node with no worker, no child and no engine hash pointing at it is pruned.
 * - Engine hashes are keyed by their 64-bit two's-complement value: "-1" and
 *   "18446744073709551615" are the same block (SGLang emits int64 or uint64 for the same bits).
 */

import { localHashWords, type LocalHashes } from "../blocks/block-hash.ts";
import { WalkMemo } from "./walk-memo.ts";

export interface StoredBlock {
  engineHash: string;
  localHash: bigint;
}

/** A stored block as it travels on the relay wire: decimal engine hash, 16-hex local hash. */
export interface WireBlock {
  h: string;
  l: string;
}

/** A dump row: like WireBlock plus its parent engine hash (null = first block of a chain). */
export interface WireDumpBlock extends WireBlock {
  p: string | null;
}

export type IndexError = "parent_not_found" | "self_parent" | "unknown_worker";
/** Why a whole stored event is void (nothing of it applied): a block that is its own ancestor. */
export type ChainDefect = "self_parent" | "duplicate_in_event";
/** A stored event's outcome: applied (or failed as applyStoredWire fails), void, or refused by `admit`. */
export type StoredEventResult = ApplyResult | { ok: false; applied: 0; voided: ChainDefect } | { ok: false; applied: 0; refused: true };
export type ApplyResult = { ok: true; applied: number } | { ok: false; applied: number; error: IndexError };

// Node record fields (word offsets inside a record).
const PARENT = 0; // parent node id; next free id while on the free list
const LO = 1; // local hash, low 32 bits
const HI = 2; // local hash, high 32 bits
const KIDS = 3; // number of children
const KEY = 4; // prefix key (rolling 32-bit hash of the path)
const MASK = 5; // first of W mask words

const TWO32 = 4294967296;
const ROOT = 0;
const NO_PARENT = -1;
const ROOT_KEY = 0x2545f491;
/** Blocks whose buckets are touched ahead of the walk (enough to overlap misses, little waste). */
const AHEAD = 32;
/** Records per node chunk (2^13: 224 KiB at 64 workers). The first chunk starts small and doubles up to it. */
const CHUNK_BITS = 13;
const CHUNK_NODES = 1 << CHUNK_BITS;
const IN_CHUNK = CHUNK_NODES - 1;
const FIRST_CHUNK_NODES = 1024;

if (new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) throw new Error("radix index needs a little-endian platform");

/** 3×u32 → u32 mixer (multiply-xorshift; keys are usually already random, tests use small ints). */
function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x5bd1e995, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) ^ c;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}


/**
 * Where a chain of local hashes ends in the tree, as a node of it would be found: the prefix key of
 * the whole path and the last block's local hash (holdsChainEnd), plus the chain's first local hash
 * (the shard that holds it, sharded-index.ts). Computed from the hashes alone, in O(chain length).
 */
export interface ChainEnd {
  key: number;
  lo: number;
  hi: number;
  root: bigint;
}

/**
 * Prefix keys of the query the last findMatches walked, in any RadixIndex (the keys follow from the
 * hashes alone): keys [queryKeyFirst, queryKeyCount) of `queryKeysOf`, an array then
 * `queryKeysLength` long (a walk resumed from its memo at depth d knows them from d - 1 on). A
 * route asks chainEndOf for the same hashes right after its overlaps, so the walked part is not
 * mixed a second time.
 */
let queryKeys = new Int32Array(128);
let queryKeysOf: LocalHashes | null = null;
let queryKeysLength = 0;
let queryKeyFirst = 0;
let queryKeyCount = 0;

/**
 * How many prefix keys of `localHashes` the last walk left in queryKeys (from queryKeyFirst on):
 * found by the array's identity, so callers must not change an array between a walk and its
 * chainEndOf; one whose length changed is not taken for the same query.
 */
function knownQueryKeys(localHashes: LocalHashes): number {
  return localHashes === queryKeysOf && localHashes.length === queryKeysLength ? queryKeyCount : 0;
}

/** The ChainEnd of the first `count` (≥ 1) hashes of `localHashes`; continues from the prefix keys of the last findMatches when it walked the same array (knownQueryKeys). */
export function chainEndOf(localHashes: LocalHashes, count: number): ChainEnd {
  if (!Number.isInteger(count) || count < 1 || count > localHashes.length) throw new RangeError(`bad chain length ${count}`);
  const words = localHashWords(localHashes, count);
  let from = Math.min(knownQueryKeys(localHashes), count);
  if (from - 1 < queryKeyFirst) from = 0;
  let key = from > 0 ? queryKeys[from - 1]! : ROOT_KEY;
  for (let d = from; d < count; d++) key = mix(key, words[2 * d]! | 0, words[2 * d + 1]! | 0) | 0;
  return { key, lo: words[2 * count - 2]! | 0, hi: words[2 * count - 1]! | 0, root: localHashes[0]! };
}

// ---------------------------------------------------------------------------------------------
// 64-bit string parsing without BigInt (BigInt parsing allocates and costs ~10× more per block).

let parsedLo = 0;
let parsedHi = 0;

/** Parses a decimal int64/uint64 into parsedLo/parsedHi (two's complement mod 2^64, as int32 words). */
function parseDecimal64(s: string): void {
  const n = s.length;
  let i = 0;
  let neg = false;
  if (n > 0 && s.charCodeAt(0) === 45) {
    neg = true;
    i = 1;
  }
  const digits = n - i;
  if (digits < 1 || digits > 20) throw new RangeError(`engine hash ${JSON.stringify(s)} is not a decimal 64-bit integer`);
  let lo: number;
  let hi: number;
  if (digits <= 15) {
    // < 10^15 < 2^53: exact in a double.
    let v = 0;
    for (; i < n; i++) {
      const d = s.charCodeAt(i) - 48;
      if (d >>> 0 > 9) throw new RangeError(`engine hash ${JSON.stringify(s)} is not a decimal 64-bit integer`);
      v = v * 10 + d;
    }
    lo = v >>> 0;
    hi = (v - lo) / TWO32;
  } else {
    // value = x·10^6 + c with x < 10^14 (exact); the product is formed in 32-bit halves.
    const split = n - 6;
    let x = 0;
    for (; i < split; i++) {
      const d = s.charCodeAt(i) - 48;
      if (d >>> 0 > 9) throw new RangeError(`engine hash ${JSON.stringify(s)} is not a decimal 64-bit integer`);
      x = x * 10 + d;
    }
    let c = 0;
    for (; i < n; i++) {
      const d = s.charCodeAt(i) - 48;
      if (d >>> 0 > 9) throw new RangeError(`engine hash ${JSON.stringify(s)} is not a decimal 64-bit integer`);
      c = c * 10 + d;
    }
    const xlo = x >>> 0;
    const xhi = (x - xlo) / TWO32;
    const low = xlo * 1e6 + c; // < 2^32·10^6 + 10^6 < 2^53
    lo = low >>> 0;
    // Magnitudes ≥ 2^64 (20 digits pass the wire schema) wrap like any other bits: never thrown on.
    hi = (xhi * 1e6 + (low - lo) / TWO32) >>> 0;
  }
  if (neg) {
    // Two's-complement negation of the 64-bit magnitude.
    hi = lo === 0 ? -hi : ~hi;
    lo = -lo;
  }
  parsedLo = lo | 0;
  parsedHi = hi | 0;
}

/** Hex digit value by char code (< 128), -1 for anything else: a table lookup instead of range
 * branches, which mispredict on random hex (a letter in 6 of 16 digits). */
const HEX_VALUE = new Int8Array(128).fill(-1);
for (let d = 0; d < 16; d++) {
  HEX_VALUE["0123456789abcdef".charCodeAt(d)] = d;
  HEX_VALUE["0123456789ABCDEF".charCodeAt(d)] = d;
}

/** Parses 1–16 hex digits into parsedLo/parsedHi. */
function parseHex64(s: string): void {
  const n = s.length;
  if (n < 1 || n > 16) throw new RangeError(`local hash ${JSON.stringify(s)} is not 16 hex digits`);
  const split = n > 8 ? n - 8 : 0;
  // `bad` collects every digit value: one -1 (not a hex digit) leaves it negative.
  let bad = 0;
  let hi = 0;
  for (let i = 0; i < split; i++) {
    const c = s.charCodeAt(i);
    const v = c < 128 ? HEX_VALUE[c]! : -1;
    bad |= v;
    hi = (hi << 4) | v;
  }
  let lo = 0;
  for (let i = split; i < n; i++) {
    const c = s.charCodeAt(i);
    const v = c < 128 ? HEX_VALUE[c]! : -1;
    bad |= v;
    lo = (lo << 4) | v;
  }
  if (bad < 0) throw new RangeError(`local hash ${JSON.stringify(s)} is not 16 hex digits`);
  parsedLo = lo;
  parsedHi = hi;
}

function u64ToBigInt(lo: number, hi: number): bigint {
  return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
}

/**
 * Frees a typed array's storage now instead of at the next full GC (ES2024 ArrayBuffer transfer;
 * the lib target here is es2022). Why: a grown or rehashed table leaves its old buffer dead as
 * external memory, and at millions of blocks that churn (about twice the live size) is what
 * triggers most full collections during ingestion. `bytes` > 0 moves the contents into a buffer
 * of that length (zero-filled beyond); Node 22 copies it into fresh pages rather than growing it in
 * place (measured: the whole new length faults), so growth by transfer saves no first touches.
 */
type TransferableBuffer = ArrayBuffer & { transfer?: (newByteLength?: number) => ArrayBuffer };
function transferInt32(a: Int32Array, bytes: number): Int32Array | null {
  const buf = a.buffer as TransferableBuffer;
  if (typeof buf.transfer !== "function") return null;
  return new Int32Array(buf.transfer(bytes));
}

function hex8(x: number): string {
  return (x >>> 0).toString(16).padStart(8, "0");
}

// ---------------------------------------------------------------------------------------------

const ENGINE_SEED = 0x1b873593;

/** An engine hash's bucket hash (masked per table). */
function engineHash(lo: number, hi: number): number {
  return mix(hi, lo, ENGINE_SEED);
}

/** One worker's engine hash → node table: open addressing, records [lo, hi, node]; node 0 = empty. */
class EngineTable {
  slots: Int32Array;
  mask: number;
  count = 0;

  constructor(capacity = 16) {
    this.slots = new Int32Array(capacity * 3);
    this.mask = capacity - 1;
  }

  /** Bucket holding (lo, hi), or ~(the empty bucket where it would go) when absent. */
  probe(lo: number, hi: number): number {
    return this.probeHashed(engineHash(lo, hi), lo, hi);
  }

  /** probe with `h` = engineHash(lo, hi) already computed (by touch's caller). */
  probeHashed(h: number, lo: number, hi: number): number {
    const t = this.slots;
    const m = this.mask;
    let i = h & m;
    for (;;) {
      const b = i * 3;
      if (t[b + 2]! === 0) return ~i;
      if (t[b]! === lo && t[b + 1]! === hi) return i;
      i = (i + 1) & m;
    }
  }

  /** Reads the home bucket of hash `h` (engineHash) so a later probe hits the cache. */
  touch(h: number): number {
    return this.slots[(h & this.mask) * 3 + 2]!;
  }

  /** Fills the empty bucket `i` returned (as ~i) by probe. */
  insertAt(i: number, lo: number, hi: number, node: number): void {
    const t = this.slots;
    const b = i * 3;
    t[b] = lo;
    t[b + 1] = hi;
    t[b + 2] = node;
    if (++this.count * 10 > (this.mask + 1) * 7) this.#rehash((this.mask + 1) * 2);
  }

  /** Deletes bucket i by shifting later members of its probe run back (no tombstones). */
  deleteAt(i: number): void {
    const t = this.slots;
    const m = this.mask;
    let j = i;
    for (;;) {
      j = (j + 1) & m;
      const bj = j * 3;
      if (t[bj + 2]! === 0) break;
      const home = engineHash(t[bj]!, t[bj + 1]!) & m;
      // Move j into the hole unless its home lies cyclically in (i, j].
      const stays = i <= j ? home > i && home <= j : home > i || home <= j;
      if (!stays) {
        const bi = i * 3;
        t[bi] = t[bj]!;
        t[bi + 1] = t[bj + 1]!;
        t[bi + 2] = t[bj + 2]!;
        i = j;
      }
    }
    t[i * 3 + 2] = 0;
    this.count--;
    const cap = this.mask + 1;
    if (cap > 16 && this.count * 8 < cap) this.#rehash(cap / 2);
  }

  #rehash(capacity: number): void {
    const old = this.slots;
    const t = new Int32Array(capacity * 3);
    const m = capacity - 1;
    for (let b = 0; b < old.length; b += 3) {
      if (old[b + 2]! === 0) continue;
      let i = engineHash(old[b]!, old[b + 1]!) & m;
      while (t[i * 3 + 2]! !== 0) i = (i + 1) & m;
      t[i * 3] = old[b]!;
      t[i * 3 + 1] = old[b + 1]!;
      t[i * 3 + 2] = old[b + 2]!;
    }
    this.slots = t;
    this.mask = m;
    transferInt32(old, 0);
  }
}

export class RadixIndex {
  /** Mask words per node (32 worker slots each). */
  #words = 2;
  #stride = MASK + 2;
  /** Node records, CHUNK_NODES per chunk (the first may be shorter while it grows). */
  #chunks: Int32Array[];
  /** Records handed out at least once (ids < top). */
  #top = 1;
  #freeHead = 0;
  #liveNodes = 0;
  /** Child table: [prefix key, child id] pairs, id 0 = empty. */
  #kids: Int32Array = new Int32Array(2 * 1024);
  #kidMask = 1023;
  #kidCount = 0;
  /** Engine-hash references to a node beyond one per mask bit (aliases left after a detach). */
  readonly #extraRefs = new Map<number, number>();
  readonly #workers: (EngineTable | undefined)[] = [];
  #blockCount = 0;
  #alive = new Int32Array(2);
  /** Where recent walks stopped (walk-memo.ts); null: every walk starts at the root. */
  readonly #memo: WalkMemo | null;
  /** Node ids of the last walk's path, by depth (for the memo). */
  #walkPath = new Int32Array(128);
  #queryWords = new Uint32Array(256);
  #queryBig = new BigUint64Array(this.#queryWords.buffer);
  #keys = new Int32Array(128);
  #engLo = new Int32Array(64);
  #engHi = new Int32Array(64);
  /** engineHash of each parsed engine hash, computed once for the prefetch touch and the probe. */
  #engH = new Int32Array(64);
  #locLo = new Int32Array(64);
  #locHi = new Int32Array(64);
  /** Receives prefetch reads so the optimiser cannot drop them. */
  #sink = 0;

  /**
   * `walkMemo: false` walks every query from the root (the reference the memo is tested against);
   * `walkMemoMinBlocks`: the shortest walk kept (default WALK_MEMO_MIN_BLOCKS).
   */
  constructor(opts: { walkMemo?: boolean; walkMemoMinBlocks?: number } = {}) {
    this.#memo = opts.walkMemo === false ? null : new WalkMemo(opts.walkMemoMinBlocks);
    const first = new Int32Array(FIRST_CHUNK_NODES * this.#stride);
    first[PARENT] = NO_PARENT;
    first[KEY] = ROOT_KEY;
    this.#chunks = [first];
  }

  /** Number of (worker, block) entries held. */
  get size(): number {
    return this.#blockCount;
  }

  /** Tree nodes besides the root (blocks held by at least one worker, or kept by a child/alias). */
  get nodeCount(): number {
    return this.#liveNodes;
  }

  /** Bytes of typed-array storage currently reserved (nodes, child table, engine tables). */
  storageBytes(): number {
    let n = this.#kids.byteLength;
    for (const c of this.#chunks) n += c.byteLength;
    for (const t of this.#workers) if (t) n += t.slots.byteLength;
    return n;
  }

  workerBlockCount(slot: number): number {
    return this.#workers[slot]?.count ?? 0;
  }

  ensureWorker(slot: number): void {
    if (!Number.isInteger(slot) || slot < 0) throw new RangeError(`bad worker slot ${slot}`);
    if (slot >= this.#words * 32) this.#widen(Math.ceil((slot + 1) / 32));
    if (!this.#workers[slot]) this.#workers[slot] = new EngineTable();
  }

  hasWorker(slot: number): boolean {
    return this.#workers[slot] !== undefined;
  }

  /** Stores a chain of blocks below `parentEngineHash` (null = root). */
  applyStored(slot: number, parentEngineHash: string | null, blocks: readonly StoredBlock[]): ApplyResult {
    const n = blocks.length;
    this.#reserveBlocks(n);
    const big = this.#queryBig;
    const words = this.#queryWords;
    for (let i = 0; i < n; i++) {
      const b = blocks[i]!;
      parseDecimal64(b.engineHash);
      this.#engLo[i] = parsedLo;
      this.#engHi[i] = parsedHi;
      big[0] = b.localHash;
      this.#locLo[i] = words[0]!;
      this.#locHi[i] = words[1]!;
    }
    return this.#applyParsed(slot, parentEngineHash, n);
  }

  /** Like applyStored, with blocks as they arrive on the relay wire (no BigInt conversion). */
  applyStoredWire(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[]): ApplyResult {
    const n = blocks.length;
    this.#parseWire(blocks, n);
    return this.#applyParsed(slot, parentEngineHash, n);
  }

  /**
   * One relay "stored" event: like applyStoredWire, but an event in which a block repeats or equals
   * its parent is void as a whole (`voided`, nothing applied), as the relay's block set treats it.
   * The check runs on the parsed 64-bit hashes (no string set per event). `admit(n)`, if given, is
   * asked after that check and before storing (the block budget): false refuses the whole event.
   */
  applyStoredEvent(slot: number, parentEngineHash: string | null, blocks: readonly WireBlock[], admit?: (blocks: number) => boolean): StoredEventResult {
    const n = blocks.length;
    this.#parseWire(blocks, n);
    let pLo = 0;
    let pHi = 0;
    if (parentEngineHash !== null) {
      parseDecimal64(parentEngineHash);
      pLo = parsedLo;
      pHi = parsedHi;
    }
    const defect = this.#chainDefect(n, parentEngineHash !== null, pLo, pHi);
    if (defect) return { ok: false, applied: 0, voided: defect };
    if (admit && !admit(n)) return { ok: false, applied: 0, refused: true };
    return this.#applyParsed(slot, parentEngineHash, n);
  }

  /**
   * Stores blocks [from, to) of a chain given as numbers (no decimal engine hashes): block i's
   * engine hash is the 64-bit id (ids[2i] lo, ids[2i + 1] hi), its local hash the words
   * (localWords[2i], localWords[2i + 1]); the parent is block from - 1's id (the root when from = 0).
   */
  applyStoredIds(slot: number, ids: Int32Array, localWords: Uint32Array, from: number, to: number): ApplyResult {
    const n = to - from;
    this.#reserveBlocks(n);
    for (let i = 0; i < n; i++) {
      this.#engLo[i] = ids[2 * (from + i)]!;
      this.#engHi[i] = ids[2 * (from + i) + 1]!;
      this.#locLo[i] = localWords[2 * (from + i)]! | 0;
      this.#locHi[i] = localWords[2 * (from + i) + 1]! | 0;
    }
    return from === 0 ? this.#applyParsedAt(slot, false, 0, 0, n) : this.#applyParsedAt(slot, true, ids[2 * from - 2]!, ids[2 * from - 1]!, n);
  }

  /**
   * The local hash words of `slot`'s blocks [from, to) given by 64-bit ids (as applyStoredIds takes
   * them) into localWords at the same positions; false if the worker does not hold one of them.
   */
  localWordsOfIds(slot: number, ids: Int32Array, localWords: Uint32Array, from: number, to: number): boolean {
    const table = this.#workers[slot];
    if (!table) return false;
    for (let i = from; i < to; i++) {
      const at = table.probe(ids[2 * i]!, ids[2 * i + 1]!);
      if (at < 0) return false;
      const node = table.slots[at * 3 + 2]!;
      const c = this.#chunks[node >>> CHUNK_BITS]!;
      const base = (node & IN_CHUNK) * this.#stride;
      localWords[2 * i] = c[base + LO]!;
      localWords[2 * i + 1] = c[base + HI]!;
    }
    return true;
  }

  /** Parses wire blocks [0, n) into #engLo/#engHi/#locLo/#locHi. */
  #parseWire(blocks: readonly WireBlock[], n: number): void {
    this.#reserveBlocks(n);
    const engLo = this.#engLo;
    const engHi = this.#engHi;
    const locLo = this.#locLo;
    const locHi = this.#locHi;
    for (let i = 0; i < n; i++) {
      const b = blocks[i]!;
      parseDecimal64(b.h);
      engLo[i] = parsedLo;
      engHi[i] = parsedHi;
      parseHex64(b.l);
      locLo[i] = parsedLo;
      locHi[i] = parsedHi;
    }
  }

  #dupAt = new Int32Array(0);
  #dupStamp = new Int32Array(0);
  #dupGen = 0;

  /** First defect of the parsed chain [0, n) in order: a block equal to the parent, or to an earlier block. */
  #chainDefect(n: number, hasParent: boolean, pLo: number, pHi: number): ChainDefect | null {
    const lo = this.#engLo;
    const hi = this.#engHi;
    if (n <= 24) {
      for (let i = 0; i < n; i++) {
        const a = lo[i]!;
        const b = hi[i]!;
        if (hasParent && a === pLo && b === pHi) return "self_parent";
        for (let j = 0; j < i; j++) if (lo[j] === a && hi[j] === b) return "duplicate_in_event";
      }
      return null;
    }
    let cap = 64;
    while (cap < 2 * n) cap <<= 1;
    if (this.#dupAt.length < cap) {
      this.#dupAt = new Int32Array(cap);
      this.#dupStamp = new Int32Array(cap);
      this.#dupGen = 0;
    }
    if (this.#dupGen === 0x7fffffff) {
      this.#dupStamp.fill(0);
      this.#dupGen = 0;
    }
    const gen = ++this.#dupGen;
    const at = this.#dupAt;
    const stamp = this.#dupStamp;
    const mask = cap - 1;
    for (let i = 0; i < n; i++) {
      const a = lo[i]!;
      const b = hi[i]!;
      if (hasParent && a === pLo && b === pHi) return "self_parent";
      let h = (Math.imul(a ^ Math.imul(b, 0x85ebca6b), 0x9e3779b1) >>> 7) & mask;
      while (stamp[h] === gen) {
        const j = at[h]!;
        if (lo[j] === a && hi[j] === b) return "duplicate_in_event";
        h = (h + 1) & mask;
      }
      stamp[h] = gen;
      at[h] = i;
    }
    return null;
  }

  /**
   * Stores dump rows (each with its own parent, parents before children). Returns how many rows
   * were stored and how many failed (unknown parent or self parent); an unknown worker fails all.
   */
  applyDumpWire(slot: number, rows: readonly WireDumpBlock[]): { applied: number; failed: number } {
    const table = this.#workers[slot];
    if (!table) return { applied: 0, failed: rows.length };
    let applied = 0;
    for (const r of rows) {
      let parent = ROOT;
      let pLo = 0;
      let pHi = 0;
      if (r.p !== null) {
        parseDecimal64(r.p);
        pLo = parsedLo;
        pHi = parsedHi;
        const at = table.probe(pLo, pHi);
        if (at < 0) continue;
        parent = table.slots[at * 3 + 2]!;
      }
      parseDecimal64(r.h);
      const eLo = parsedLo;
      const eHi = parsedHi;
      if (r.p !== null && eLo === pLo && eHi === pHi) continue;
      parseHex64(r.l);
      const key = mix(this.#chunks[parent >>> CHUNK_BITS]![(parent & IN_CHUNK) * this.#stride + KEY]!, parsedLo, parsedHi) | 0;
      this.#storeOne(slot, table, parent, key, engineHash(eLo, eHi), eLo, eHi, parsedLo, parsedHi);
      applied++;
    }
    return { applied, failed: rows.length - applied };
  }

  /** Removes blocks by engine hash; unknown hashes are ignored (they may predate our view). */
  applyRemoved(slot: number, engineHashes: readonly string[]): number {
    const table = this.#workers[slot];
    if (!table) return 0;
    const n = engineHashes.length;
    this.#reserveBlocks(n);
    // Every hash is parsed before anything is removed: a malformed one throws with the index untouched.
    for (let i = 0; i < n; i++) {
      parseDecimal64(engineHashes[i]!);
      this.#engLo[i] = parsedLo;
      this.#engHi[i] = parsedHi;
    }
    return this.#removeParsed(slot, table, n);
  }

  /** applyRemoved of `n` engine hashes given as 64-bit ids (ids[2i] lo, ids[2i + 1] hi). */
  applyRemovedIds(slot: number, ids: Int32Array, n: number): number {
    const table = this.#workers[slot];
    if (!table) return 0;
    this.#reserveBlocks(n);
    for (let i = 0; i < n; i++) {
      this.#engLo[i] = ids[2 * i]!;
      this.#engHi[i] = ids[2 * i + 1]!;
    }
    return this.#removeParsed(slot, table, n);
  }

  /** Removes the engine hashes parsed into #engLo/#engHi[0..n). */
  #removeParsed(slot: number, table: EngineTable, n: number): number {
    const engLo = this.#engLo;
    const engHi = this.#engHi;
    const engH = this.#engH;
    for (let i = 0; i < n; i++) engH[i] = engineHash(engLo[i]!, engHi[i]!);
    const chunks = this.#chunks;
    const stride = this.#stride;
    const nodeAt = this.#keys; // as scratch: prefix keys serve only stores and queries
    let sink = 0;
    let removed = 0;
    for (let from = 0; from < n; from += AHEAD) {
      const end = Math.min(n, from + AHEAD);
      // A removal misses three times in a row (engine bucket → node record → its child-table
      // bucket, which pruning edits): each level is touched for the whole stretch before the next,
      // so the misses of a stretch overlap instead of forming one chain per block.
      for (let i = from; i < end; i++) sink ^= table.touch(engH[i]!);
      for (let i = from; i < end; i++) {
        const at = table.probeHashed(engH[i]!, engLo[i]!, engHi[i]!);
        const node = at < 0 ? ROOT : table.slots[at * 3 + 2]!;
        nodeAt[i] = node;
        sink ^= chunks[node >>> CHUNK_BITS]![(node & IN_CHUNK) * stride + KEY]!;
      }
      const kt = this.#kids;
      const km = this.#kidMask;
      for (let i = from; i < end; i++) {
        const node = nodeAt[i]!;
        sink ^= kt[2 * (chunks[node >>> CHUNK_BITS]![(node & IN_CHUNK) * stride + KEY]! & km) + 1]!;
      }
      for (let i = from; i < end; i++) {
        const at = table.probeHashed(engH[i]!, engLo[i]!, engHi[i]!);
        if (at < 0) continue;
        const node = table.slots[at * 3 + 2]!;
        table.deleteAt(at);
        this.#unref(slot, node);
        removed++;
      }
    }
    this.#sink = sink;
    return removed;
  }

  /** Drops every block of a worker (AllBlocksCleared, dump replacement, worker down). */
  clearWorker(slot: number): void {
    const table = this.#workers[slot];
    if (!table) return;
    if (table.count > 0) {
      const t = table.slots;
      // A node loses its last reference only once all of this worker's aliases of it are
      // processed, so pruning never frees a node that a later bucket still names.
      for (let b = 2; b < t.length; b += 3) if (t[b]! !== 0) this.#unref(slot, t[b]!);
    }
    this.#workers[slot] = new EngineTable();
  }

  /** Forgets the worker slot entirely. */
  removeWorker(slot: number): void {
    this.clearWorker(slot);
    this.#workers[slot] = undefined;
  }

  /**
   * Overlap per worker slot: the number of consecutive leading blocks of `localHashes` it holds.
   * `scores` is a caller-owned buffer (length ≥ max slot + 1), zeroed here.
   */
  findMatches(localHashes: LocalHashes, scores: Int32Array): void {
    const n = localHashes.length;
    // Another tree walked these hashes further already: its keys stay valid past this walk's.
    const known = knownQueryKeys(localHashes);
    const knownFirst = queryKeyFirst;
    if (localHashes instanceof BigUint64Array) {
      // The route RPC's form: read through a Uint32 view of its own buffer, no copy.
      this.findMatchesWords(new Uint32Array(localHashes.buffer, localHashes.byteOffset, 2 * n), n, scores);
    } else {
      if (this.#queryBig.length < n) {
        this.#queryWords = new Uint32Array(2 * Math.max(n, this.#queryBig.length * 2));
        this.#queryBig = new BigUint64Array(this.#queryWords.buffer);
      }
      const big = this.#queryBig;
      // A bigint stored into a BigUint64Array converts without allocating; the Uint32 view of the
      // same buffer then yields lo/hi words.
      for (let i = 0; i < n; i++) big[i] = localHashes[i]!;
      this.findMatchesWords(this.#queryWords, n, scores);
    }
    queryKeysOf = localHashes;
    queryKeysLength = n;
    // Both ranges hold keys of the same hashes: joined where they meet, else the one reaching further.
    if (known > 0 && knownFirst <= queryKeyCount && queryKeyFirst <= known) {
      queryKeyFirst = Math.min(knownFirst, queryKeyFirst);
      queryKeyCount = Math.max(known, queryKeyCount);
    } else if (known > queryKeyCount) {
      queryKeyFirst = knownFirst;
      queryKeyCount = known;
    }
  }

  /**
   * findMatches over `count` local hashes given as little-endian u32 pairs (lo at 2i, hi at
   * 2i + 1), e.g. a Uint32Array view of a BigUint64Array.
   */
  findMatchesWords(words: Uint32Array, count: number, scores: Int32Array): void {
    scores.fill(0);
    queryKeysOf = null;
    queryKeyFirst = 0;
    queryKeyCount = 0;
    if (count === 0) return;
    if (queryKeys.length < count) {
      const grown = new Int32Array(Math.max(count, queryKeys.length * 2));
      grown.set(queryKeys);
      queryKeys = grown;
    }
    if (this.#walkPath.length < count) this.#walkPath = new Int32Array(Math.max(count, this.#walkPath.length * 2));
    const keys = queryKeys;
    const path = this.#walkPath;
    const kt = this.#kids;
    const km = this.#kidMask;
    const chunks = this.#chunks;
    const stride = this.#stride;
    const W = this.#words;
    const alive = this.#alive;
    const memo = this.#memo;
    let sink = 0;
    let key = ROOT_KEY;
    let cur = ROOT;
    // A kept walk of the same leading blocks, unchanged since: continue where it stood (walk-memo.ts).
    const slots = Math.min(W * 32, scores.length);
    const from = memo === null ? 0 : memo.match(words, count, slots);
    if (from > 0) {
      cur = memo!.resume(from, scores, alive, W);
      key = chunks[cur >>> CHUNK_BITS]![(cur & IN_CHUNK) * stride + KEY]!;
      keys[from - 1] = key;
      queryKeyFirst = from - 1;
      queryKeyCount = from;
    }
    let ahead = from;
    let depth = from;
    for (; depth < count; depth++) {
      if (depth === ahead) {
        // Next stretch: derive its prefix keys, then touch buckets and (likely) records, all
        // independent loads that the CPU overlaps.
        const end = Math.min(count, ahead + AHEAD);
        for (let d = ahead; d < end; d++) {
          key = mix(key, words[2 * d]! | 0, words[2 * d + 1]! | 0) | 0;
          keys[d] = key;
          sink ^= kt[2 * (key & km) + 1]!;
        }
        for (let d = ahead; d < end; d++) {
          const id = kt[2 * (keys[d]! & km) + 1]!;
          sink ^= chunks[id >>> CHUNK_BITS]![(id & IN_CHUNK) * stride + MASK]!;
        }
        ahead = end;
        queryKeyCount = end;
      }
      const k = keys[depth]!;
      const lo = words[2 * depth]! | 0;
      const hi = words[2 * depth + 1]! | 0;
      let i = k & km;
      let nxt = 0;
      let nodes: Int32Array | undefined;
      let base = 0;
      for (;;) {
        const id = kt[2 * i + 1]!;
        if (id === 0) break;
        if (kt[2 * i]! === k) {
          const c = chunks[id >>> CHUNK_BITS]!;
          const b = (id & IN_CHUNK) * stride;
          if (c[b + PARENT]! === cur && c[b + LO]! === lo && c[b + HI]! === hi) {
            nxt = id;
            nodes = c;
            base = b + MASK;
            break;
          }
        }
        i = (i + 1) & km;
      }
      if (nodes === undefined) break;
      let any = 0;
      if (depth === 0) {
        for (let w = 0; w < W; w++) any |= alive[w] = nodes[base + w]!;
      } else {
        for (let w = 0; w < W; w++) {
          const a = alive[w]!;
          const m = nodes[base + w]!;
          let dropped = a & ~m;
          // Workers missing this block stop at `depth`; recorded once instead of counting per level.
          while (dropped !== 0) {
            const bit = dropped & -dropped;
            scores[w * 32 + 31 - Math.clz32(bit)] = depth;
            dropped ^= bit;
          }
          any |= alive[w] = a & m;
        }
      }
      // No worker holds this block: the walk stops here (`alive` is empty, nothing left to score).
      if (any === 0) break;
      path[depth] = nxt;
      cur = nxt;
    }
    this.#sink = sink;
    if (depth === 0) return;
    for (let w = 0; w < W; w++) {
      let rest = alive[w]!;
      while (rest !== 0) {
        const bit = rest & -rest;
        scores[w * 32 + 31 - Math.clz32(bit)] = depth;
        rest ^= bit;
      }
    }
    memo?.record(words, from, depth, path, scores, slots);
  }

  /**
   * Whether the worker holds the block a chain ends in (chainEndOf): a node with the chain's prefix
   * key and last local hash that the worker is marked on. One probe run of the child table instead
   * of a walk down the chain. The prefix key is a 32-bit hash of the path, so a different path could
   * pass (a key collision on a node with the same last block, held by the same worker): callers use
   * the answer where that only blurs an estimate (prefill completion, routing-core.ts).
   */
  holdsChainEnd(slot: number, end: ChainEnd): boolean {
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.#words * 32) return false;
    const kt = this.#kids;
    const km = this.#kidMask;
    const stride = this.#stride;
    const word = MASK + (slot >>> 5);
    const bit = 1 << (slot & 31);
    for (let i = end.key & km; ; i = (i + 1) & km) {
      const id = kt[2 * i + 1]!;
      if (id === 0) return false;
      if (kt[2 * i]! !== end.key) continue;
      const c = this.#chunks[id >>> CHUNK_BITS]!;
      const b = (id & IN_CHUNK) * stride;
      if (c[b + LO]! === end.lo && c[b + HI]! === end.hi && (c[b + word]! & bit) !== 0) return true;
    }
  }

  /** Local hashes of every block a worker holds (engine-table order), for parity checks and dumps. */
  workerLocalHashes(slot: number): bigint[] {
    const out: bigint[] = [];
    this.#eachWorkerNode(slot, (c, b) => out.push(u64ToBigInt(c[b + LO]!, c[b + HI]!)));
    return out;
  }

  /** workerLocalHashes as 16 lower-case hex digits (the relay wire form). */
  workerLocalHashesHex(slot: number): string[] {
    const out: string[] = [];
    this.#eachWorkerNode(slot, (c, b) => out.push(hex8(c[b + HI]!) + hex8(c[b + LO]!)));
    return out;
  }

  /** Engine hashes a worker holds, as signed int64 decimals. */
  workerEngineHashes(slot: number): string[] {
    const table = this.#workers[slot];
    if (!table) return [];
    const out: string[] = [];
    const t = table.slots;
    for (let b = 0; b < t.length; b += 3) if (t[b + 2]! !== 0) out.push(BigInt.asIntN(64, u64ToBigInt(t[b]!, t[b + 1]!)).toString());
    return out;
  }

  /** Calls fn with the chunk and record offset of each node the worker's engine table names. */
  #eachWorkerNode(slot: number, fn: (chunk: Int32Array, base: number) => void): void {
    const table = this.#workers[slot];
    if (!table) return;
    const t = table.slots;
    const stride = this.#stride;
    for (let b = 2; b < t.length; b += 3) {
      const node = t[b]!;
      if (node !== 0) fn(this.#chunks[node >>> CHUNK_BITS]!, (node & IN_CHUNK) * stride);
    }
  }

  // --- stores -----------------------------------------------------------------------------------

  #reserveBlocks(n: number): void {
    if (this.#engLo.length >= n) return;
    const cap = Math.max(n, this.#engLo.length * 2);
    this.#engLo = new Int32Array(cap);
    this.#engHi = new Int32Array(cap);
    this.#engH = new Int32Array(cap);
    this.#locLo = new Int32Array(cap);
    this.#locHi = new Int32Array(cap);
    if (this.#keys.length < cap) this.#keys = new Int32Array(cap);
  }

  /** Applies the chain parsed into #engLo/#engHi/#locLo/#locHi[0..n). */
  #applyParsed(slot: number, parentEngineHash: string | null, n: number): ApplyResult {
    if (parentEngineHash === null || !this.#workers[slot]) return this.#applyParsedAt(slot, false, 0, 0, n);
    parseDecimal64(parentEngineHash);
    return this.#applyParsedAt(slot, true, parsedLo, parsedHi, n);
  }

  /** #applyParsed with the parent's engine hash as words (hasParent false: the root). */
  #applyParsedAt(slot: number, hasParent: boolean, pLo: number, pHi: number, n: number): ApplyResult {
    const table = this.#workers[slot];
    if (!table) return { ok: false, applied: 0, error: "unknown_worker" };
    let cur = ROOT;
    if (hasParent) {
      const at = table.probe(pLo, pHi);
      if (at < 0) return { ok: false, applied: 0, error: "parent_not_found" };
      cur = table.slots[at * 3 + 2]!;
    }
    const engLo = this.#engLo;
    const engHi = this.#engHi;
    const locLo = this.#locLo;
    const locHi = this.#locHi;
    const keys = this.#keys;
    const engH = this.#engH;
    let key = this.#chunks[cur >>> CHUNK_BITS]![(cur & IN_CHUNK) * this.#stride + KEY]!;
    let sink = 0;
    let ahead = 0;
    for (let i = 0; i < n; i++) {
      if (i === ahead) {
        // Child keys of the chain follow from the parent's key; touch their buckets and the engine
        // buckets of the next stretch before storing it (see the file comment).
        const end = Math.min(n, ahead + AHEAD);
        const kt = this.#kids;
        const km = this.#kidMask;
        for (let d = ahead; d < end; d++) {
          key = mix(key, locLo[d]!, locHi[d]!) | 0;
          keys[d] = key;
          const h = engineHash(engLo[d]!, engHi[d]!);
          engH[d] = h;
          sink ^= kt[2 * (key & km) + 1]! ^ table.touch(h);
        }
        ahead = end;
      }
      const eLo = engLo[i]!;
      const eHi = engHi[i]!;
      if (hasParent && eLo === pLo && eHi === pHi) {
        this.#sink = sink;
        return { ok: false, applied: i, error: "self_parent" };
      }
      cur = this.#storeOne(slot, table, cur, keys[i]!, engH[i]!, eLo, eHi, locLo[i]!, locHi[i]!);
    }
    this.#sink = sink;
    return { ok: true, applied: n };
  }

  /** Marks `slot` on the child (parent, local) and points engine hash (eLo, eHi), bucket hash `eh`, at it. */
  #storeOne(slot: number, table: EngineTable, parent: number, key: number, eh: number, eLo: number, eHi: number, lLo: number, lHi: number): number {
    let child = this.#child(parent, key, lLo, lHi);
    if (child <= 0) child = this.#addChild(~child, parent, key, lLo, lHi);
    const at = table.probeHashed(eh, eLo, eHi);
    if (at < 0) {
      table.insertAt(~at, eLo, eHi, child);
      this.#ref(slot, child);
      return child;
    }
    const old = table.slots[at * 3 + 2]!;
    if (old === child) {
      // Same placement: only an alias left without the mask bit needs converting back into it.
      const w = this.#chunks[child >>> CHUNK_BITS]![(child & IN_CHUNK) * this.#stride + MASK + (slot >>> 5)]!;
      if ((w & (1 << (slot & 31))) === 0) {
        this.#dropExtra(child);
        this.#ref(slot, child);
      }
      return child;
    }
    // The engine re-used a hash for another position: move it. Reference the new node before
    // releasing the old one, so pruning cannot free the new node's ancestors.
    table.slots[at * 3 + 2] = child;
    this.#ref(slot, child);
    this.#unref(slot, old);
    return child;
  }

  /** One more engine-hash reference of `slot` to `node`: the mask bit, or an extra alias count. */
  #ref(slot: number, node: number): void {
    const c = this.#chunks[node >>> CHUNK_BITS]!;
    const i = (node & IN_CHUNK) * this.#stride + MASK + (slot >>> 5);
    const bit = 1 << (slot & 31);
    const w = c[i]!;
    if ((w & bit) === 0) {
      c[i] = w | bit;
      this.#blockCount++;
      this.#memo?.changed(node);
    } else {
      this.#extraRefs.set(node, (this.#extraRefs.get(node) ?? 0) + 1);
    }
  }

  /** Drops one engine-hash reference of `slot` to `node` (detaching the worker), then prunes. */
  #unref(slot: number, node: number): void {
    const c = this.#chunks[node >>> CHUNK_BITS]!;
    const i = (node & IN_CHUNK) * this.#stride + MASK + (slot >>> 5);
    const bit = 1 << (slot & 31);
    const w = c[i]!;
    if ((w & bit) !== 0) {
      c[i] = w & ~bit;
      this.#blockCount--;
      this.#memo?.changed(node);
    } else {
      this.#dropExtra(node);
    }
    this.#prune(node);
  }

  #dropExtra(node: number): void {
    const e = this.#extraRefs.get(node)!;
    if (e > 1) this.#extraRefs.set(node, e - 1);
    else this.#extraRefs.delete(node);
  }

  /** Frees `node` and then its ancestors while they hold no worker, child or alias. */
  #prune(node: number): void {
    const chunks = this.#chunks;
    const stride = this.#stride;
    const W = this.#words;
    while (node !== ROOT) {
      const nodes = chunks[node >>> CHUNK_BITS]!;
      const base = (node & IN_CHUNK) * stride;
      if (nodes[base + KIDS]! !== 0) return;
      for (let k = 0; k < W; k++) if (nodes[base + MASK + k]! !== 0) return;
      if (this.#extraRefs.size !== 0 && this.#extraRefs.has(node)) return;
      const parent = nodes[base + PARENT]!;
      this.#removeChild(node, nodes[base + KEY]!);
      nodes[base + PARENT] = this.#freeHead;
      this.#freeHead = node;
      this.#memo?.freed(node);
      this.#liveNodes--;
      chunks[parent >>> CHUNK_BITS]![(parent & IN_CHUNK) * stride + KIDS]!--;
      node = parent;
    }
  }

  // --- nodes and the child table --------------------------------------------------------------

  /** The child of `parent` with local hash (lo, hi) and prefix key `key`, or ~(empty bucket). */
  #child(parent: number, key: number, lo: number, hi: number): number {
    const t = this.#kids;
    const m = this.#kidMask;
    const chunks = this.#chunks;
    const stride = this.#stride;
    let i = key & m;
    for (;;) {
      const c = t[2 * i + 1]!;
      if (c === 0) return ~i;
      if (t[2 * i]! === key) {
        const nodes = chunks[c >>> CHUNK_BITS]!;
        const b = (c & IN_CHUNK) * stride;
        if (nodes[b + PARENT]! === parent && nodes[b + LO]! === lo && nodes[b + HI]! === hi) return c;
      }
      i = (i + 1) & m;
    }
  }

  /** Creates the child at the empty bucket `at` found by #child. */
  #addChild(at: number, parent: number, key: number, lo: number, hi: number): number {
    const chunks = this.#chunks;
    const stride = this.#stride;
    let node = this.#freeHead;
    if (node !== 0) this.#freeHead = chunks[node >>> CHUNK_BITS]![(node & IN_CHUNK) * stride + PARENT]!;
    else {
      node = this.#top++;
      if (node >>> CHUNK_BITS === chunks.length || ((node & IN_CHUNK) + 1) * stride > chunks[node >>> CHUNK_BITS]!.length) this.#growNodes(node);
    }
    const nodes = chunks[node >>> CHUNK_BITS]!;
    const b = (node & IN_CHUNK) * stride;
    nodes[b + PARENT] = parent;
    nodes[b + LO] = lo;
    nodes[b + HI] = hi;
    nodes[b + KIDS] = 0;
    nodes[b + KEY] = key;
    for (let k = 0; k < this.#words; k++) nodes[b + MASK + k] = 0;
    chunks[parent >>> CHUNK_BITS]![(parent & IN_CHUNK) * stride + KIDS]!++;
    this.#liveNodes++;
    const t = this.#kids;
    t[2 * at] = key;
    t[2 * at + 1] = node;
    if (++this.#kidCount * 10 > (this.#kidMask + 1) * 7) this.#rehashKids((this.#kidMask + 1) * 2);
    return node;
  }

  #removeChild(node: number, key: number): void {
    const t = this.#kids;
    const m = this.#kidMask;
    let i = key & m;
    while (t[2 * i + 1]! !== node) i = (i + 1) & m;
    let j = i;
    for (;;) {
      j = (j + 1) & m;
      const c = t[2 * j + 1]!;
      if (c === 0) break;
      const home = t[2 * j]! & m;
      const stays = i <= j ? home > i && home <= j : home > i || home <= j;
      if (!stays) {
        t[2 * i] = t[2 * j]!;
        t[2 * i + 1] = c;
        i = j;
      }
    }
    t[2 * i + 1] = 0;
    this.#kidCount--;
    if (m + 1 > 1024 && this.#kidCount * 8 < m + 1) this.#rehashKids((m + 1) / 2);
  }

  #rehashKids(capacity: number): void {
    const old = this.#kids;
    const t = new Int32Array(2 * capacity);
    const m = capacity - 1;
    for (let i = 0; i < old.length; i += 2) {
      const c = old[i + 1]!;
      if (c === 0) continue;
      let j = old[i]! & m;
      while (t[2 * j + 1]! !== 0) j = (j + 1) & m;
      t[2 * j] = old[i]!;
      t[2 * j + 1] = c;
    }
    this.#kids = t;
    this.#kidMask = m;
    transferInt32(old, 0);
  }

  /** Makes room for record `node` (= the next new id): the first chunk doubles up to full size, then chunks are added. */
  #growNodes(node: number): void {
    const chunks = this.#chunks;
    if (node >>> CHUNK_BITS === chunks.length) {
      chunks.push(new Int32Array(CHUNK_NODES * this.#stride));
      return;
    }
    const first = chunks[0]!;
    const length = Math.min(CHUNK_NODES, (first.length / this.#stride) * 2) * this.#stride;
    let next = transferInt32(first, length * 4);
    if (!next) {
      next = new Int32Array(length);
      next.set(first);
    }
    chunks[0] = next;
  }

  /** Re-lays out every record with `words` mask words (a slot beyond the current mask appeared). */
  #widen(words: number): void {
    const oldStride = this.#stride;
    const oldWords = this.#words;
    const stride = MASK + words;
    const chunks = this.#chunks;
    for (let c = 0; c < chunks.length; c++) {
      const old = chunks[c]!;
      const records = old.length / oldStride;
      const next = new Int32Array(records * stride);
      for (let n = 0; n < records; n++) {
        const o = n * oldStride;
        const b = n * stride;
        for (let f = 0; f < MASK + oldWords; f++) next[b + f] = old[o + f]!;
      }
      chunks[c] = next;
      transferInt32(old, 0);
    }
    this.#words = words;
    this.#stride = stride;
    this.#alive = new Int32Array(words);
  }

}
