/**
 * Ordinary-text encoder shared by every model family: NFC → Qwen2 pre-tokenizer → byte-level BPE.
 * Added tokens are split off before this (tokenizer.ts); pieces come from piece-scanner.ts. Holds the
 * per-piece and per-segment caches, each per cache partition (src/edge/cache-salt.ts
 * edgeCachePartition; "" the common one): a warm piece is about a microsecond faster, so thousands
 * of shared ones would tell one tenant which rare words another has just sent.
 * Text holding a Unicode-skew code point takes the patched slow path (skew.ts).
 */
import { bpe } from "./bpe.ts";
import { CharTokens, CONDITIONAL, UNRESOLVED } from "./char-tokens.ts";
import { IdBuffer } from "./id-buffer.ts";
import { asciiPieceEnd, PieceScanner } from "./piece-scanner.ts";
import { SegmentCache, type SegmentCacheStats } from "./segment-cache.ts";
import { hasSkew, referenceNfc, skewCodePoints, type CodePointSet } from "./skew.ts";
import { hashBytes, lookupBytes, NO_TOKEN, type Vocab } from "./vocab.ts";

/**
 * Every code point NFC can change is >= U+0300, and so is every skew code point (the generator
 * checks), so text below that skips normalize() and the skew checks.
 */
const MAY_NEED_NFC = /[\u0300-\uffff]/;
const utf8Encoder = new TextEncoder();
/**
 * encodeFast reads its text's ASCII pieces from the text's UTF-8, made by one native encodeInto: a
 * typed-array read costs less than charCodeAt on a sliced string, and each character is read three
 * times (scan, hash, memo compare). The buffer is kept up to this size (3 bytes per code unit: a
 * 1 MiB buffer serves 349k characters, ~86k tokens of prose); a longer text gets its own.
 */
const MAX_KEPT_TEXT_BYTES = 1 << 20;

export interface EngineOptions {
  /** Total characters of segment text kept in the segment LRU. */
  segmentCacheChars: number;
  segmentCacheBytes?: number;
  /** Multi-token pieces kept per cache generation (two generations). */
  pieceCacheEntries: number;
  /** Estimated bytes of both generations together (a generation turns old at half of it). */
  pieceCacheBytes?: number;
}

export interface EngineCacheStats {
  segments: SegmentCacheStats;
  pieces: { entries: number; maxEntries: number; bytes: number; maxBytes: number; partitions: number; memoPartitions: number };
}

type PieceMap = Map<string, Int32Array>;

/**
 * The piece memo: a direct-mapped table (slot = the piece's FNV hash) of the last piece of up to
 * HOT_PIECE_BYTES bytes seen in each slot, with its ids when it has at most HOT_IDS of them, or the
 * fact that it is not one token. A piece that is a token costs a probe of the vocabulary's byte table
 * (2 MiB) and reads of its offsets and bytes, about three cache misses, most of a cold prose
 * encode's time; any other costs a string slice and a Map lookup. Prose repeats its words, and a
 * repeated piece is found here, in a 4 MiB array, with neither. The ids are the BPE of the piece's
 * bytes, a function of those bytes alone, so a hit answers exactly what the lookup would.
 * 65,536 slots: on fresh 3k-token prose after 120 others, 1.6 % of pieces miss the memo (5.3 % at
 * 16,384 slots), −8…−14 % per token in workerd and Node; 131,072 slots were slower than 65,536.
 * A slot's meta word, ids and bytes lie together in 64 bytes: between two turns the rest of the
 * request evicts the memo from the CPU's caches, and a probe then costs one miss, not one per array.
 */
export const PIECE_MEMO_SLOTS = 65536;
const HOT_SLOTS = PIECE_MEMO_SLOTS;
const HOT_PIECE_BYTES = 24;
const HOT_IDS = 4;
/** A slot's Int32 words: its meta word, HOT_IDS ids, then its bytes; 64 bytes, one cache line at best. */
const SLOT_WORDS = 16;
const SLOT_BYTES_AT = 4 * (1 + HOT_IDS);
/**
 * A memo slot's meta word: its piece's byte length (bits 0-7), ids held (bits 8-15), the number of
 * the partition that filled it (bits 16-30; 0 the common one). A hit needs all but the ids count
 * equal, so a partition's memo hits are its own; the common partition compares what it did alone.
 */
