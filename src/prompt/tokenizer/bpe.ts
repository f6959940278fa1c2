/**
 * Byte-level BPE over the pair table: repeatedly merge the adjacent pair with the lowest merge rank
 * (leftmost on ties), exactly as HF tokenizers' BPE::merge_word does. Since merge i yields id 256+i,
 * the merged id doubles as the rank. The input is a symbol sequence: byte tokens, or whole
 * character tokens where char-tokens.ts proves that gives the same result.
 */
import type { IdBuffer } from "./id-buffer.ts";
import { lookupPair, NO_TOKEN, type Vocab } from "./vocab.ts";

/** Pieces up to this many symbols use the quadratic scan; longer ones a heap (O(n log n)). */
const SCAN_LIMIT = 64;
const NO_RANK = 0x7fffffff;

let ranks = new Int32Array(256);

function ensure(n: number): void {
  if (ranks.length >= n) return;
  let size = ranks.length;
  while (size < n) size <<= 1;
  ranks = new Int32Array(size);
}

function rankOf(v: Vocab, a: number, b: number): number {
  const r = lookupPair(v, a, b);
  return r === NO_TOKEN ? NO_RANK : r;
}

/** Token ids of the symbols ids[0, n) (n >= 2), appended to out; ids is used as scratch. */
export function bpe(v: Vocab, ids: Int32Array, n: number, out: IdBuffer): void {
  if (n > SCAN_LIMIT) return bpeHeap(v, ids, n, out);
  ensure(n);
  let m = n;
  for (let i = 0; i < m - 1; i++) ranks[i] = rankOf(v, ids[i]!, ids[i + 1]!);
  while (m > 1) {
    let best = NO_RANK;
    let k = -1;
    for (let i = 0; i < m - 1; i++) {
      const r = ranks[i]!;
      if (r < best) {
        best = r;
        k = i;
      }
    }
    if (k < 0) break;
    ids[k] = best;
    // Drop part k+1 and the rank of pair (k+1, k+2) moves down to k+1.
    ids.copyWithin(k + 1, k + 2, m);
    ranks.copyWithin(k + 1, k + 2, m - 1);
    m--;
    if (k < m - 1) ranks[k] = rankOf(v, best, ids[k + 1]!);
    if (k > 0) ranks[k - 1] = rankOf(v, ids[k - 1]!, best);
  }
  for (let i = 0; i < m; i++) out.push(ids[i]!);
}

// Heap path: symbols form a linked list over their original positions; heap keys are
// rank * 2^32 + position, so ties go to the leftmost pair. Stale entries are skipped on pop.
let next = new Int32Array(0);
let prev = new Int32Array(0);
let heap = new Float64Array(0);
const POS = 0x100000000;

function bpeHeap(v: Vocab, ids: Int32Array, n: number, out: IdBuffer): void {
  ensure(n);
  if (next.length < n) {
    next = new Int32Array(ranks.length);
    prev = new Int32Array(ranks.length);
    heap = new Float64Array(ranks.length);
  }
  for (let i = 0; i < n; i++) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  let size = 0;
  const push = (key: number): void => {
    if (size === heap.length) {
      const bigger = new Float64Array(size * 2);
      bigger.set(heap);
      heap = bigger;
    }
    let i = size++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (heap[p]! <= key) break;
      heap[i] = heap[p]!;
      i = p;
    }
    heap[i] = key;
  };
  const pop = (): number => {
    const top = heap[0]!;
    const last = heap[--size]!;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= size) break;
      if (c + 1 < size && heap[c + 1]! < heap[c]!) c++;
      if (heap[c]! >= last) break;
      heap[i] = heap[c]!;
      i = c;
    }
    heap[i] = last;
    return top;
  };
  for (let i = 0; i < n - 1; i++) {
    const r = lookupPair(v, ids[i]!, ids[i + 1]!);
    if (r !== NO_TOKEN) push(r * POS + i);
  }
  while (size > 0) {
    const key = pop();
    const rank = Math.floor(key / POS);
    const pos = key - rank * POS;
    const right = next[pos]!;
    // Stale if pos was merged away (prev link broken), has no right neighbour, or the pair changed.
    if (right < 0 || ids[pos] === NO_TOKEN || lookupPair(v, ids[pos]!, ids[right]!) !== rank) continue;
    ids[pos] = rank;
    ids[right] = NO_TOKEN;
    const after = next[right]!;
    next[pos] = after;
    if (after >= 0) prev[after] = pos;
    const before = prev[pos]!;
    if (before >= 0) {
      const r = lookupPair(v, ids[before]!, rank);
      if (r !== NO_TOKEN) push(r * POS + before);
    }
    if (after >= 0) {
      const r = lookupPair(v, rank, ids[after]!);
      if (r !== NO_TOKEN) push(r * POS + pos);
    }
  }
  for (let i = 0; i >= 0; i = next[i]!) out.push(ids[i]!);
}
