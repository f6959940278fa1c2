// Whole-character BPE symbols (src/prompt/tokenizer/char-tokens.ts) against the Rust binding: every
// merge that joins two non-ASCII characters, in context, and seeded runs of mixed characters.
import { beforeAll, describe, expect, it } from "vitest";
import { VOCAB_B64 } from "../../../src/generated/tokenizer/qwen-vocab.js";
import { CharTokens, CONDITIONAL } from "../../../src/prompt/tokenizer/char-tokens.ts";
import { clearTokenizerCaches, getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { decodeVocab, lookupBytes, NO_TOKEN } from "../../../src/prompt/tokenizer/vocab.ts";
import { mulberry32 } from "../support/tokenizer-fuzz.ts";
import { loadRustTokenizer, type RustTokenizer } from "./rust-tokenizer.ts";

let rust: RustTokenizer;
beforeAll(() => {
  rust = loadRustTokenizer();
});

async function mismatches(texts: string[]): Promise<string[]> {
  clearTokenizerCaches();
  const tok = getQwenTokenizer("qwen3_vl");
  const bad: string[] = [];
  for (let i = 0; i < texts.length; i += 1024) {
    const batch = texts.slice(i, i + 1024);
    const encs = await rust.encodeBatch(batch, { addSpecialTokens: false });
    batch.forEach((t, j) => {
      if (JSON.stringify(tok.encodeOrdinary(t)) !== JSON.stringify(encs[j]!.getIds())) bad.push(t);
    });
  }
  return bad;
}

const v = decodeVocab(VOCAB_B64);
const chars = new CharTokens(v);
const table = Int32Array.from({ length: 0x10000 }, (_, c) => (c < 0x80 ? NO_TOKEN : chars.resolve(c)));
const enc = new TextEncoder();
const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

/** Characters (BMP, plus the emoji and CJK extension planes) by their leading and trailing UTF-8 fragments. */
function fragmentIndex(): { byPrefix: Map<string, string[]>; bySuffix: Map<string, string[]> } {
  const byPrefix = new Map<string, string[]>();
  const bySuffix = new Map<string, string[]>();
  const add = (map: Map<string, string[]>, key: string, ch: string): void => {
    const list = map.get(key);
    if (list) list.push(ch);
    else map.set(key, [ch]);
  };
  const ranges = [[0x80, 0xd7ff], [0xe000, 0xffff], [0x1f000, 0x1faff], [0x20000, 0x2ffff]] as const;
  for (const [lo, hi] of ranges) {
    for (let c = lo; c <= hi; c++) {
      const ch = String.fromCodePoint(c);
      const b = enc.encode(ch);
      for (let k = 1; k < b.length; k++) {
        add(byPrefix, hex(b.subarray(0, k)), ch);
        add(bySuffix, hex(b.subarray(k)), ch);
      }
    }
  }
  return { byPrefix, bySuffix };
}

const isCont = (b: number): boolean => b >= 0x80 && b < 0xc0;
const listed = [...table.keys()].filter((c) => table[c] !== NO_TOKEN).map((c) => String.fromCharCode(c));
const isListed = new Set(listed);

describe("whole-character BPE symbols", () => {
  it("cover every single-token BMP character, most of them unconditionally", () => {
    const unconditional = listed.filter((ch) => table[ch.charCodeAt(0)]! >= 0).length;
    expect(unconditional).toBeGreaterThan(5000);
    expect(listed.length - unconditional).toBeGreaterThan(1000);
    expect(table["中".charCodeAt(0)]).toBe(lookupBytes(v, enc.encode("中"), 0, 3));
    expect(table["a".charCodeAt(0)]).toBe(NO_TOKEN);
    // 你 (e4 bd a0) before 除: the merge (a0, 除) outranks 你 itself, so 你 enters as bytes there only.
    expect(table["你".charCodeAt(0)]).toBe(CONDITIONAL);
    expect(chars.inContext("你除", 0)).toBe(NO_TOKEN);
    expect(chars.inContext("你好", 0)).toBe(lookupBytes(v, enc.encode("你"), 0, 3));
    expect(chars.inContext("你", 0)).toBe(lookupBytes(v, enc.encode("你"), 0, 3));
  });

  it("leave every merge across two non-ASCII characters as the reference has it", async () => {
    const rand = mulberry32(11);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
    const { byPrefix, bySuffix } = fragmentIndex();
    const around = (): string => Array.from({ length: Math.floor(rand() * 3) }, () => pick(listed)).join("");
    // Completes a fragment cut from a token: a character ending in its leading continuation bytes
    // and one starting with its unfinished last character (listed characters preferred).
    const complete = (b: Uint8Array): string | null => {
      let start = 0;
      while (start < b.length && isCont(b[start]!)) start++;
      let end = b.length;
      let last = b.length - 1;
      while (last > start && isCont(b[last]!)) last--;
      if (last >= start && b[last]! >= 0xc0) {
        const need = b[last]! >= 0xf0 ? 4 : b[last]! >= 0xe0 ? 3 : 2;
        if (b.length - last < need) end = last;
      }
      const head = start > 0 ? bySuffix.get(hex(b.subarray(0, start))) : [""];
      const tail = end < b.length ? byPrefix.get(hex(b.subarray(end))) : [""];
      if (!head || !tail) return null;
      const prefer = (list: string[]): string => (rand() < 0.5 ? pick(list.filter((ch) => isListed.has(ch)).concat(list)) : pick(list));
      return prefer(head) + new TextDecoder().decode(b.subarray(start, end)) + prefer(tail);
    };
    const texts: string[] = [];
    for (let m = 0; m < v.size; m++) {
      const x = v.leftId[m]!;
      if (x === NO_TOKEN) continue;
      const y = v.rightId[m]!;
      if (!isCont(v.bytes[v.offset[x + 1]! - 1]!) || v.bytes[v.offset[y]!]! < 0xc0) continue;
      const text = complete(v.bytes.subarray(v.offset[m]!, v.offset[m + 1]!));
      if (text !== null) texts.push(around() + text + around());
    }
    expect(texts.length).toBeGreaterThan(1000);
    expect(await mismatches(texts)).toEqual([]);
  });

  it("agree with the reference on seeded runs of mixed characters", async () => {
    const rand = mulberry32(12);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
    const others: string[] = [];
    for (let c = 0x80; c < 0x10000; c++) if ((c < 0xd800 || c > 0xdfff) && table[c] === NO_TOKEN) others.push(String.fromCharCode(c));
    const ascii = [..."ab Z9 .,'\n\t-"];
    const astral = ["😀", "👍🏽", "𠀀", "𝐀", "🤖"];
    const texts = Array.from({ length: 3000 }, () => {
      let s = "";
      const len = 1 + Math.floor(rand() * 60);
      for (let i = 0; i < len; i++) {
        const r = rand();
        s += r < 0.6 ? pick(listed) : r < 0.85 ? pick(others) : r < 0.93 ? pick(ascii) : r < 0.96 ? pick(astral) : "，";
      }
      return s;
    });
    expect(await mismatches(texts)).toEqual([]);
  });
});
