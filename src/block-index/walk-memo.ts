/**
 * Where recent walks of one radix index (radix-index.ts findMatches) stopped, so the next turn of a
 * conversation walks only the blocks past the part that is unchanged. A walk of a query's first
 * `d` blocks leaves, per worker, its overlap capped at d: the kept walk's overlaps (`held`, capped at
 * its `end`) give that state for every d ≤ end (a worker holds blocks [0, d) iff its held ≥ d), and
 * the path's node at depth d - 1 is where the walk continues. Local hashes are not chained
 * (block-hash.ts), so a kept walk serves a query only as far as their hash words are equal,
 * compared word by word: one tight loop over the prefix instead of one child lookup per block.
 *
 * Exact, not a heuristic: a worker's overlap over [0, d) reads only the mask words of the path's
 * nodes at depths < d. The index reports each mask change (changed()), and every kept walk whose
 * path holds that node at depth c is cut back to end = c (the state at c is still known, so the
 * next walk resumes there). Nodes are created only below the path's end and freed only after their
 * last mask bit is cleared, so no other change can alter a kept state. A live node's depth is
 * fixed, so one table maps a node on any kept path to its depth and the number of paths holding
 * it. A cut keeps the path's nodes past the new end in that table (`refEnd`): a walk that goes the
 * same way again (after another worker touched a block near the root) then only compares node ids;
 * a node is dropped from every path when the index frees it (freed()), before its id is reused.
 */

/** Walks kept per tree (one per recent conversation), least recently used dropped first. */
export const WALK_MEMO_ENTRIES = 128;
/**
 * Path blocks kept over all walks of one tree; a longer walk is not kept. With the node table
 * (≤ 2^17 rows of 12 bytes) and each walk's words and path (12 bytes a block, at most twice what
 * it holds), a tree's memo takes at most ~3.2 MiB.
 */
export const WALK_MEMO_BLOCKS = 1 << 16;
/** Shorter walks are not kept: they cost about what keeping them does (2k tokens at block size 16). */
export const WALK_MEMO_MIN_BLOCKS = 128;
/**
 * A full memo keeps one new walk in this many (dropping the least recently used): more
 * conversations than it holds, taking turns, would otherwise replace every walk before its next
 * turn, and each route would pay for keeping a walk nobody resumes.
 */
export const WALK_MEMO_ADMIT_EVERY = 8;

interface KeptWalk {
  /** The query's hash words (lo, hi per block) over [0, refEnd): past `end`, an earlier query's. */
  words: Uint32Array;
  /** Node id at each depth of [0, refEnd): the walk's path over [0, end), then what it held past a cut. */
  path: Int32Array;
  end: number;
  /** Depths [0, refEnd) of `path` are counted in the node table (end ≤ refEnd). */
  refEnd: number;
  /** Per worker slot: its overlap with the query's first `end` blocks. */
  held: Int32Array;
  used: number;
}

/**
 * A node's home bucket: runs of 16 consecutive ids (a chain stored in one event gets consecutive
 * ids, so its path's nodes mostly do) stay side by side, the runs spread out. Cuts, evictions and
 * records then touch the table about one cache line per run instead of one per block.
 */
function home(node: number): number {
  return (Math.imul(node >>> 4, 0x9e3779b1) & ~15) | (node & 15);
}

const EMPTY_WORDS = new Uint32Array(0);
const EMPTY_PATH = new Int32Array(0);

export class WalkMemo {
  readonly #walks: KeptWalk[] = [];
  #blocks = 0;
  #clock = 0;
  /** Node table: open addressing over [node id, depth, paths holding it]; node 0 (the root) marks empty. */
  #table = new Int32Array(3 * 64);
  #mask = 63;
  #count = 0;
  /** The kept walk the last match() resumes from (-1: none). */
  #hit = -1;
  /** New walks a full memo was offered since it last kept one. */
  #offered = 0;
  readonly #minBlocks: number;

