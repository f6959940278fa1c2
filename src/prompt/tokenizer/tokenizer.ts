/**
 * One Qwen tokenizer per model family. Families share the BPE engine (vocabulary, piece and
 * segment caches) and differ only in their added-token list (docs/tokenizer.md, "Pipeline").
 */
import { IdBuffer } from "./id-buffer.ts";
import { InvalidRequestError } from "../../api/errors.ts";
import type { BpeEngine, EngineCacheStats } from "./engine.ts";
import { hasLoneSurrogate } from "../../util/unicode.ts";
import { lookupBytes, NO_TOKEN } from "./vocab.ts";

export type ModelFamily = "qwen2_vl" | "qwen2_5_vl" | "qwen3_vl";

export interface SpecialIds {
  imStart: number;
  imEnd: number;
  endOfText: number;
  visionStart: number;
  visionEnd: number;
  imagePad: number;
  videoPad: number;
}

export interface AddedToken {
  id: number;
  content: string;
  special: boolean;
}

export interface QwenTokenizer {
  readonly family: ModelFamily;
  /**
   * Token ids of text; added tokens written in the text are matched (HF add_special_tokens=false).
   * `partition`: whose entries of the segment and piece caches may serve it (src/edge/cache-salt.ts
   * edgeCachePartition; "" the common one, for text no client sent): a segment is a message's text,
   * so its hit must not cross tenants. Required, so that no caller falls into the common one.
   * `sourceChars`: the length of the string that text is (or was sliced from), when the caller
   * knows it is not itself a slice of something longer: the segment cache then keeps a segment that
   * is most of it instead of copying it. Unknown (the default): always copied.
   */
  encode(text: string, partition: string, sourceChars?: number): number[];
  /** Token ids of text with no added-token matching: `<|im_start|>` becomes ordinary tokens (common partition: no client text). */
  encodeOrdinary(text: string): number[];
  /** UTF-8 text of ids (invalid byte runs become U+FFFD, unknown ids are skipped, as HF does). */
  decode(ids: ArrayLike<number>): string;
  /** Id of an added token's content or of a vocabulary entry in its byte-level form (e.g. "Ġthe"). */
  tokenToId(token: string): number | undefined;
  readonly specialIds: SpecialIds;
  /** Regular vocabulary plus this family's added tokens (HF get_vocab_size(true)). */
  readonly vocabSize: number;
  readonly addedTokens: readonly AddedToken[];
  /** Shared across families: the caches belong to the BPE engine. */
  cacheStats(): EngineCacheStats;
}

/** Only lone surrogates match: a `u` regex treats a valid pair as one code point outside the class. */

function escapeRegex(s: string): string {
  return s.replace(/[\\^$.*+?()[\]{}|/-]/g, "\\$&");
}

let byteOfUnicode: Map<number, number> | null = null;

/** GPT-2 byte-level alphabet, code point → byte (for tokenToId on vocabulary strings). */
function gpt2ByteOfUnicode(): Map<number, number> {
  if (byteOfUnicode) return byteOfUnicode;
  const map = new Map<number, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map.set(printable ? b : 256 + extra++, b);
  }
  byteOfUnicode = map;
  return map;
}

export class QwenTokenizerImpl implements QwenTokenizer {
  readonly family: ModelFamily;
  readonly specialIds: SpecialIds;
  readonly vocabSize: number;
  readonly addedTokens: readonly AddedToken[];
  private readonly engine: BpeEngine;
  private readonly addedRe: RegExp;
  private readonly idOfAdded = new Map<string, number>();
  private readonly addedOfId = new Map<number, string>();
  private readonly decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  constructor(family: ModelFamily, engine: BpeEngine, added: readonly AddedToken[]) {
    this.family = family;
    this.engine = engine;
    this.addedTokens = added;
    let maxId = engine.vocab.size - 1;
    for (const t of added) {
      this.idOfAdded.set(t.content, t.id);
      this.addedOfId.set(t.id, t.content);
      maxId = Math.max(maxId, t.id);
    }
    this.vocabSize = maxId + 1;
    // HF matches added tokens leftmost-longest; an alternation sorted longest first does the same.
    const alternatives = added.map((t) => t.content).sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    this.addedRe = new RegExp(alternatives.map(escapeRegex).join("|"), "g");
    const need = (content: string): number => {
      const id = this.idOfAdded.get(content);
      if (id === undefined) throw new Error(`${family} tokenizer lacks the added token ${content}`);
      return id;
    };
    this.specialIds = {
      imStart: need("<|im_start|>"),
      imEnd: need("<|im_end|>"),
      endOfText: need("<|endoftext|>"),
      visionStart: need("<|vision_start|>"),
      visionEnd: need("<|vision_end|>"),
      imagePad: need("<|image_pad|>"),
      videoPad: need("<|video_pad|>"),
    };
  }