const HOT_IDS_SHIFT = 8;
const HOT_TAG_SHIFT = 16;
const HOT_TAG_MASK = ~(0xff << HOT_IDS_SHIFT);
/**
 * Partitions numbered for the memo's tags; the next new one empties the memo and starts the
 * numbering over (tags stay below 2^15; the table of ids stays small: ~200 kB at 43-char ids).
 */
export const MEMO_PARTITIONS = 1024;

/** Longer pieces (rare: a long run of letters) are BPE'd every time rather than cached. */
const MAX_CACHED_PIECE_CHARS = 128;
const PIECE_OVERHEAD_BYTES = 120;
/** A partition's Map in one generation, besides its id's characters. */
const PARTITION_MAP_BYTES = 200;

export class BpeEngine {
  readonly vocab: Vocab;
  private readonly scanner = new PieceScanner();
  private readonly segments: SegmentCache;
  // Two-generation piece cache: when `young` fills up it becomes `old` and the previous old is
  // dropped, which approximates LRU without per-hit bookkeeping. A generation holds one Map per
  // partition; its entry and byte counts are of all of them (one budget for every tenant).
  private young = new Map<string, PieceMap>();
  private old = new Map<string, PieceMap>();
  private youngEntries = 0;
  private oldEntries = 0;
  private youngBytes = 0;
  private oldBytes = 0;
  /** The current encode's partition, its Maps in each generation (undefined: none yet) and memo tag. */
  private partition = "";
  private youngPieces: PieceMap | undefined = undefined;
  private oldPieces: PieceMap | undefined = undefined;
  /** The current partition's memo tag << HOT_TAG_SHIFT. */
  private hotTagBits = 0;
  /** Partition → its memo tag (1…MEMO_PARTITIONS); the common partition is 0 and not listed. */
  private readonly memoTags = new Map<string, number>();
  private readonly pieceCacheEntries: number;
  private readonly pieceCacheBytes: number;
  private buf = new Uint8Array(1024);
  /** encodeFast's UTF-8 of its text (textBytesFor). */
  private textBytes = new Uint8Array(4096);
  /** BPE's starting symbols of the current piece (see symbols()). */
  private syms = new Int32Array(1024);
  /** Made on the first non-ASCII piece that needs BPE. */
  private charTokens: CharTokens | null = null;
  private readonly scratch = new IdBuffer();
  private readonly skew: CodePointSet = skewCodePoints();
  /** Set by utf8() when a piece holds a skew code point. */
  private sawSkew = false;
  /**
   * The piece memo, per slot: its meta word (HOT_TAG_SHIFT; length 0: empty; ids held 0: not one
   * token, ids not held), the ids, the bytes.
   */
  private readonly hot = new Int32Array(HOT_SLOTS * SLOT_WORDS);
  private readonly hotBytes = new Uint8Array(this.hot.buffer);

  constructor(vocab: Vocab, options: EngineOptions) {
    this.vocab = vocab;
    this.segments = new SegmentCache(options.segmentCacheChars, options.segmentCacheBytes);
    this.pieceCacheEntries = options.pieceCacheEntries;
    this.pieceCacheBytes = options.pieceCacheBytes ?? 3 * 1024 * 1024;
  }

  /**
   * Appends the ids of one segment (text containing no added token; sliced from a string of
   * sourceChars) to out; the segment cache is read and filled in `partition` only (segment-cache.ts).
   */
  encodeSegment(segment: string, out: IdBuffer, partition: string, sourceChars = Number.POSITIVE_INFINITY): void {
    if (segment.length === 0) return;
    const cached = this.segments.get(segment, partition);
    if (cached !== undefined) {
      out.pushAll(cached);
      return;
    }
    const start = out.length;
    this.encodeUncached(segment, out, partition);
    this.segments.set(segment, out.ids.slice(start, out.length), partition, sourceChars);
  }

