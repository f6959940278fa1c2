/**
 * The shared BPE table, decoded once per isolate from the generated blob
 * (scripts/assets/20-tokenizer.mjs documents the layout). Two open-addressing tables make every
 * lookup allocation-free:
 *  - bytes → id (whole-piece shortcut, tokenToId, building the pair table);
 *  - (left id, right id) → merged id. Merge i produces id 256+i, so the merged id IS the merge rank.
 */
import { decodeBase64 } from "./base64.ts";

const MAGIC = 0x45504251; // "QBPE" little-endian
const FORMAT_VERSION = 1;
export const NO_TOKEN = -1;

export interface Vocab {
  readonly size: number;
  /** All token bytes concatenated in id order; token id spans [offset[id], offset[id + 1]). */
  readonly bytes: Uint8Array;
  readonly offset: Uint32Array;
  /** Token id of each single byte value. */
  readonly byteId: Int32Array;
  readonly leftId: Int32Array;
  readonly rightId: Int32Array;
  readonly byteTable: Int32Array;
  readonly byteMask: number;
  readonly pairTable: Int32Array;
  readonly pairMask: number;
  /**
   * One bit per pair-hash bucket (2^20 bits, 128 KiB, cache-resident), set for every merge: a clear
   * bit answers "no merge" without touching the 2 MiB pair table. Most pairs BPE looks up in CJK
   * text (two adjacent characters) have no merge.
   */
  readonly pairFilter: Int32Array;
  /**
   * Ids (ascending) of the merges that join part of a multi-byte character to a neighbouring
   * character: a lead-byte fragment after a continuation byte, or continuation bytes alone before a
   * lead byte. Collected here, in the pass that already reads every merge, for char-tokens.ts.
   */
  readonly fragmentMerges: readonly number[];
}

function tableSize(n: number): number {
  let size = 1;
  while (size < n * 3) size <<= 1;
  return size;
}

/** FNV-1a over buf[start, end). */
export function hashBytes(buf: Uint8Array, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ buf[i]!, 0x01000193);
  return h >>> 0;
}

export function pairHash(a: number, b: number): number {
  return (Math.imul(a, 0x9e3779b1) ^ Math.imul(b + 0x7f4a7c15, 0x85ebca6b)) >>> 0;
}

/** Id of the token whose bytes are exactly buf[start, end), or NO_TOKEN. `hash`: hashBytes of them, if the caller has it. */
export function lookupBytes(v: Vocab, buf: Uint8Array, start: number, end: number, hash = hashBytes(buf, start, end)): number {
  const len = end - start;
  const { bytes, offset, byteTable, byteMask } = v;
  let slot = hash & byteMask;
  for (;;) {
    const id = byteTable[slot]!;
    if (id === NO_TOKEN) return NO_TOKEN;
    const o = offset[id]!;
    if (offset[id + 1]! - o === len) {
      let i = 0;
      while (i < len && bytes[o + i] === buf[start + i]) i++;
      if (i === len) return id;
    }
    slot = (slot + 1) & byteMask;
  }
}

/** Merged id (= merge rank) of the adjacent pair (a, b), or NO_TOKEN if no merge exists. */
export function lookupPair(v: Vocab, a: number, b: number): number {
  const { pairTable, pairMask, pairFilter, leftId, rightId } = v;
  const h = pairHash(a, b);
  if ((pairFilter[h >>> 17]! & (1 << ((h >>> 12) & 31))) === 0) return NO_TOKEN;
  let slot = h & pairMask;
  for (;;) {
    const id = pairTable[slot]!;
    if (id === NO_TOKEN || (leftId[id] === a && rightId[id] === b)) return id;
    slot = (slot + 1) & pairMask;
  }
}

/** A UTF-8 continuation byte (10xxxxxx). */
export function isContinuation(b: number): boolean {
  return b >= 0x80 && b < 0xc0;
}

/** Fragment kinds of a token (decodeVocab), for Vocab.fragmentMerges. */
const LEAD_FRAGMENT = 1; // a lead byte without all its continuation bytes
const CONT_FRAGMENT = 2; // continuation bytes only

export function decodeVocab(b64: string): Vocab {
  const blob = decodeBase64(b64);
  const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  if (view.getUint32(0, true) !== MAGIC || view.getUint32(4, true) !== FORMAT_VERSION) {
    throw new Error("tokenizer vocabulary blob has an unknown format; rerun npm run build:assets");
  }
  const n = view.getUint32(8, true);
  const lens = blob.subarray(12, 12 + n);
  const leftLen = blob.subarray(12 + n, 12 + 2 * n);
  const bytes = blob.subarray(12 + 2 * n);
  const offset = new Uint32Array(n + 1);
  for (let id = 0; id < n; id++) offset[id + 1] = offset[id]! + lens[id]!;
  if (offset[n] !== bytes.length) throw new Error("tokenizer vocabulary blob is truncated");

  const byteSize = tableSize(n);
  const byteTable = new Int32Array(byteSize).fill(NO_TOKEN);
  const byteMask = byteSize - 1;
  const byteId = new Int32Array(256).fill(NO_TOKEN);
  const fragment = new Uint8Array(n);
  for (let id = 0; id < n; id++) {
    const o = offset[id]!;
    const e = offset[id + 1]!;
    if (e - o === 1) byteId[bytes[o]!] = id;
    const first = bytes[o]!;
    if (first >= 0xc0) {
      if (e - o < (first >= 0xf0 ? 4 : first >= 0xe0 ? 3 : 2)) fragment[id] = LEAD_FRAGMENT;
    } else if (isContinuation(first)) {
      let i = o + 1;
      while (i < e && isContinuation(bytes[i]!)) i++;
      if (i === e) fragment[id] = CONT_FRAGMENT;
    }
    let slot = hashBytes(bytes, o, e) & byteMask;
    while (byteTable[slot] !== NO_TOKEN) slot = (slot + 1) & byteMask;
    byteTable[slot] = id;
  }

  const leftId = new Int32Array(n).fill(NO_TOKEN);
  const rightId = new Int32Array(n).fill(NO_TOKEN);
  const pairSize = tableSize(n);
  const pairTable = new Int32Array(pairSize).fill(NO_TOKEN);
  const pairMask = pairSize - 1;
  const fragmentMerges: number[] = [];
  const pairFilter = new Int32Array(1 << 15);
  const v: Vocab = { size: n, bytes, offset, byteId, leftId, rightId, byteTable, byteMask, pairTable, pairMask, pairFilter, fragmentMerges };
  for (let id = 0; id < n; id++) {
    const l = leftLen[id]!;
    if (l === 0) continue;
    const o = offset[id]!;
    const a = lookupBytes(v, bytes, o, o + l);
    const b = lookupBytes(v, bytes, o + l, offset[id + 1]!);
    if (a === NO_TOKEN || b === NO_TOKEN) throw new Error(`tokenizer vocabulary: merge operands of token ${id} are missing`);
    if ((fragment[b] === LEAD_FRAGMENT && isContinuation(bytes[o + l - 1]!)) || (fragment[a] === CONT_FRAGMENT && bytes[o + l]! >= 0xc0)) fragmentMerges.push(id);
    leftId[id] = a;
    rightId[id] = b;
    const h = pairHash(a, b);
    pairFilter[h >>> 17]! |= 1 << ((h >>> 12) & 31);
    let slot = h & pairMask;
    while (pairTable[slot] !== NO_TOKEN) slot = (slot + 1) & pairMask;
    pairTable[slot] = id;
  }
  return v;
}