  private readonly idBuf = new IdBuffer();
  encode(text: string, partition: string, sourceChars = Number.POSITIVE_INFINITY): number[] {
    return this.encodeSplit(text, (segment, out) => this.engine.encodeSegment(segment, out, partition, sourceChars));
  }

  /**
   * encode's ids without reading or filling the segment cache (the piece caches of `partition`
   * only): the sampled exactness check's reference, which a wrong cached segment would not fool.
   */
  encodeWithoutSegmentCache(text: string, partition: string): number[] {
    return this.encodeSplit(text, (segment, out) => this.engine.encodeUncached(segment, out, partition));
  }

  /** Added tokens split off `text` (leftmost-longest), each segment between them given to `segmentIds`. */
  private encodeSplit(text: string, segmentIds: (segment: string, out: IdBuffer) => void): number[] {
    assertWellFormed(text);
    const out = this.idBuf;
    out.length = 0;
    const re = this.addedRe;
    re.lastIndex = 0;
    let end = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      if (m.index > end) segmentIds(text.slice(end, m.index), out);
      out.push(this.idOfAdded.get(m[0])!);
      end = re.lastIndex;
    }
    if (end < text.length) segmentIds(end === 0 ? text : text.slice(end), out);
    return out.toArray();
  }

  encodeOrdinary(text: string): number[] {
    assertWellFormed(text);
    const out = this.idBuf;
    out.length = 0;
    this.engine.encodeSegment(text, out, "");
    return out.toArray();
  }

  decode(ids: ArrayLike<number>): string {
    const v = this.engine.vocab;
    let bytes = new Uint8Array(256);
    let n = 0;
    const append = (src: Uint8Array, start: number, end: number): void => {
      const len = end - start;
      if (n + len > bytes.length) {
        const bigger = new Uint8Array(Math.max(bytes.length * 2, n + len));
        bigger.set(bytes.subarray(0, n));
        bytes = bigger;
      }
      bytes.set(src.subarray(start, end), n);
      n += len;
    };
    const encoder = new TextEncoder();
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (Number.isInteger(id) && id >= 0 && id < v.size) {
        append(v.bytes, v.offset[id]!, v.offset[id + 1]!);
        continue;
      }
      const content = this.addedOfId.get(id);
      if (content !== undefined) {
        const b = encoder.encode(content);
        append(b, 0, b.length);
      }
    }
    return this.decoder.decode(bytes.subarray(0, n));
  }

  tokenToId(token: string): number | undefined {
    const added = this.idOfAdded.get(token);
    if (added !== undefined) return added;
    const map = gpt2ByteOfUnicode();
    const bytes: number[] = [];
    for (const ch of token) {
      const b = map.get(ch.codePointAt(0)!);
      if (b === undefined) return undefined;
      bytes.push(b);
    }
    if (bytes.length === 0) return undefined;
    const id = lookupBytes(this.engine.vocab, Uint8Array.from(bytes), 0, bytes.length);
    return id === NO_TOKEN ? undefined : id;
  }

  cacheStats(): EngineCacheStats {
    return this.engine.cacheStats();
  }
}

/** The router refuses to hash lone surrogates: HF's Python tokenizer rejects them (docs/tokenizer.md, "API"). */
export function assertWellFormed(text: string): void {
  if (hasLoneSurrogate(text)) {
    throw new InvalidRequestError("Text contains a lone UTF-16 surrogate, which is not valid Unicode.", null, "invalid_unicode");
  }
}