  /** Encodes without consulting or filling the segment cache; the piece caches of `partition` only. */
  encodeUncached(segment: string, out: IdBuffer, partition: string): void {
    if (partition !== this.partition) this.usePartition(partition);
    if (!MAY_NEED_NFC.test(segment)) {
      this.encodeFast(segment, out);
      return;
    }
    const text = segment.normalize("NFC");
    // Skew is looked for in the pieces as they are UTF-8 encoded (nearly free). That is only the
    // input's skew when NFC changed nothing; otherwise the input is scanned first, so a runtime
    // that normalizes a skew code point away cannot hide it.
    const start = out.length;
    if ((text === segment || !hasSkew(segment)) && this.encodeFast(text, out)) return;
    out.length = start;
    this.encodeSkewed(segment, out);
  }

  /**
   * The slow path (called by encodeUncached, in its partition): the reference's NFC; the same exact
   * `\p{L}`/`\p{N}` split as the fast path.
   */
  encodeSkewed(segment: string, out: IdBuffer): void {
    const text = referenceNfc(segment);
    const tagBits = this.hotTagBits;
    for (let i = 0; i < text.length; ) {
      const end = this.scanner.pieceEnd(text, i);
      this.encodeSpan(text, i, end, out, tagBits);
      i = end;
    }
  }

  /** Runtime NFC'd text; false (ids incomplete) on a skew code point. */
  private encodeFast(text: string, out: IdBuffer): boolean {
    this.sawSkew = false;
    const scanner = this.scanner;
    const tagBits = this.hotTagBits;
    const bytes = this.textBytesFor(text.length);
    const len = utf8Encoder.encodeInto(text, bytes).written;
    // i: the piece's first code unit; b: its first UTF-8 byte (an ASCII piece has as many of each).
    // Both bound the loop: on well-formed text they end together, and i alone always grows, so a lone
    // surrogate (3 UTF-8 bytes, which pieceEnd's UTF-8 count takes with the next unit as 4) cannot
    // hold the loop; such text is refused before it reaches the engine (QwenTokenizer's encode).
    for (let i = 0, b = 0; b < len && i < text.length; ) {
      // Most pieces of prose and code are ASCII ones the memo holds: found from the bytes themselves.
      const ascii = asciiPieceEnd(bytes, b, len);
      if (ascii >= 0) {
        const n = ascii - b;
        if (!this.hotAscii(bytes, b, n, out, tagBits)) this.encodeSpan(text, i, i + n, out, tagBits);
        i += n;
        b = ascii;
        continue;
      }
      const end = scanner.pieceEnd(text, i);
      b += this.encodeSpan(text, i, end, out, tagBits);
      if (this.sawSkew) return false;
      i = end;
    }
    return true;
  }

  /** A buffer for the UTF-8 of a text of `chars` code units: the kept one, grown up to MAX_KEPT_TEXT_BYTES. */
  private textBytesFor(chars: number): Uint8Array {
    const need = 3 * chars;
    if (this.textBytes.length >= need) return this.textBytes;
    if (need > MAX_KEPT_TEXT_BYTES) return new Uint8Array(need);
    this.textBytes = new Uint8Array(Math.min(MAX_KEPT_TEXT_BYTES, Math.max(need, 2 * this.textBytes.length)));
    return this.textBytes;
  }

