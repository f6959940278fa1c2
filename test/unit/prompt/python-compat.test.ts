// Python number text for tojson and Python str.strip semantics (docs/prompt.md, "Number policy for `tojson`").
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { pyStrip } from "../../../src/prompt/jinja-compat.ts";
import { isPyWhitespace } from "../../../src/util/py-str.ts";
import {
  parseJsonKeepingNumbers,
  parseToolsKeepingNumbers,
  PyNumber,
  pythonFloatRepr,
  pythonNumberTextFromLexeme,
  pythonNumberTextFromValue,
  renderChatPrompt,
} from "../../../src/prompt/index.ts";

/** Python's strip family over a code-point array (the definition; pyStrip reads the ends in place). */
function stripByCodePoints(s: string, chars: string | null, method: "strip" | "lstrip" | "rstrip"): string {
  const set = chars === null ? null : new Set(Array.from(chars, (c) => c.codePointAt(0)!));
  const strip = (cp: number) => (set ? set.has(cp) : isPyWhitespace(cp));
  const cps = Array.from(s);
  let start = 0;
  let end = cps.length;
  if (method !== "rstrip") while (start < end && strip(cps[start]!.codePointAt(0)!)) start++;
  if (method !== "lstrip") while (end > start && strip(cps[end - 1]!.codePointAt(0)!)) end--;
  return cps.slice(start, end).join("");
}

describe("pyStrip against a code-point array", () => {
  it("strips what the code-point definition strips, lone and paired surrogates included", () => {
    const unit = fc.constantFrom("\n", " ", "a", "\ud83d\ude00", "\ud83d", "\ude00", "\u3000", "x");
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 12 }), fc.option(fc.array(unit, { maxLength: 3 })), fc.constantFrom("strip", "lstrip", "rstrip"), (parts, charParts, method) => {
        const s = parts.join("");
        const chars = charParts === null ? null : charParts.join("");
        expect(pyStrip(s, chars, method)).toBe(stripByCodePoints(s, chars, method));
      }),
      { seed: 0x5791, numRuns: 4000 },
    );
  });
});

// Expected values: CPython 3.11 `json.dumps(json.loads(lexeme))`.
const PYTHON_DUMPS: Record<string, string> = {
  "1.0": "1.0",
  "1e20": "1e+20",
  "12345678901234567890": "12345678901234567890",
  "-0.0": "-0.0",
  "1.5e-7": "1.5e-07",
  "0.0001": "0.0001",
  "0.00001": "1e-05",
  "1e16": "1e+16",
  "1e15": "1000000000000000.0",
  "123456789012345678": "123456789012345678",
  "1.7976931348623157e308": "1.7976931348623157e+308",
  "5e-324": "5e-324",
  "-2.5": "-2.5",
  "100": "100",
  "-0": "0",
  "0": "0",
  "1E5": "100000.0",
  "2.5e+3": "2500.0",
  "0.1": "0.1",
  "1e-4": "0.0001",
  "123.456e-10": "1.23456e-08",
  "9007199254740993": "9007199254740993",
  "1e400": "Infinity",
};

describe("Python json number text", () => {
  it.each(Object.entries(PYTHON_DUMPS))("lexeme %s → %s", (lexeme, expected) => {
    expect(pythonNumberTextFromLexeme(lexeme)).toBe(expected);
  });

  it("repr equals JS text (+ '.0' when integral) in Python's fixed-notation range", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true, min: 1e-4, max: 9.999999999999998e15 }), fc.boolean(), (x, neg) => {
        const v = neg ? -x : x;
        expect(pythonFloatRepr(v)).toBe(String(v) + (Number.isInteger(v) ? ".0" : ""));
      }),
      { numRuns: 2000 },
    );
  });

  it("repr round-trips and has Python's shape everywhere", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        const text = pythonFloatRepr(x);
        expect(Object.is(Number(text), x)).toBe(true);
        expect(text).toMatch(/^-?(\d+\.\d+|\d(\.\d+)?e[+-]\d{2,3})$/);
        const exp = /e([+-]\d+)$/.exec(text);
        if (exp) expect(Math.abs(Number(exp[1]))).toBeGreaterThanOrEqual(Number(exp[1]) < 0 ? 5 : 16);
      }),
      { numRuns: 5000 },
    );
  });

  it("value policy: safe integers are ints, anything else a float", () => {
    expect([1, -0, 3.5, 1e20, 2 ** 53 + 2, 1e-7].map(pythonNumberTextFromValue)).toEqual(["1", "0", "3.5", "1e+20", "9007199254740994.0", "1e-07"]);
  });

  it("parseJsonKeepingNumbers keeps every number's lexeme and rejects invalid JSON", () => {
    const v = parseJsonKeepingNumbers('{"a": [1.0, 2], "b": {"c": -0.0}, "s": "1.0"}') as { a: PyNumber[]; b: { c: PyNumber }; s: string };
    expect(v.a.map((n) => n.pythonText)).toEqual(["1.0", "2"]);
    expect(v.b.c.pythonText).toBe("-0.0");
    expect(v.s).toBe("1.0");
    expect(() => parseJsonKeepingNumbers("{1}")).toThrow(SyntaxError);
  });

  it("tools parsed from the raw body render exactly, even integral floats", () => {
    const body = '{"model": "m", "temperature": 1.0, "messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"minimum": 0.0, "maximum": 1e20, "n": 3}}}]}';
    const tools = parseToolsKeepingNumbers(body);
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages: [{ role: "user", content: "q" }], tools: tools! });
    expect(text).toContain('"parameters": {"minimum": 0.0, "maximum": 1e+20, "n": 3}');
    expect(parseToolsKeepingNumbers('{"messages": []}')).toBeNull();
  });
});

describe("Python str.strip family", () => {
  it.each([
    ["  x  ", "\n", "strip", "  x  "],
    ["\n\n  x \n", "\n", "strip", "  x "],
    ["\n  x", "\n", "lstrip", "  x"],
    ["x  \n\n", "\n", "rstrip", "x  "],
    [" \t x \u00a0\u2003", null, "strip", "x"],
    ["\ufeffx\ufeff", null, "strip", "\ufeffx\ufeff"],
    ["\u001cx\u001f", null, "strip", "x"],
    ["ab🎉xx🎉ba", "ab🎉", "strip", "xx"],
    ["", "\n", "strip", ""],
  ] as const)("%j.%s(%j)", (s, chars, method, expected) => {
    expect(pyStrip(s, chars, method)).toBe(expected);
  });

  it("is what the thinking template sees: spaces after </think> survive lstrip('\\n')", () => {
    const text = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", {
      messages: [
        { role: "user", content: "q" },
        { role: "assistant", content: "<think>\n  plan  \n</think>\n\n  answer" },
      ],
      continue_final_message: false,
    } as never);
    // Re-labelled user turn keeps the raw content; render the same history with a trailing user turn too.
    expect(text).toContain("<think>\n  plan  \n</think>\n\n  answer");
    const after = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", {
      messages: [
        { role: "user", content: "q" },
        { role: "assistant", content: "<think>\n  plan  \n</think>\n\n  answer" },
        { role: "tool", content: "r" },
      ],
    });
    expect(after).toContain("<|im_start|>assistant\n<think>\n  plan  \n</think>\n\n  answer<|im_end|>\n");
  });
});
