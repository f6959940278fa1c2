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
 * (2) No merge of rank <= r joins a proper prefix of c (a lead-byte fragment) to a symbol that can
 * end where c starts, or a proper suffix of c (continuation bytes) to a symbol that can start where
 * c ends (checked here, against the actual neighbours where such a merge exists at all). So no
 * merge crosses c's edge before c is whole. (3) Every merge with T as an operand has rank > r
 * (operands precede), so merging T early cannot overtake any merge the byte-level run makes while
 * c is still in pieces. Hence the byte-level run is the pre-merged run with c's internal merges
 * interleaved, and both end in the same tokens (leftmost-lowest-rank ties fall the same way).
 *
 * A symbol ending where c starts is a suffix of the left neighbour's bytes (continuation bytes
 * only) or ends with the whole left neighbour; likewise on the right with prefixes. So each such
 * merge becomes a test on the neighbour's code point (Hazard).
 */
import { isContinuation as isCont, lookupBytes, NO_TOKEN, type Vocab } from "./vocab.ts";

/** Table entry of a code unit not looked at yet. */
export const UNRESOLVED = -2;
/** Table entry of a character that enters whole unless a neighbour matches one of its hazards. */
export const CONDITIONAL = -3;

/**
 * A merge that could split a character, as a test on the neighbour's code point on one side:
 * it matches when min <= cp <= max and (cp & mask) === value.
 */
interface Hazard {
  rank: number;
  /** The neighbour it concerns: after the character (true) or before it. */
  after: boolean;
  min: number;
  max: number;
  mask: number;
  value: number;
}

const ANY_NEIGHBOUR = { min: 0, max: 0x10ffff, mask: 0, value: 0 };

function utf8Length(lead: number): number {
  return lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
}

/** Code point of UTF-8 bytes b[start, end), one whole or leading part of a character, padded with `pad`. */
function decodePadded(b: Uint8Array, start: number, end: number, pad: number): number {
  const len = utf8Length(b[start]!);
  let cp = b[start]! & (0x7f >> len);
  for (let i = 1; i < len; i++) cp = (cp << 6) | ((start + i < end ? b[start + i]! : pad) & 0x3f);
  return cp;
}

export class CharTokens {
  /**
   * Code unit → token id, CONDITIONAL (see inContext), NO_TOKEN where the character must enter as
   * bytes (ASCII, surrogates, characters with no single token), or UNRESOLVED until resolve() has
   * seen it. Filled on demand: a text only pays for its own characters.
   */
  readonly table = new Int32Array(0x10000).fill(UNRESOLVED);
  private readonly vocab: Vocab;
  /** Merges taking this lead-byte fragment as right operand after a continuation byte. */
  private readonly hazardsOfPrefix = new Map<number, Hazard[]>();
  /** Merges taking this continuation-byte fragment as left operand before a lead byte. */
  private readonly hazardsOfSuffix = new Map<number, Hazard[]>();
  private readonly conditional = new Map<number, { id: number; hazards: Hazard[] }>();
  private readonly bytes = new Uint8Array(3);

  constructor(vocab: Vocab) {
    this.vocab = vocab;
    const { bytes, offset, leftId, rightId } = vocab;
    const add = (map: Map<number, Hazard[]>, key: number, h: Hazard): void => {
      const list = map.get(key);
      if (list) list.push(h);
      else map.set(key, [h]);
    };
    for (const m of vocab.fragmentMerges) {
      const x = leftId[m]!;
      const y = rightId[m]!;
      const xs = offset[x]!;
      const xe = offset[x + 1]!;
      const ys = offset[y]!;
      const ye = offset[y + 1]!;
      if (bytes[ys]! >= 0xc0 && ye - ys < utf8Length(bytes[ys]!) && isCont(bytes[xe - 1]!)) {
        // y is a lead-byte fragment; x must end where a character holding it starts.
        let lead = xe - 1;
        while (lead >= xs && isCont(bytes[lead]!)) lead--;
        const k = xe - 1 - lead;
        let test = ANY_NEIGHBOUR; // a shape valid UTF-8 cannot put there: kept, as "always"
        if (lead < xs && k <= 3) {
          let value = 0;
          for (let i = xs; i < xe; i++) value = (value << 6) | (bytes[i]! & 0x3f);
          test = { min: [0, 0x80, 0x800, 0x10000][k]!, max: 0x10ffff, mask: (1 << (6 * k)) - 1, value };
        } else if (lead >= xs && bytes[lead]! >= 0xc0 && xe - lead === utf8Length(bytes[lead]!)) {
          const cp = decodePadded(bytes, lead, xe, 0);
          test = { min: cp, max: cp, mask: 0, value: 0 };
        }
        add(this.hazardsOfPrefix, y, { rank: m, after: false, ...test });
      }
      let allCont = true;
      for (let i = xs; i < xe; i++) if (!isCont(bytes[i]!)) allCont = false;
      if (allCont && bytes[ys]! >= 0xc0) {
        // x is a continuation fragment; y must start where a character holding it ends: the
        // characters whose UTF-8 starts with y's first character, or with all of y if shorter.
        const min = decodePadded(bytes, ys, ye, 0x80);
        const max = decodePadded(bytes, ys, ye, 0xbf);
        add(this.hazardsOfSuffix, x, { rank: m, after: true, min, max, mask: 0, value: 0 });
      }
    }
  }

  /** The table entry of code unit c (>= 0x80), computed and stored on first use. */
  resolve(c: number): number {
    const known = this.table[c]!;
    if (known !== UNRESOLVED) return known;
    return (this.table[c] = this.compute(c));
  }

  /**
   * Token id of the CONDITIONAL character at piece[i], or NO_TOKEN when a neighbour matches one
   * of its hazards (a piece edge has no neighbour, so nothing to match there).
   */
  inContext(piece: string, i: number): number {
    const entry = this.conditional.get(piece.charCodeAt(i))!;
    const before = i > 0 ? piece.codePointAt(i > 1 && isLowSurrogate(piece.charCodeAt(i - 1)) ? i - 2 : i - 1)! : -1;
    const after = i + 1 < piece.length ? piece.codePointAt(i + 1)! : -1;
    for (const h of entry.hazards) {
      const cp = h.after ? after : before;
      if (cp >= h.min && cp <= h.max && (cp & h.mask) === h.value) return NO_TOKEN;
    }
    return entry.id;
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
    const hazards: Hazard[] = [];
    const collect = (list: Hazard[] | undefined): void => {
      for (const h of list ?? []) if (h.rank <= id) hazards.push(h);
    };
    for (let k = 1; k < len; k++) {
      const prefix = lookupBytes(v, b, 0, k);
      if (prefix !== NO_TOKEN) collect(this.hazardsOfPrefix.get(prefix));
      const suffix = lookupBytes(v, b, k, len);
      if (suffix !== NO_TOKEN) collect(this.hazardsOfSuffix.get(suffix));
    }
    if (hazards.length === 0) return id;
    this.conditional.set(c, { id, hazards });
    return CONDITIONAL;
  }
}

function isLowSurrogate(u: number): boolean {
  return u >= 0xdc00 && u <= 0xdfff;
}
