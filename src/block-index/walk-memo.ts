/**
 * Where recent walks of one radix index (radix-index.ts findMatches) stopped, so the next turn of a
 * conversation walks only the blocks past the part that is unchanged. A walk of a query's first
 * `d` blocks leaves, per worker, its overlap capped at d: the kept walk's overlaps (`held`) give
 * that state for every d ≤ end (a worker holds blocks [0, d) iff its held ≥ d), and
 * the path's node at depth d - 1 is where the walk continues. Local hashes are not chained
 * (block-hash.ts), so a kept walk serves a query only as far as their hash words are equal,
 * compared word by word: one tight loop over the prefix instead of one child lookup per block.
 *
 * Exact, not a heuristic: a worker's overlap over [0, d) reads only the mask words of the path's
 * nodes at depths < d. The index reports each mask change (changed()), and every kept walk whose
 * path holds that node at depth c is cut back to end = c (the state at c is still known, so the
 * next walk resumes there). Nodes are created only below the path's end and freed only after their
 * last mask bit is cleared, so no other change can alter a kept state. A live node's depth is
 * fixed, so one table maps a node on any kept path to its depth, the number of paths holding it
 * and, when one does, which. A cut keeps the path's nodes past the new end in that table
 * (`refEnd`): a walk that goes the same way again (after another worker touched a block near the
 * root) then only compares node ids; a node is dropped from every path when the index frees it
 * (freed()), before its id is reused.
 *
 * Cheap where it serves nothing: a query shorter than the shortest walk kept (minBlocks) never
 * looks at the memo; a mask change or a freed node off every kept path costs one bit test (bits per node id);
 * one on a path held by a single walk touches that walk only.
 */

/** Walks kept per tree (one per recent conversation), least recently used dropped first. */
export const WALK_MEMO_ENTRIES = 128;
/**
 * Path blocks the kept walks' arrays of one tree have room for (words and node ids, 12 bytes a
 * block); a longer walk is not kept. With the node table (≤ 2^17 rows of 16 bytes), a tree's memo
 * takes at most ~2.8 MiB, and 2 bits per node id of the index.
 */
export const WALK_MEMO_BLOCKS = 1 << 16;
/** Shorter walks are not kept: they cost about what keeping them does (2k tokens at block size 16). */
export const WALK_MEMO_MIN_BLOCKS = 128;
/**
 * A full memo first keeps one new walk in this many (dropping the least recently used): more
 * conversations than it holds, taking turns, would otherwise replace every walk before its next
 * turn, and each route would pay for keeping a walk nobody resumes.
 */
export const WALK_MEMO_ADMIT_EVERY = 8;
/**
 * While the walks a full memo drops were never resumed, it keeps ever fewer new walks, down to one
 * in this many (each drop of a resumed walk halves it back towards WALK_MEMO_ADMIT_EVERY).
 */
export const WALK_MEMO_ADMIT_RARE = 64;

interface KeptWalk {
  /** The query's hash words (lo, hi per block) over [0, refEnd): past `end`, an earlier query's. */
  words: Uint32Array;
  /** Node id at each depth of [0, refEnd): the walk's path over [0, end), then what it held past a cut. */
  path: Int32Array;
  end: number;
  /** Depths [0, refEnd) of `path` are counted in the node table (end ≤ refEnd). */
  refEnd: number;
  /**
   * Per worker slot of [0, slots): its overlap with the query's first `end` blocks, or more (a
   * cut leaves it: a walk resumes at depth ≤ end, where a worker holds the first `depth` blocks
   * iff its overlap was ≥ depth).
   */
  held: Int32Array;
  slots: number;
  used: number;
  /** A query resumed it since it was kept (what the admission rate follows). */
  resumed: boolean;
  /** Its index in the memo's walks (and tips). */
  slot: number;
}

/**
 * A node's home bucket: runs of 16 consecutive ids (a chain stored in one event gets consecutive
 * ids, so its path's nodes mostly do) stay side by side, the runs spread out. Cuts, evictions and
 * records then touch the table about one cache line per run instead of one per block.
 */
function home(node: number): number {
  return (Math.imul(node >>> 4, 0x9e3779b1) & ~15) | (node & 15);
}

function hasBit(bits: Int32Array, node: number): boolean {
  const i = node >>> 5;
  return i < bits.length && (bits[i]! & (1 << (node & 31))) !== 0;
}

const EMPTY_WORDS = new Uint32Array(0);
const EMPTY_PATH = new Int32Array(0);
/** Node table row: node id, depth, paths holding it, the only walk slot holding it (-1: several). */
const ROW = 4;
const SEVERAL = -1;

