/**
 * Which non-ASCII BMP characters may enter BPE as their whole token instead of as UTF-8 bytes,
 * when both neighbours in the piece are non-ASCII (or the piece ends there). In CJK text nearly
 * every character is one token, so a piece of k characters then starts at ~k symbols instead of
 * 3k bytes and skips ~2k merges, each of which costs a rescan.
 *
 * Why the result is unchanged. Let c be such a character, T its token, r = id(T) = T's merge rank.
 * (1) c's bytes BPE to T alone (the unit test that every token BPE-encodes to itself), and every
 * merge on that path has rank <= r, because merge operands precede the merged id (the asset build
 * and a unit test check it). So until c is whole, one of its internal pairs of rank <= r is open.
 * (2) Every merge that would join a proper prefix of c (a lead-byte fragment) to a left neighbour
 * ending in a continuation byte, or a proper suffix of c (continuation bytes) to a right neighbour
 * starting with a lead byte, has rank > r (checked here). So no merge crosses c's edge before c
 * is whole. (3) Every merge with T as an operand has rank > r (operands precede), so merging T
 * early cannot overtake any merge the byte-level run makes while c is still in pieces.
 * Hence the byte-level run is the pre-merged run with c's internal merges interleaved, and both end
 * in the same tokens (leftmost-lowest-rank ties fall the same way: order is kept).
 */
import { lookupBytes, NO_TOKEN, type Vocab } from "./vocab.ts";

/** Table entry of a code unit not looked at yet. */
export const UNRESOLVED = -2;

export class CharTokens {
  /**
   * Code unit → token id, NO_TOKEN where the character must enter as bytes (ASCII, surrogates,
   * characters with no single token, and those a neighbouring merge could split: condition (2)),
   * or UNRESOLVED until resolve() has seen it. Filled on demand: a text only pays for its own
   * characters, and no isolate pays a whole-vocabulary pass.
   */
  readonly table = new Int32Array(0x10000).fill(UNRESOLVED);
  private readonly vocab: Vocab;
  /** Lowest rank of a merge taking this lead-byte fragment as right operand after a continuation byte. */
  private readonly leftThreat = new Map<number, number>();
  /** Lowest rank of a merge taking this continuation-byte fragment as left operand before a lead byte. */
  private readonly rightThreat = new Map<number, number>();
  private readonly bytes = new Uint8Array(3);

  constructor(vocab: Vocab) {
    this.vocab = vocab;
    // Ascending ids, so the first rank seen per fragment is its lowest.
    for (const m of vocab.fragmentMerges) {
      const left = vocab.leftId[m]!;
      const right = vocab.rightId[m]!;
      if (!this.leftThreat.has(right)) this.leftThreat.set(right, m);
      if (!this.rightThreat.has(left)) this.rightThreat.set(left, m);
    }
  }

  /** The table entry of code unit c (>= 0x80), computed and stored on first use. */
  resolve(c: number): number {
    const known = this.table[c]!;
    if (known !== UNRESOLVED) return known;
    return (this.table[c] = this.compute(c));
  }

  private compute(c: number): number {
    if (c < 0x80 || (c >= 0xd800 && c <= 0xdfff)) return NO_TOKEN;
    const b = this.bytes;
    let len = 3;
    if (c < 0x800) {
      len = 2;
      b[0] = 0xc0 | (c >> 6);
      b[1] = 0x80 | (c & 63);
    } else {
      b[0] = 0xe0 | (c >> 12);
      b[1] = 0x80 | ((c >> 6) & 63);
      b[2] = 0x80 | (c & 63);
    }
    const v = this.vocab;
    const id = lookupBytes(v, b, 0, len);
    if (id === NO_TOKEN) return NO_TOKEN;
    for (let k = 1; k < len; k++) {
      const prefix = lookupBytes(v, b, 0, k);
      if (prefix !== NO_TOKEN && (this.leftThreat.get(prefix) ?? Infinity) <= id) return NO_TOKEN;
      const suffix = lookupBytes(v, b, k, len);
      if (suffix !== NO_TOKEN && (this.rightThreat.get(suffix) ?? Infinity) <= id) return NO_TOKEN;
    }
    return id;
  }
}
