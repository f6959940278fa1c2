/**
 * Seeded text generator for the tokenizer differential tests and benchmark: mixed scripts,
 * whitespace oddities, contractions, combining marks, emoji, code, and added tokens inline.
 */
import { rng } from "../../../bench/lib/stats.mjs";

/** The bench's seeded PRNG (mulberry32), one implementation for tests and benchmarks. */
export const mulberry32: (seed: number) => () => number = rng;

const chars = (s: string): string[] => [...s];

const ADDED = [
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
  "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
  "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
  "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
  "<think>", "</think>",
];

/** Pools of fragments; each fuzz string concatenates fragments drawn from a few pools. */
export const POOLS: Record<string, string[]> = {
  ascii: chars("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
  words: ["the", " the", " quick", " brown", " fox", "Hello", " world", " jumps", " over", " lazy", " dog", "tokenizer", " API", "JSON", " résumé", " naïve", "Ångström", " don", "I"],
  digits: chars("0123456789"),
  numbers: ["3.14159", "1,000,000", "2026-11-30", "0x1F", "1e-7", "42", "٣٤٥", "１２３", "Ⅻ", "½"],
  punct: chars("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~…—–«»“”‘’¿¡·•"),
  contractions: ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'ſ", "ſ", "'x", "''", "'"],
  spaces: [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u000b", "\f"],
  oddspaces: ["\u0085", "\u00a0", "\u1680", "\u2000", "\u2003", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\u180e", "\u200b", "\u200d", "\u0000", "\u0001", "\u001f", "\u007f"],
  cjk: chars("中文分词测试包含标点。的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"),
  kana: chars("カタカナとひらがなアイウエオｱｲｳｴｵ"),
  hangul: ["안녕하세요", "한국어", "\u1100\u1161", "\u1112\u1161\u11ab", "ᄀ", "ᅡ"],
  arabic: chars("مرحبا بالعالم العربية") ,
  devanagari: ["नमस्ते", "हिन्दी", "क्षत्रिय", "\u0915\u093c"],
  thai: chars("สวัสดีครับภาษาไทย"),
  cyrillic: chars("Привет мир ЁёЖж"),
  greek: chars("ΑλφαβητοΩωΣσς"),
  combining: ["e\u0301", "a\u0308", "\u0301", "\u0300\u0301", "o\u0302\u0323", "\u212b", "\u212a", "\u2126", "\u00c5", "A\u030a", "\u1e9b\u0323", "\u0344", "\u0958", "\ufb01", "\u0340"],
  emoji: ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇺🇸", "1️⃣", "#️⃣", "❤️", "🏳️‍🌈", "🤖", "🙂"],
  astral: ["𝐀𝐁𝐂", "𝟘𝟙", "𠀀𠀁", "𐍈", "𓀀", "🀄", "\u{1f600}\u{1f3fb}"],
  code: ["def f(x):\n    return x ** 2\n", "for (let i = 0; i < n; i++) {}\n", "{\"a\": [1, 2.5, null]}", "SELECT * FROM t WHERE id = 1;", "\\frac{a}{b}", "https://example.com/a?b=c&d=e#f", "    ", "\t\tif (x) {\n\t\t\ty();\n\t\t}", "a_b-c.d/e"],
  added: ADDED,
  nearAdded: ["<|im_", "<|im_start", "im_end|>", "<think", "</tool", "<|", "|>", "<>", "<<|im_start|>>", "<|IM_START|>", "< think>"],
};

const POOL_NAMES = Object.keys(POOLS);

export function fuzzString(rand: () => number, maxFragments: number): string {
  const pools = [0, 1, 2].map(() => POOLS[POOL_NAMES[Math.floor(rand() * POOL_NAMES.length)]!]!);
  const count = 1 + Math.floor(rand() * maxFragments);
  let s = "";
  for (let i = 0; i < count; i++) {
    const pool = rand() < 0.25 ? POOLS[POOL_NAMES[Math.floor(rand() * POOL_NAMES.length)]!]! : pools[Math.floor(rand() * pools.length)]!;
    const frag = pool[Math.floor(rand() * pool.length)]!;
    s += rand() < 0.1 ? frag.repeat(1 + Math.floor(rand() * 8)) : frag;
  }
  return s;
}

export function fuzzCorpus(seed: number, count: number, maxFragments = 40): string[] {
  const rand = mulberry32(seed);
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(fuzzString(rand, maxFragments));
  return out;
}

/** Long, realistic-ish texts: prose, code and CJK blocks, a chat transcript with added tokens. */
export function longTexts(seed: number): string[] {
  const rand = mulberry32(seed);
  const prose = (n: number): string => {
    const words = ["the", "of", "and", "router", "cache", "token", "request", "model", "worker", "Durable", "Object", "is", "not", "we're", "it's", "latency", "prefix", "block", "hash", "edge", "1024", "3.5", "GPU"];
    let s = "";
    for (let i = 0; i < n; i++) {
      s += (i % 17 === 0 ? "\n\n" : " ") + words[Math.floor(rand() * words.length)]!;
      if (rand() < 0.08) s += rand() < 0.5 ? "," : ".";
    }
    return s;
  };
  const code = (n: number): string => {
    let s = "";
    for (let i = 0; i < n; i++) s += `function f${i}(a, b) {\n  const x_${i} = a * ${i} + b; // note ${i}\n  return x_${i} ?? null;\n}\n\n`;
    return s;
  };
  const cjk = (n: number): string => {
    const p = POOLS.cjk!;
    let s = "";
    for (let i = 0; i < n; i++) s += p[Math.floor(rand() * p.length)]! + (i % 30 === 29 ? "。\n" : "");
    return s;
  };
  const chat = (turns: number): string => {
    let s = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
    for (let i = 0; i < turns; i++) {
      s += `<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>${prose(60)}<|im_end|>\n`;
      s += `<|im_start|>assistant\n<think>\n${prose(40)}\n</think>\n\n${prose(80)}<|im_end|>\n`;
    }
    return s + "<|im_start|>assistant\n";
  };
  const mixed = Array.from({ length: 200 }, () => fuzzString(rand, 60)).join("");
  return [prose(20000), code(400), cjk(15000), chat(40), mixed, "a".repeat(3000), "ab".repeat(2000) + " " + "🤖".repeat(500), btoaLike(rand, 20000)];
}

function btoaLike(rand: () => number, n: number): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  let s = "";
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(rand() * 64)];
  return s + "==";
}