export class WalkMemo {
  /** Kept walks by slot (a slot keeps its index: the node table names walks by it); empty: no arrays. */
  readonly #walks: KeptWalk[] = [];
  /** Path blocks the walks' arrays have room for (what WALK_MEMO_BLOCKS bounds). */
  #blocks = 0;
  #clock = 0;
  /** Node table: open addressing over ROW-int rows; node 0 (the root) marks empty. */
  #table = new Int32Array(ROW * 64);
  #mask = 63;
  #count = 0;
  /** Bit per node id: in the node table (exact). */
  #inTable = new Int32Array(0);
  /**
   * Bit per node id: maybe on a kept walk's path before its end (set when a walk reaches it,
   * cleared when a change cuts every such walk); clear: a change there touches no kept walk.
   */
  #live = new Int32Array(0);
  /**
   * Per slot: refEnd and the hash words at refEnd - 1, side by side, so that match() compares most
   * kept walks with a query without touching their arrays (scattered, mostly out of cache).
   */
  readonly #tips = new Uint32Array(3 * WALK_MEMO_ENTRIES);
  /** The kept walk the last match() resumes from (-1: none). */
  #hit = -1;
  /** New walks a full memo was offered since it last kept one. */
  #offered = 0;
  #admitEvery = WALK_MEMO_ADMIT_EVERY;
  readonly #minBlocks: number;

  /** `minBlocks`: shorter walks are not kept (default WALK_MEMO_MIN_BLOCKS). */
  constructor(minBlocks = WALK_MEMO_MIN_BLOCKS) {
    this.#minBlocks = minBlocks;
  }

