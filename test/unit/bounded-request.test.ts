/**
 * Bounded work per request, in Node (a real clock): the 19 MB tool schema of issue #13 is refused
 * by the pre-parse count, and every template input counts (jsonChars stops at its budget, so a
 * huge value costs no more than the budget to measure). The figure is printed for
 * docs/reliability.md; no timed assertion.
 */
import { describe, expect, it } from "vitest";
import { jsonChars, parseChatRequest } from "../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { InvalidRequestError } from "../../src/api/errors.ts";

describe("bounded work per request", () => {
  it("refuses a 19 MB tool schema before JSON.parse", () => {
    const props: Record<string, unknown> = {};
    for (let i = 0; i < 180_000; i++) props[`p${i}`] = { type: "string", description: "x".repeat(70) };
    const text = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props } } }] });
    const t0 = performance.now();
    let err: unknown = null;
    try {
      parseChatRequest(text, DEFAULT_LIMITS, { sizeChecked: true });
    } catch (e) {
      err = e;
    }
    const ms = performance.now() - t0;
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect((err as InvalidRequestError).code).toBe("limit_exceeded");
    expect((err as InvalidRequestError).message).toMatch(/far over the limit/);
    console.log(`19 MB tool schema (${text.length} chars): refused in ${ms.toFixed(1)} ms of validation (Node)`);
  });

  it("jsonChars equals compact JSON length and stops at its budget", () => {
    const v = { a: [1, "two", null, true, { b: "ç" }], c: {} };
    expect(jsonChars(v, 1e9)).toBe(JSON.stringify(v).length);
    // Over budget: the count says so without walking the rest.
    const huge = { s: Array.from({ length: 100 }, () => "abcdefgh".repeat(100)) };
    expect(jsonChars(huge, 1000)).toBeGreaterThan(1000);
    expect(jsonChars(huge, 1000)).toBeLessThan(2000);
  });

  it("a schema under the body cap but over maxTotalChars is refused after parsing, naming the tool", () => {
    const limits = { ...DEFAULT_LIMITS, maxTotalChars: 1000 };
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f", parameters: { type: "object", description: "d".repeat(1200) } } }] });
    expect(() => parseChatRequest(body, limits)).toThrow(expect.objectContaining({ code: "limit_exceeded", param: "tools[0].function" }));
  });
});

describe("stop_regex (runs in Python's backtracking re on the worker's scheduler at every token)", () => {
  const body = (stop_regex: unknown) => JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stop_regex });
  it("an empty list is no pattern, as SGLang reads it", () => {
    expect(parseChatRequest(body([]), DEFAULT_LIMITS).stop_regex).toEqual([]);
  });
  it("is refused by default, naming the limit that allows it", () => {
    expect(() => parseChatRequest(body("(a|aa)*$"), DEFAULT_LIMITS)).toThrow(expect.objectContaining({ code: "limit_exceeded", param: "stop_regex", message: expect.stringMatching(/maxStopRegexes/) }));
  });
  it("passes within the limits an operator sets, and each pattern's length is bounded", () => {
    const limits = { ...DEFAULT_LIMITS, maxStopRegexes: 2, maxStopRegexChars: 8 };
    expect(parseChatRequest(body(["\\d+", "END"]), limits).stop_regex).toEqual(["\\d+", "END"]);
    expect(() => parseChatRequest(body(["a", "b", "c"]), limits)).toThrow(expect.objectContaining({ code: "limit_exceeded", param: "stop_regex" }));
    expect(() => parseChatRequest(body(["ok", "x".repeat(9)]), limits)).toThrow(expect.objectContaining({ param: "stop_regex[1]" }));
  });
});