  /**
   * Appends the ids of the ASCII piece bytes[start, start + n) (asciiPieceEnd's) when the memo
   * holds them, without copying it first: the slot, the comparison and the ids are encodeSpan's.
   * False, with nothing appended, otherwise.
   */
  private hotAscii(bytes: Uint8Array, start: number, n: number, out: IdBuffer, tagBits: number): boolean {
    if (n === 1) {
      out.push(this.vocab.byteId[bytes[start]!]!);
      return true;
    }
    if (n > HOT_PIECE_BYTES) return false;
    const slot = hashBytes(bytes, start, start + n) & (HOT_SLOTS - 1);
    const meta = this.hot[slot * SLOT_WORDS]!;
    const count = (meta >>> HOT_IDS_SHIFT) & 0xff;
    if ((meta & HOT_TAG_MASK) !== (n | tagBits) || count === 0) return false;
    const hot = this.hotBytes;
    const at = slot * 4 * SLOT_WORDS + SLOT_BYTES_AT;
    for (let k = 0; k < n; k++) if (hot[at + k] !== bytes[start + k]) return false;
    for (let k = 1, ids = slot * SLOT_WORDS; k <= count; k++) out.push(this.hot[ids + k]!);
    return true;
  }

  /**
   * Appends the ids of the piece text[start, end) and returns its UTF-8 length; the piece's string
   * is made only when a cache or BPE needs it.
   * `tagBits`: this.hotTagBits, read once per segment by the caller (read per piece, it cost shared
   * mode ~0.7 % of a cold encode).
   */
  private encodeSpan(text: string, start: number, end: number, out: IdBuffer, tagBits: number): number {
    const n = this.utf8(text, start, end);
    const v = this.vocab;
    if (n === 1) {
      out.push(v.byteId[this.buf[0]!]!);
      return n;
    }
    // Whole-piece shortcut: a piece that is itself a token is that token (the unit test
    // "every token BPE-encodes to itself" proves this matches HF's merge-by-merge result).
    let slot = -1;
    let whole: number;
    if (n <= HOT_PIECE_BYTES) {
      const hash = hashBytes(this.buf, 0, n);
      slot = hash & (HOT_SLOTS - 1);
      if (this.hotHolds(slot, n | tagBits)) {
        const at = slot * SLOT_WORDS;
        const count = (this.hot[at]! >>> HOT_IDS_SHIFT) & 0xff;
        for (let k = 1; k <= count; k++) out.push(this.hot[at + k]!);
        if (count > 0) return n;
        whole = NO_TOKEN;
      } else {
        whole = lookupBytes(v, this.buf, 0, n, hash);
        this.hotClaim(slot, n, whole, tagBits);
      }
    } else whole = lookupBytes(v, this.buf, 0, n);
    if (whole !== NO_TOKEN) {
      out.push(whole);
      return n;
    }
    const piece = text.slice(start, end);
    if (n !== piece.length && this.encodeWithWholeChars(piece, n, out)) return n;
    // Longer pieces are never cached, and not looked up either: V8 copies a string into its string
    // table to use it as a Map key.
    const cacheable = piece.length <= MAX_CACHED_PIECE_CHARS;
    let ids = cacheable ? this.youngPieces?.get(piece) : undefined;
    if (ids === undefined) {
      if (cacheable) ids = this.oldPieces?.get(piece);
      if (ids === undefined) {
        const tmp = this.scratch;
        tmp.length = 0;
        bpe(v, this.byteSymbols(n), n, tmp);
        ids = tmp.ids.slice(0, tmp.length);
      }
      if (cacheable) this.keepPiece(piece, ids);
    }
    if (slot >= 0 && ids.length <= HOT_IDS) {
      this.hot.set(ids, slot * SLOT_WORDS + 1);
      this.hot[slot * SLOT_WORDS] = n | (ids.length << HOT_IDS_SHIFT) | tagBits;
    }
    out.pushAll(ids);
    return n;
  }