  /** `minBlocks`: shorter walks are not kept (default WALK_MEMO_MIN_BLOCKS). */
  constructor(minBlocks = WALK_MEMO_MIN_BLOCKS) {
    this.#minBlocks = minBlocks;
  }

  /**
   * Depth from which a walk of `words` ([0, 2·count)) may resume: the longest equal prefix, capped
   * at its end, with a kept walk that has the query's hash where its path ends (at min(refEnd,
   * count) - 1: the same conversation, most likely); 0: none. Such a walk is extended by record()
   * even when it serves no depth (cut back to the root), so its path's nodes are not counted again.
   */
  match(words: Uint32Array, count: number): number {
    this.#hit = -1;
    let best = 0;
    const walks = this.#walks;
    for (let k = 0; k < walks.length; k++) {
      const w = walks[k]!;
      const r = Math.min(w.refEnd, count);
      if (r === 0) continue;
      const kw = w.words;
      if (kw[2 * r - 2] !== words[2 * r - 2] || kw[2 * r - 1] !== words[2 * r - 1]) continue;
      const m = 2 * Math.min(w.end, count);
      let d = 0;
      while (d < m && kw[d] === words[d]) d++;
      d >>>= 1;
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
    if (this.#hit >= 0) {
      w = this.#walks[this.#hit]!;
      this.#cut(w, from);
    } else {
      if (end < this.#minBlocks) return;
      if (this.#walks.length >= WALK_MEMO_ENTRIES || this.#blocks + end > WALK_MEMO_BLOCKS) {
        if (++this.#offered < WALK_MEMO_ADMIT_EVERY) return;
        this.#offered = 0;
      }
      if (this.#walks.length < WALK_MEMO_ENTRIES) {
        w = { words: EMPTY_WORDS, path: EMPTY_PATH, end: 0, refEnd: 0, held: new Int32Array(0), used: 0 };
        this.#walks.push(w);
      } else {
        // The least recently used walk makes room, and its arrays are reused.
        w = this.#walks[this.#leastUsed(null)]!;
        this.#unrefFrom(w, 0);
      }
    }
    while (this.#blocks + end - w.refEnd > WALK_MEMO_BLOCKS) this.#drop(this.#leastUsed(w));
    if (w.path.length < end) {
      const cap = Math.min(WALK_MEMO_BLOCKS, Math.max(end, 2 * w.path.length, 64));
      const p = new Int32Array(cap);
      p.set(w.path.subarray(0, w.refEnd));
      const q = new Uint32Array(2 * cap);
      q.set(w.words.subarray(0, 2 * w.refEnd));
      w.path = p;
      w.words = q;
    }
    // Words past `end` (to refEnd) stay: what match() checks a returning conversation against.
    w.words.set(words.subarray(2 * w.end, 2 * end), 2 * w.end);
    const kept = w.path;
    for (let d = w.end; d < end; d++) {
      const node = path[d]!;
      if (d < w.refEnd) {
        const old = kept[d]!;
        if (old === node) continue;
        this.#unref(old);
      }
      kept[d] = node;
      this.#ref(node, d);
    }
    if (end > w.refEnd) {
      this.#blocks += end - w.refEnd;
      w.refEnd = end;
    }
    w.end = end;
    if (w.held.length < slots) w.held = new Int32Array(slots);
    w.held.set(scores.subarray(0, slots));
    w.held.fill(0, slots);
    w.used = ++this.#clock;
  }

  /** A worker's mask bit on `node` flipped: every kept walk through it ends above it. */
  changed(node: number): void {
    if (this.#count === 0) return;
    const at = this.#find(node);
    if (at < 0) return;
    const depth = this.#table[3 * at + 1]!;
    for (const w of this.#walks) if (w.end > depth && w.path[depth] === node) this.#cut(w, depth);
  }

  /** The index freed `node` (its id may come back at another depth): no path holds it any more. */
  freed(node: number): void {
    if (this.#count === 0) return;
    const at = this.#find(node);
    if (at < 0) return;
    const depth = this.#table[3 * at + 1]!;
    for (const w of this.#walks) if (w.refEnd > depth && w.path[depth] === node) this.#unrefFrom(w, depth);
  }

  /** Cuts a kept walk back to its first `end` blocks (its overlaps stay: they cap at the new end). */
  #cut(w: KeptWalk, end: number): void {
    if (end >= w.end) return;
    w.end = end;
    const held = w.held;
    for (let s = 0; s < held.length; s++) if (held[s]! > end) held[s] = end;
  }

  /** Cuts a walk to `depth` and takes its path from there out of the node table. */
  #unrefFrom(w: KeptWalk, depth: number): void {
    this.#cut(w, depth);
    for (let d = depth; d < w.refEnd; d++) this.#unref(w.path[d]!);
    this.#blocks -= w.refEnd - depth;
    w.refEnd = depth;
  }

  #leastUsed(keep: KeptWalk | null): number {
    let k = -1;
    for (let i = 0; i < this.#walks.length; i++) {
      const w = this.#walks[i]!;
      if (w !== keep && (k < 0 || w.used < this.#walks[k]!.used)) k = i;
    }
    return k;
  }

  #drop(k: number): void {
    this.#unrefFrom(this.#walks[k]!, 0);
    const last = this.#walks.pop()!;
    if (this.#hit === k) this.#hit = -1;
    else if (this.#hit === this.#walks.length) this.#hit = k;
    if (k < this.#walks.length) this.#walks[k] = last;
  }

  // --- node table -------------------------------------------------------------------------------

  #find(node: number): number {
    const t = this.#table;
    const m = this.#mask;
    for (let i = home(node) & m; ; i = (i + 1) & m) {
      const n = t[3 * i]!;
      if (n === node) return i;
      if (n === 0) return ~i;
    }
  }

  #ref(node: number, depth: number): void {
    const at = this.#find(node);
    if (at >= 0) {
      this.#table[3 * at + 2]!++;
      return;
    }
    const t = this.#table;
    const i = ~at;
    t[3 * i] = node;
    t[3 * i + 1] = depth;
    t[3 * i + 2] = 1;
    if (++this.#count * 10 > (this.#mask + 1) * 7) this.#rehash((this.#mask + 1) * 2);
  }

  #unref(node: number): void {
    const t = this.#table;
    let i = this.#find(node);
    if (--t[3 * i + 2]! > 0) return;
    // Backward-shift deletion (no tombstones).
    const m = this.#mask;
    let j = i;
    for (;;) {
      j = (j + 1) & m;
      const n = t[3 * j]!;
      if (n === 0) break;
      const h = home(n) & m;
      const stays = i <= j ? h > i && h <= j : h > i || h <= j;
      if (!stays) {
        t[3 * i] = n;
        t[3 * i + 1] = t[3 * j + 1]!;
        t[3 * i + 2] = t[3 * j + 2]!;
        i = j;
      }
    }
    t[3 * i] = 0;
    // No shrinking: the table stays at most 2 × 3 × WALK_MEMO_BLOCKS words (load ≤ 0.7), and a
    // walk cut and walked again would otherwise rehash it down and up each time.
    this.#count--;
  }

  #rehash(capacity: number): void {
    const old = this.#table;
    const t = new Int32Array(3 * capacity);
    const m = capacity - 1;
    for (let b = 0; b < old.length; b += 3) {
      const n = old[b]!;
      if (n === 0) continue;
      let i = home(n) & m;
      while (t[3 * i]! !== 0) i = (i + 1) & m;
      t[3 * i] = n;
      t[3 * i + 1] = old[b + 1]!;
      t[3 * i + 2] = old[b + 2]!;
    }
    this.#table = t;
    this.#mask = m;
  }
}
