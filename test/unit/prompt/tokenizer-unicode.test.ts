/**
 * Unicode skew (docs/tokenizer.md, "Unicode patch"): our ids equal the Rust binding's on every code point
 * the patch is about, in the generator's contexts, plus a seeded sweep over all planes; the committed patch
 * is what scripts/gen-unicode-patch.mjs produces under this Node; the slow path's splitting equals
 * the plain regex over the exact classes.
 */
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it, vi } from "vitest";
// @ts-expect-error -- plain .mjs dev script without type declarations
import * as gen from "../../../scripts/gen-unicode-patch.mjs";
import { clearTokenizerCaches, getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { BpeEngine } from "../../../src/prompt/tokenizer/engine.ts";
import { qwenPieceRegex } from "../../../src/prompt/tokenizer/pretokenize.ts";
import { PieceScanner } from "../../../src/prompt/tokenizer/piece-scanner.ts";
import { codePointSet, hasCodePoint, hasSkew, referenceNfc } from "../../../src/prompt/tokenizer/skew.ts";
import { L, N, nfcBarrier, skew } from "../../../src/prompt/tokenizer/unicode-patch.ts";
import { fuzzCorpus, longTexts, mulberry32 } from "../support/tokenizer-fuzz.ts";
import { loadRustTokenizer, type RustTokenizer } from "./rust-tokenizer.ts";

type Ctx = (c: string) => string;
const generator = gen as {
  generate(o: { verifySplit: boolean }): Promise<{ moduleText: string; fixtureText: string }>;
  PATCH_PATH: string;
  FIXTURE_PATH: string;
  NFC_CONTEXTS: Ctx[];
  SPLIT_CONTEXTS: Ctx[];
};
/** The sweep context, then the generator's NFC and split contexts (the latter with `c's`). */
const SWEEP: Ctx = (c) => `a${c}b ${c}1${c}${c} \u0301${c}\n`;
const CONTEXTS: Ctx[] = [SWEEP, ...generator.NFC_CONTEXTS, ...generator.SPLIT_CONTEXTS];

/** The 68 code points that differed from the reference under Node 22.23.5 before the patch (sweep context). */
const OLD_MISMATCHES = [
  0x7fd, 0x899, 0x89a, 0x89b, 0x8cf, 0x8d0, 0x8d1, 0x8d2, 0x8d3, 0xc3c, 0xd3b, 0xd3c, 0xeba, 0x1715, 0x1abf, 0x1ac0,
  0x1ac3, 0x1ac4, 0x1aca, 0x1add, 0x1ae6, 0x1df7, 0x1df8, 0x1df9, 0x1dfa, 0xa82c, 0x10efa, 0x10efb, 0x10efd, 0x10efe,
  0x10eff, 0x10f46, 0x10f47, 0x10f4b, 0x10f4d, 0x10f4e, 0x10f4f, 0x10f50, 0x10f83, 0x10f85, 0x11070, 0x1133b, 0x113c2,
  0x113ce, 0x113cf, 0x113d0, 0x11839, 0x1183a, 0x1193d, 0x1193e, 0x11943, 0x119e0, 0x11a34, 0x11a47, 0x11a99, 0x11d42,
  0x11d44, 0x11d45, 0x11d97, 0x11f41, 0x11f42, 0x1611e, 0x1612f, 0x16d67, 0x16ff0, 0x16ff1, 0x1e4ee, 0x1e5ef,
];

let rust: RustTokenizer;
beforeAll(() => {
  rust = loadRustTokenizer();
});

const hex = (c: number): string => "U+" + c.toString(16).toUpperCase().padStart(4, "0");
const isScalar = (c: number): boolean => c < 0xd800 || c > 0xdfff;

/** Texts whose ids differ from the Rust binding's (cold caches), as short labels. */
async function mismatches(texts: string[], labels: string[]): Promise<string[]> {
  clearTokenizerCaches();
  const tok = getQwenTokenizer("qwen3_vl");
  const bad: string[] = [];
  for (let i = 0; i < texts.length; i += 2048) {
    const encs = await rust.encodeBatch(texts.slice(i, i + 2048), { addSpecialTokens: false });
    encs.forEach((e, j) => {
      const want = e.getIds();
      const got = tok.encode(texts[i + j]!, "");
      if (got.length !== want.length || got.some((id, k) => id !== want[k])) bad.push(labels[i + j]!);
    });
  }
  return bad;
}

async function contextMismatches(codePoints: number[]): Promise<string[]> {
  const texts: string[] = [];
  const labels: string[] = [];
  for (const c of codePoints) {
    CONTEXTS.forEach((ctx, k) => {
      texts.push(ctx(String.fromCodePoint(c)));
      labels.push(`${hex(c)} ctx${k}`);
    });
  }
  return mismatches(texts, labels);
}

function sample(list: number[], n: number, seed: number): number[] {
  const random = mulberry32(seed);
  const a = [...list];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, n);
}