  /**
   * Puts a piece's ids in the young generation of the current partition, turning the generations
   * first when they would not fit: each stays within half the byte budget and the entry bound.
   */
  private keepPiece(piece: string, ids: Int32Array): void {
    const bytes = 2 * piece.length + ids.byteLength + PIECE_OVERHEAD_BYTES;
    const mapBytes = PARTITION_MAP_BYTES + 2 * this.partition.length;
    if (this.youngEntries >= this.pieceCacheEntries || 2 * (this.youngBytes + bytes + mapBytes) > this.pieceCacheBytes) {
      this.old = this.young;
      this.oldEntries = this.youngEntries;
      this.oldBytes = this.youngBytes;
      this.oldPieces = this.youngPieces;
      this.young = new Map();
      this.youngEntries = 0;
      this.youngBytes = 0;
      this.youngPieces = undefined;
    }
    let pieces = this.youngPieces;
    if (pieces === undefined) {
      this.young.set(this.partition, (pieces = this.youngPieces = new Map()));
      this.youngBytes += mapBytes;
    }
    pieces.set(piece, ids);
    this.youngEntries++;
    this.youngBytes += bytes;
  }

  /**
   * Makes `partition` the one whose piece Maps and memo slots the next encode reads and fills. A
   * partition past the numbering's bound empties the memo and starts the numbering over, so no
   * slot of an earlier holder of a tag is read under it.
   */
  private usePartition(partition: string): void {
    this.partition = partition;
    this.youngPieces = this.young.get(partition);
    this.oldPieces = this.old.get(partition);
    if (partition === "") {
      this.hotTagBits = 0;
      return;
    }
    let tag = this.memoTags.get(partition);
    if (tag === undefined) {
      if (this.memoTags.size >= MEMO_PARTITIONS) {
        this.memoTags.clear();
        this.hot.fill(0);
      }
      this.memoTags.set(partition, (tag = this.memoTags.size + 1));
    }
    this.hotTagBits = tag << HOT_TAG_SHIFT;
  }

  /** Whether memo slot `slot` holds the piece this.buf[0, n) of the partition: key = n | its tag bits. */
  private hotHolds(slot: number, key: number): boolean {
    if ((this.hot[slot * SLOT_WORDS]! & HOT_TAG_MASK) !== key) return false;
    const n = key & 0xff;
    const hot = this.hotBytes;
    const buf = this.buf;
    const at = slot * 4 * SLOT_WORDS + SLOT_BYTES_AT;
    for (let i = 0; i < n; i++) if (hot[at + i] !== buf[i]) return false;
    return true;
  }

  /** Puts the piece this.buf[0, n) in memo slot `slot`: `whole` its token, or NO_TOKEN (ids not held yet). */
  private hotClaim(slot: number, n: number, whole: number, tagBits: number): void {
    const hot = this.hotBytes;
    const buf = this.buf;
    const at = slot * 4 * SLOT_WORDS + SLOT_BYTES_AT;
    for (let i = 0; i < n; i++) hot[at + i] = buf[i]!;
    this.hot[slot * SLOT_WORDS + 1] = whole;
    this.hot[slot * SLOT_WORDS] = n | ((whole === NO_TOKEN ? 0 : 1) << HOT_IDS_SHIFT) | tagBits;
  }

  /** this.syms, with room for the symbols of an n-byte piece (at most one per byte). */
  private symsFor(n: number): Int32Array {
    if (this.syms.length < n) this.syms = new Int32Array(this.buf.length);
    return this.syms;
  }

  /** Byte tokens of this.buf[0, n) in this.syms, which is returned. */
  private byteSymbols(n: number): Int32Array {
    const syms = this.symsFor(n);
    const byteId = this.vocab.byteId;
    for (let i = 0; i < n; i++) syms[i] = byteId[this.buf[i]!]!;
    return syms;
  }

