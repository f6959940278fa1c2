/**
 * The Unicode patch inside workerd, whose V8/ICU need not match the Node that generated it:
 * (a) outside `skew` the fast path's runtime `\p{L}`/`\p{N}` must agree with the reference's exact
 * classes for every code point, and (b) the generator's Rust-binding ids for strings packed with
 * skew code points are reproduced here.
 */
import { describe, expect, it } from "vitest";
import fixture from "../fixtures/unicode-skew-ids.json";
import { clearTokenizerCaches, getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { codePointSet, hasCodePoint } from "../../src/prompt/tokenizer/skew.ts";
import { L, N, skew } from "../../src/prompt/tokenizer/unicode-patch.ts";

const hex = (c: number): string => "U+" + c.toString(16).toUpperCase().padStart(4, "0");

/** Code points of s whose membership in the two classes differs. */
function classDiff(s: string, runtime: RegExp, exact: RegExp): number[] {
  const bad: number[] = [];
  for (const ch of s) if (runtime.test(ch) !== exact.test(ch)) bad.push(ch.codePointAt(0)!);
  return bad;
}

describe("workerd runtime vs the Unicode patch", () => {
  it("outside skew, runtime \\p{L} and \\p{N} equal the patch's exact L and N for every code point", () => {
    const skewSet = codePointSet(skew);
    const outside: number[] = [];
    for (let c = 0; c < 0x110000; c++) if ((c < 0xd800 || c > 0xdfff) && !hasCodePoint(skewSet, c)) outside.push(c);
    expect(outside.length).toBeGreaterThan(250_000);
    const classes: [string, RegExp, RegExp, RegExp, RegExp][] = [
      ["L", /[^\p{L}]+/gu, new RegExp(`[^${L}]+`, "gu"), /\p{L}/u, new RegExp(`[${L}]`, "u")],
      ["N", /[^\p{N}]+/gu, new RegExp(`[^${N}]+`, "gu"), /\p{N}/u, new RegExp(`[${N}]`, "u")],
    ];
    const bad: string[] = [];
    // Chunks: deleting the non-members leaves the members; equal leftovers mean equal membership.
    for (let i = 0; i < outside.length; i += 4096) {
      const s = String.fromCodePoint(...outside.slice(i, i + 4096));
      for (const [name, runtimeNot, exactNot, runtime, exact] of classes) {
        if (s.replace(runtimeNot, "") === s.replace(exactNot, "")) continue;
        for (const c of classDiff(s, runtime, exact)) bad.push(`${name} ${hex(c)}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it("skew-laden strings get the Rust binding's ids (fixture from scripts/gen-unicode-patch.mjs)", () => {
    const cases = (fixture as { cases: { text: string; ids: number[] }[] }).cases;
    expect(cases.length).toBeGreaterThan(200);
    clearTokenizerCaches();
    const tok = getQwenTokenizer("qwen3_vl");
    const bad = cases.filter((c) => JSON.stringify(tok.encode(c.text, "")) !== JSON.stringify(c.ids)).map((c) => JSON.stringify(c.text).slice(0, 60));
    expect(bad).toEqual([]);
  });
});