const skewSet = codePointSet(skew);
const barrierSet = codePointSet(nfcBarrier);
const UNASSIGNED = /\p{Cn}/u;
const assignedSkew: number[] = [];
const unassignedSkew: number[] = [];
for (let c = 0; c < 0x110000; c++) {
  if (!isScalar(c) || !(hasCodePoint(skewSet, c) || hasCodePoint(barrierSet, c))) continue;
  (UNASSIGNED.test(String.fromCodePoint(c)) ? unassignedSkew : assignedSkew).push(c);
}

describe("Unicode skew: ids equal the Rust binding's", () => {
  it("the 68 code points that used to differ, in the sweep, NFC and split contexts", async () => {
    expect(OLD_MISMATCHES).toHaveLength(68);
    expect(await contextMismatches(OLD_MISMATCHES)).toEqual([]);
  });

  it("every assigned code point in skew/nfcBarrier, in every context", async () => {
    expect(assignedSkew.length).toBeGreaterThan(4000);
    expect(await contextMismatches(assignedSkew)).toEqual([]);
  });

  it("a seeded sample of 3,000 unassigned skew code points, in every context", async () => {
    expect(unassignedSkew.length).toBeGreaterThan(500_000);
    expect(await contextMismatches(sample(unassignedSkew, 3000, 0x5ca1e))).toEqual([]);
  });

  it("seeded sweep: 20,000 code points across all planes, in the sweep context", async () => {
    const random = mulberry32(0x2026);
    const cps: number[] = [];
    while (cps.length < 20_000) {
      const c = Math.floor(random() * 0x110000);
      if (isScalar(c)) cps.push(c);
    }
    expect(await mismatches(cps.map((c) => SWEEP(String.fromCodePoint(c))), cps.map(hex))).toEqual([]);
  });

  it("long texts with a skew code point first, in the middle or last (fast path abandoned midway)", async () => {
    const base = longTexts(5).slice(0, 4);
    const texts: string[] = [];
    for (const t of base) for (const c of ["\u1ac0", "\u0378", "\u{323b0}", "\u{113c2}\u{113c2}"]) texts.push(c + t, t.slice(0, t.length >> 1) + c + t.slice(t.length >> 1), t + c);
    expect(await mismatches(texts, texts.map((t, i) => `text ${i} (${t.length} chars)`))).toEqual([]);
  });
});