  /**
   * BPE of a non-ASCII piece (its n UTF-8 bytes in this.buf) where some character enters whole
   * (char-tokens.ts allows it there, and no ASCII character is next to it in the piece); false, with nothing
   * appended, when none does. Such pieces skip the piece cache: whole-character symbols leave a few
   * merges, about what a cache probe costs, and they (CJK clauses) rarely repeat, so caching them
   * would only evict useful entries. Kept apart from encodePiece so the ASCII path stays small.
   */
  private encodeWithWholeChars(piece: string, n: number, out: IdBuffer): boolean {
    const syms = this.symsFor(n);
    const buf = this.buf;
    const byteId = this.vocab.byteId;
    const len = piece.length;
    const chars = (this.charTokens ??= new CharTokens(this.vocab));
    const table = chars.table;
    let m = 0;
    let p = 0;
    for (let i = 0; i < len; i++) {
      const c = piece.charCodeAt(i);
      if (c < 0x80) {
        syms[m++] = byteId[c]!;
        p++;
        continue;
      }
      let id = table[c]!;
      if (id === UNRESOLVED) id = chars.resolve(c);
      if (id !== NO_TOKEN && (i === 0 || piece.charCodeAt(i - 1) >= 0x80) && (i + 1 === len || piece.charCodeAt(i + 1) >= 0x80)) {
        if (id === CONDITIONAL) id = chars.inContext(piece, i);
        if (id !== NO_TOKEN) {
          syms[m++] = id;
          p += c < 0x800 ? 2 : 3;
          continue;
        }
      }
      // Same widths as utf8(): a high surrogate takes its pair along.
      let w = 3;
      if (c < 0x800) w = 2;
      else if (c >= 0xd800 && c <= 0xdbff) {
        w = 4;
        i++;
      }
      for (const end = p + w; p < end; p++) syms[m++] = byteId[buf[p]!]!;
    }
    if (m === n) return false;
    bpe(this.vocab, syms, m, out);
    return true;
  }

  /**
   * UTF-8 of s[start, end) into this.buf; returns the byte length. s must be well-formed UTF-16.
   * Also sets sawSkew when it holds a skew code point.
   */
  private utf8(s: string, start: number, end: number): number {
    if (this.buf.length < (end - start) * 3) this.buf = new Uint8Array((end - start) * 3 + 64);
    const buf = this.buf;
    const skew = this.skew;
    // Branch-free skew lookup per non-ASCII code point (no skew code point is below U+0300).
    let hit = 0;
    let n = 0;
    for (let i = start; i < end; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) {
        buf[n++] = c;
      } else if (c < 0x800) {
        hit |= skew[c >>> 3]! & (1 << (c & 7));
        buf[n++] = 0xc0 | (c >> 6);
        buf[n++] = 0x80 | (c & 63);
      } else if (c >= 0xd800 && c <= 0xdbff) {
        const d = s.charCodeAt(++i);
        const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        if (d >= 0xdc00 && d <= 0xdfff) hit |= skew[cp >>> 3]! & (1 << (cp & 7));
        buf[n++] = 0xf0 | (cp >> 18);
        buf[n++] = 0x80 | ((cp >> 12) & 63);
        buf[n++] = 0x80 | ((cp >> 6) & 63);
        buf[n++] = 0x80 | (cp & 63);
      } else {
        hit |= skew[c >>> 3]! & (1 << (c & 7));
        buf[n++] = 0xe0 | (c >> 12);
        buf[n++] = 0x80 | ((c >> 6) & 63);
        buf[n++] = 0x80 | (c & 63);
      }
    }
    if (hit !== 0) this.sawSkew = true;
    return n;
  }

  cacheStats(): EngineCacheStats {
    return {
      segments: this.segments.stats(),
      pieces: {
        entries: this.youngEntries + this.oldEntries,
        maxEntries: 2 * this.pieceCacheEntries,
        bytes: this.youngBytes + this.oldBytes,
        maxBytes: this.pieceCacheBytes,
        partitions: new Set([...this.young.keys(), ...this.old.keys()]).size,
        memoPartitions: this.memoTags.size,
      },
    };
  }

  clearCaches(): void {
    this.segments.clear();
    this.young = new Map();
    this.old = new Map();
    this.youngEntries = this.oldEntries = 0;
    this.youngBytes = this.oldBytes = 0;
    this.youngPieces = this.oldPieces = undefined;
    this.partition = "";
    this.hotTagBits = 0;
    this.memoTags.clear();
    this.hot.fill(0);
  }
}
