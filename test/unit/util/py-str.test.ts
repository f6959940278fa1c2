// Python whitespace and strips against CPython's own answers (scripts/golden/gen_py_whitespace.py →
// test/fixtures/py-whitespace.json), and the parsers that strip a model's output with them.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { isPyWhitespace, pyRstrip, pyStrip } from "../../../src/util/py-str.ts";
import { pyStrip as jinjaStrip } from "../../../src/prompt/jinja-compat.ts";
import { splitReasoning } from "../../../src/proxy/reasoning.ts";
import { parseQwenToolCalls } from "../../../src/proxy/tool-calls/qwen25.ts";

const golden = JSON.parse(readFileSync(new URL("../../fixtures/py-whitespace.json", import.meta.url), "utf8")) as {
  whitespace: number[];
  strip: [string, string, string, string][];
};

describe("Python whitespace (util/py-str.ts)", () => {
  it("isPyWhitespace is exactly CPython's str.isspace() over every code point", () => {
    const ours: number[] = [];
    for (let cp = 0; cp <= 0x10ffff; cp++) if (isPyWhitespace(cp)) ours.push(cp);
    expect(ours).toEqual(golden.whitespace);
    // Where JS \s differs: U+FEFF is not Python whitespace, U+001C–U+001F and U+0085 are.
    expect(/\s/.test("\ufeff") && !isPyWhitespace(0xfeff)).toBe(true);
    expect(!/\s/.test("\x85") && isPyWhitespace(0x85)).toBe(true);
  });

  it("strip / lstrip / rstrip equal CPython's", () => {
    for (const [s, both, left, right] of golden.strip) {
      expect(pyStrip(s)).toBe(both);
      expect(jinjaStrip(s, null, "lstrip")).toBe(left); // the templates' `.lstrip()`, on the same definition
      expect(pyRstrip(s)).toBe(right);
    }
  });

  it("a long run of whitespace inside a model's output is stripped in linear time", () => {
    // `/\s+$/` backtracks quadratically here (~1 s at 40 k spaces): counted in character reads, not timed.
    const text = "a" + " ".repeat(200_000) + "b";
    let reads = 0;
    const counting = { length: text.length, charCodeAt: (i: number) => (reads++, text.charCodeAt(i)), slice: (a: number, b?: number) => text.slice(a, b) };
    expect(pyStrip(counting as unknown as string)).toBe(counting); // nothing to strip: the input itself
    expect(reads).toBe(2);
    // And through the parsers that strip whole outputs (seconds each with the regexes they had).
    const gap = " ".repeat(200_000);
    expect(splitReasoning(`<think>x${gap}y</think>${gap}z${" ".repeat(10)}`, true)).toEqual({ reasoning: `x${gap}y`, content: `${gap}z${" ".repeat(10)}` }); // current SGLang keeps the whitespace
    const tools = [{ type: "function" as const, function: { name: "f", description: undefined, parameters: undefined, strict: false } }];
    const out = parseQwenToolCalls(`a${gap}b \n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>`, tools);
    expect(out).toEqual({ content: `a${gap}b`, calls: [{ name: "f", arguments: "{}" }] });
  });
});