describe("Unicode skew: fast/slow split", () => {
  it("ordinary text never takes the slow path; skewed text always does", () => {
    const spy = vi.spyOn(BpeEngine.prototype, "encodeSkewed");
    try {
      clearTokenizerCaches();
      const tok = getQwenTokenizer("qwen3_vl");
      const ordinary = ["plain ASCII", "café naïve résumé", "中文分词测试", "😀👍🏽👨‍👩‍👧", "مرحبا", "नमस्ते", "Tiê\u0301ng Vie\u0323t", "\u1100\u1161\u11a8", "𝐀𝐁𝐂 ℌ ½ Ⅻ"];
      for (const t of ordinary) tok.encode(t, "");
      expect(spy).not.toHaveBeenCalled();
      const skewed = ["x\u1ac0y", "new letter \u{323b0}", "unassigned \u0378", "decomposed e\u0301 and \u1ac0"];
      for (const t of skewed) tok.encode(t, "");
      expect(spy).toHaveBeenCalledTimes(skewed.length);
    } finally {
      spy.mockRestore();
    }
  });

  it("no skew code point is below U+0300 (the engine skips the check there)", () => {
    for (let c = 0; c < 0x300; c++) expect(hasCodePoint(skewSet, c), hex(c)).toBe(false);
    expect(hasSkew("\u0378")).toBe(true);
    expect(hasSkew("\ud800 lone")).toBe(false);
  });

  it("unassigned code points (here) are skew and barriers, so a newer runtime cannot change the fast path", () => {
    for (const c of sample(unassignedSkew, 2000, 7)) {
      expect(hasCodePoint(skewSet, c), hex(c)).toBe(true);
      expect(hasCodePoint(barrierSet, c), hex(c)).toBe(true);
    }
  });

  it("the piece scanner equals the regex over the exact L/N classes (skew code points mixed in)", () => {
    const exactRe = qwenPieceRegex(L, N);
    const pieces = (t: string): string[] => {
      const out: string[] = [];
      exactRe.lastIndex = 0;
      let end = 0;
      for (let m = exactRe.exec(t); m !== null; m = exactRe.exec(t)) {
        if (m.index > end) out.push(t.slice(end, m.index));
        out.push(m[0]);
        end = exactRe.lastIndex;
      }
      if (end < t.length) out.push(t.slice(end));
      return out;
    };
    const random = mulberry32(99);
    const pool = [...assignedSkew.slice(0, 400), ...sample(unassignedSkew, 100, 3)].map((c) => String.fromCodePoint(c));
    const texts = fuzzCorpus(17, 1500).map((t) => {
      let s = "";
      for (const ch of t) s += random() < 0.05 ? pool[Math.floor(random() * pool.length)] + ch : ch;
      return s;
    });
    const scanner = new PieceScanner();
    const scanned = (t: string): string[] => {
      const out: string[] = [];
      for (let i = 0; i < t.length; ) {
        const end = scanner.pieceEnd(t, i);
        out.push(t.slice(i, end));
        i = end;
      }
      return out;
    };
    const bad = texts.filter((t) => JSON.stringify(scanned(t)) !== JSON.stringify(pieces(t)));
    expect(bad.map((t) => JSON.stringify(t).slice(0, 80))).toEqual([]);
  });

  it("referenceNfc copies barriers verbatim and normalizes the runs between them", () => {
    expect(referenceNfc("e\u0301\u1ac0e\u0301")).toBe("\u00e9\u1ac0\u00e9");
    expect(referenceNfc("a\u0301\u1ac0\u0301")).toBe("\u00e1\u1ac0\u0301");
    expect(referenceNfc("plain")).toBe("plain");
  });
});

describe("the committed patch is current", () => {
  it("scripts/gen-unicode-patch.mjs reproduces unicode-patch.ts and the workerd fixture under this Node", async () => {
    const { moduleText, fixtureText } = await generator.generate({ verifySplit: false });
    expect(moduleText === readFileSync(generator.PATCH_PATH, "utf8"), "unicode-patch.ts is stale: npx node scripts/gen-unicode-patch.mjs").toBe(true);
    expect(fixtureText === readFileSync(generator.FIXTURE_PATH, "utf8"), "unicode-skew-ids.json is stale: npx node scripts/gen-unicode-patch.mjs").toBe(true);
  }, 120_000);
});