  /** Path blocks the kept walks' arrays have room for, counted from the arrays (≤ WALK_MEMO_BLOCKS). */
  get capacityBlocks(): number {
    let n = 0;
    for (const w of this.#walks) n += w.path.length;
    return n;
  }

  /**
   * Depth from which a walk of `words` ([0, 2·count)) may resume, with overlaps for worker slots
   * [0, slots): the longest equal prefix, capped at its end, with a kept walk that has the query's
   * hash where its path ends (at min(refEnd, count) - 1: the same conversation, most likely); 0:
   * none. Such a walk is extended by record() even when it serves no depth (cut back to the root),
   * so its path's nodes are not counted again. A query shorter than the shortest walk kept
   * (minBlocks) is never compared: it walks from the root as without the memo.
   */
  match(words: Uint32Array, count: number, slots: number): number {
    this.#hit = -1;
    if (count < this.#minBlocks) return 0;
    let best = 0;
    const walks = this.#walks;
    const tips = this.#tips;
    for (let k = 0; k < walks.length; k++) {
      const refEnd = tips[3 * k]!;
      if (refEnd === 0) continue;
      if (refEnd <= count) {
        if (tips[3 * k + 1] !== words[2 * refEnd - 2] || tips[3 * k + 2] !== words[2 * refEnd - 1]) continue;
      } else if (walks[k]!.words[2 * count - 2] !== words[2 * count - 2] || walks[k]!.words[2 * count - 1] !== words[2 * count - 1]) {
        continue;
      }
      const w = walks[k]!;
      const kw = w.words;
      let d = 0;
      // Overlaps kept for fewer slots than asked serve no depth (the walk is walked again).
      if (w.slots >= slots) {
        const m = 2 * Math.min(w.end, count);
        while (d < m && kw[d] === words[d]) d++;
        d >>>= 1;
      }
      if (d > best || this.#hit < 0) {
        best = d;
        this.#hit = k;
      }
    }
    return best;
  }

  /**
   * The walk state after `depth` (≤ what match() returned) blocks of the matched walk: the overlaps
   * of workers that stop before it into `scores` (zeroed by the caller), the workers that hold all
   * of them into `alive` (`words` mask words); returns the path's node at depth - 1.
   */
  resume(depth: number, scores: Int32Array, alive: Int32Array, words: number): number {
    const w = this.#walks[this.#hit]!;
    w.used = ++this.#clock;
    const held = w.held;
    for (let k = 0; k < words; k++) {
      let bits = 0;
      for (let b = 0; b < 32; b++) {
        const slot = k * 32 + b;
        const h = slot < held.length ? held[slot]! : 0;
        if (h >= depth) bits |= 1 << b;
        else if (h > 0) scores[slot] = h;
      }
      alive[k] = bits;
    }
    return w.path[depth - 1]!;
  }

  /**
   * A walk of `words` resumed at `from` (0: from the root) stopped at `end` with overlaps `scores`
   * ([0, slots)); `path` holds its nodes at depths [from, end). Extends the walk it resumed, or keeps
   * a new one; a walk that added nothing leaves the memo as it was.
   */
  record(words: Uint32Array, from: number, end: number, path: Int32Array, scores: Int32Array, slots: number): void {
    if (end <= from || end > WALK_MEMO_BLOCKS) return;
    let w: KeptWalk;
    let slot = this.#hit;
    if (slot >= 0) {
      w = this.#walks[slot]!;
      if (from < w.end) w.end = from;
      w.resumed = true;
    } else {
      if (end < this.#minBlocks) return;
      slot = this.#walks.length < WALK_MEMO_ENTRIES ? -1 : this.#leastUsed(null, false);
      const victim = slot < 0 ? null : this.#walks[slot]!;
      if ((victim !== null && victim.refEnd > 0) || this.#blocks + end > WALK_MEMO_BLOCKS) {
        if (++this.#offered < this.#admitEvery) return;
        this.#offered = 0;
        // The walk that now makes room (by slot or by blocks) says whether kept walks get resumed.
        const out = this.#walks[this.#leastUsed(null, true)];
        if (out !== undefined) {
          this.#admitEvery = out.resumed
            ? Math.max(WALK_MEMO_ADMIT_EVERY, this.#admitEvery >> 1)
            : Math.min(WALK_MEMO_ADMIT_RARE, this.#admitEvery << 1);
        }
      }
      if (victim === null) {
        slot = this.#walks.length;
        w = { words: EMPTY_WORDS, path: EMPTY_PATH, end: 0, refEnd: 0, held: new Int32Array(0), slots: 0, used: 0, resumed: false, slot };
        this.#walks.push(w);
      } else {
        // The least recently used walk makes room, and its arrays are reused.
        w = victim;
        this.#unrefFrom(w, 0);
        w.resumed = false;
      }
    }
    if (w.path.length < end) {
      const cap = Math.min(WALK_MEMO_BLOCKS, Math.max(end, 2 * w.path.length, 64));
      while (this.#blocks + cap - w.path.length > WALK_MEMO_BLOCKS) this.#drop(this.#leastUsed(w, true));
      this.#resize(w, cap);
    }
    // Words past `end` (to refEnd) stay: what match() checks a returning conversation against.
    w.words.set(words.subarray(2 * w.end, 2 * end), 2 * w.end);
    const kept = w.path;
    let live = this.#live;
    for (let d = w.end; d < end; d++) {
      const node = path[d]!;
      const i = node >>> 5;
      if (i >= live.length) live = this.#live = grown(live, i);
      live[i]! |= 1 << (node & 31);
      if (d < w.refEnd) {
        const old = kept[d]!;
        if (old === node) continue;
        this.#unref(old);
      }
      kept[d] = node;
      this.#ref(node, d, slot);
    }
    if (end > w.refEnd) w.refEnd = end;
    w.end = end;
    this.#setTip(w);
    if (w.held.length < slots) w.held = new Int32Array(slots);
    w.held.set(scores.subarray(0, slots));
    w.slots = slots;
    w.used = ++this.#clock;
  }

  /** A worker's mask bit on `node` flipped: every kept walk through it ends above it. */
  changed(node: number): void {
    if (!hasBit(this.#live, node)) return;
    this.#live[node >>> 5]! &= ~(1 << (node & 31));
    const at = this.#find(node);
    if (at < 0) return;
    const t = this.#table;
    const depth = t[ROW * at + 1]!;
    const only = t[ROW * at + 3]!;
    if (only !== SEVERAL) {
      const w = this.#walks[only]!;
      if (w.end > depth) w.end = depth;
      return;
    }
    for (const w of this.#walks) if (w.end > depth && w.path[depth] === node) w.end = depth;
  }

  /** The index freed `node` (its id may come back at another depth): no path holds it any more. */
  freed(node: number): void {
    if (!hasBit(this.#inTable, node)) return;
    const at = this.#find(node);
    const t = this.#table;
    const depth = t[ROW * at + 1]!;
    const only = t[ROW * at + 3]!;
    if (only !== SEVERAL) {
      this.#shorten(this.#walks[only]!, depth);
      return;
    }
    for (const w of this.#walks) if (w.refEnd > depth && w.path[depth] === node) this.#shorten(w, depth);
  }

  /** Takes a walk's path from `depth` on out of the node table. */
  #unrefFrom(w: KeptWalk, depth: number): void {
    if (w.end > depth) w.end = depth;
    for (let d = depth; d < w.refEnd; d++) this.#unref(w.path[d]!);
    if (depth < w.refEnd) {
      w.refEnd = depth;
      this.#setTip(w);
    }
  }

  #setTip(w: KeptWalk): void {
    const at = 3 * w.slot;
    const r = w.refEnd;
    this.#tips[at] = r;
    this.#tips[at + 1] = r === 0 ? 0 : w.words[2 * r - 2]!;
    this.#tips[at + 2] = r === 0 ? 0 : w.words[2 * r - 1]!;
  }

  /** #unrefFrom, then gives back most of the arrays' room when the walk holds under a quarter of it. */
  #shorten(w: KeptWalk, depth: number): void {
    this.#unrefFrom(w, depth);
    if (w.path.length > 64 && 4 * w.refEnd < w.path.length) this.#resize(w, Math.max(64, 2 * w.refEnd));
  }

  #resize(w: KeptWalk, cap: number): void {
    const p = new Int32Array(cap);
    p.set(w.path.subarray(0, w.refEnd));
    const q = new Uint32Array(2 * cap);
    q.set(w.words.subarray(0, 2 * w.refEnd));
    this.#blocks += cap - w.path.length;
    w.path = p;
    w.words = q;
  }

  /** Least recently used walk other than `keep` (with `roomy`: of those with arrays; empty first otherwise). */
  #leastUsed(keep: KeptWalk | null, roomy: boolean): number {
    let k = -1;
    for (let i = 0; i < this.#walks.length; i++) {
      const w = this.#walks[i]!;
      if (w === keep || (roomy && w.path.length === 0)) continue;
      if (k < 0 || w.used < this.#walks[k]!.used) k = i;
    }
    return k;
  }

  /** Empties a slot: its path leaves the node table, its arrays are let go. */
  #drop(k: number): void {
    const w = this.#walks[k]!;
    this.#unrefFrom(w, 0);
    this.#blocks -= w.path.length;
    w.path = EMPTY_PATH;
    w.words = EMPTY_WORDS;
    w.slots = 0;
    w.used = 0;
    w.resumed = false;
  }

  // --- node table -------------------------------------------------------------------------------

  #find(node: number): number {
    const t = this.#table;
    const m = this.#mask;
    for (let i = home(node) & m; ; i = (i + 1) & m) {
      const n = t[ROW * i]!;
      if (n === node) return i;
      if (n === 0) return ~i;
    }
  }

  #ref(node: number, depth: number, slot: number): void {
    const at = this.#find(node);
    const t = this.#table;
    if (at >= 0) {
      t[ROW * at + 2]!++;
      t[ROW * at + 3] = SEVERAL;
      return;
    }
    const i = ~at;
    t[ROW * i] = node;
    t[ROW * i + 1] = depth;
    t[ROW * i + 2] = 1;
    t[ROW * i + 3] = slot;
    const b = node >>> 5;
    if (b >= this.#inTable.length) this.#inTable = grown(this.#inTable, b);
    this.#inTable[b]! |= 1 << (node & 31);
    if (++this.#count * 10 > (this.#mask + 1) * 7) this.#rehash((this.#mask + 1) * 2);
  }

  #unref(node: number): void {
    const t = this.#table;
    let i = this.#find(node);
    if (--t[ROW * i + 2]! > 0) return;
    this.#inTable[node >>> 5]! &= ~(1 << (node & 31));
    // Backward-shift deletion (no tombstones).
    const m = this.#mask;
    let j = i;
    for (;;) {
      j = (j + 1) & m;
      const n = t[ROW * j]!;
      if (n === 0) break;
      const h = home(n) & m;
      const stays = i <= j ? h > i && h <= j : h > i || h <= j;
      if (!stays) {
        t.copyWithin(ROW * i, ROW * j, ROW * j + ROW);
        i = j;
      }
    }
    t[ROW * i] = 0;
    // No shrinking: the table stays at most 2 × ROW × WALK_MEMO_BLOCKS words (load ≤ 0.7), and a
    // walk cut and walked again would otherwise rehash it down and up each time.
    this.#count--;
  }

  #rehash(capacity: number): void {
    const old = this.#table;
    const t = new Int32Array(ROW * capacity);
    const m = capacity - 1;
    for (let b = 0; b < old.length; b += ROW) {
      const n = old[b]!;
      if (n === 0) continue;
      let i = home(n) & m;
      while (t[ROW * i]! !== 0) i = (i + 1) & m;
      t.set(old.subarray(b, b + ROW), ROW * i);
    }
    this.#table = t;
    this.#mask = m;
  }
}

/** `bits` grown to hold word `i` (at least doubled, so node ids met in order cost amortised O(1)). */
function grown(bits: Int32Array, i: number): Int32Array<ArrayBuffer> {
  const g = new Int32Array(Math.max(i + 1, 2 * bits.length, 64));
  g.set(bits);
  return g;
}
