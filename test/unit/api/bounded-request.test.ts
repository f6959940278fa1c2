/**
 * Bounded work per request, in Node (a real clock): a 19 MB tool schema is refused
 * by the pre-parse count, and every template input counts (jsonChars stops at its budget, so a
 * huge value costs no more than the budget to measure). The figure is printed for
 * docs/reliability.md; no timed assertion.
 */
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { jsonChars, parseChatRequest, scanJsonStructure } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { InvalidRequestError } from "../../../src/api/errors.ts";
import type { JsonLiteral } from "../../../src/util/json-scan.ts";

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

/** JSON values in a parsed value: itself, and every element / member value at any depth. */
function countValues(v: unknown): number {
  if (Array.isArray(v)) return 1 + v.reduce((n: number, x) => n + countValues(x), 0);
  if (typeof v === "object" && v !== null) return 1 + Object.values(v).reduce((n: number, x) => n + countValues(x), 0);
  return 1;
}

const HEAD = '{"model":"m","messages":[{"role":"user","content":"hi"}]';
/** A valid chat request with `field` (an unknown top-level member, ignored by the schema) holding `json`. */
const withField = (json: string, field = "x") => `${HEAD},"${field}":${json}}`;

describe("bounded work before JSON.parse (black-box findings: millions of values under the byte cap)", () => {
  afterEach(() => vi.restoreAllMocks());

  /** Runs parseChatRequest as the edge does (literals: the reviver parse) and as plain JSON.parse, counting parses. */
  function refusedBeforeParse(body: string): InvalidRequestError {
    const parse = vi.spyOn(JSON, "parse");
    let err: unknown = null;
    for (const literals of [undefined, [] as JsonLiteral[]]) {
      try {
        parseChatRequest(body, DEFAULT_LIMITS, { sizeChecked: true, literals });
        err = null;
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InvalidRequestError);
    }
    expect(parse).not.toHaveBeenCalled();
    expect(body.length).toBeLessThanOrEqual(DEFAULT_LIMITS.maxBodyBytes);
    return err as InvalidRequestError;
  }

  it.each([
    ["4 million {} (12 MB)", () => `[${"{},".repeat(4_000_000)}{}]`],
    ["6 million numbers", () => `[${"1,".repeat(6_000_000)}1]`],
    ["300 000 {} (0.9 MB): just over maxJsonValues", () => `[${"{},".repeat(300_000)}{}]`],
    ["members rather than elements", () => `{${Array.from({ length: 250_000 }, (_, i) => `"k${i}":0`).join(",")}}`],
  ])("%s in an unknown field: refused by maxJsonValues, never parsed", (_name, make) => {
    const e = refusedBeforeParse(withField(make()));
    expect(e.code).toBe("limit_exceeded");
    expect(e.param).toBeNull();
    expect(e.message).toMatch(/maxJsonValues/);
  });

  it("the value count is exact on valid JSON, whitespace and strings with brackets included", () => {
    const text = fc.tuple(fc.jsonValue(), fc.constantFrom(undefined, 1, "\t")).map(([v, sp]) => ({ v, text: JSON.stringify(v, null, sp) ?? "null" }));
    fc.assert(
      fc.property(text, ({ text }) => {
        const parsed: unknown = JSON.parse(text);
        expect(scanJsonStructure(text, 1e9, 1e9)).toEqual({ over: null, values: countValues(parsed) });
      }),
      { numRuns: 500 },
    );
    expect(scanJsonStructure('[ ] ', 10, 10).values).toBe(1);
    expect(scanJsonStructure('{"a,[{": [ {}, "x,{[" ] }', 10, 10).values).toBe(4);
    // limits: the first one passed, as the text is read
    expect(scanJsonStructure("[1,2,3]", 10, 3).over).toBe("values");
    expect(scanJsonStructure("[1,2,3]", 10, 4).over).toBeNull();
    expect(scanJsonStructure("[[[1,2,3]]]", 2, 1).over).toBe("values");
    expect(scanJsonStructure("[[[]]]", 2, 10).over).toBe("depth");
  });

  it('"data:" strings are left out of the text pre-count only as `url` values, and at most maxMediaItems of them', () => {
    const payload = (n: number) => `data:image/png;base64,${"A".repeat(n)}`;
    // 160 data: strings of 100 k in an unknown field (16 MB, under the 20 MiB body cap)
    const strings = withField(JSON.stringify(Array.from({ length: 160 }, () => payload(100_000))));
    // the same as keys, and as url values of 200 fake parts (20 MB): 64 left out, 136 counted
    const keys = withField(`{${Array.from({ length: 160 }, (_, i) => `"${payload(100_000)}${i}":0`).join(",")}}`);
    const urls = withField(JSON.stringify(Array.from({ length: 200 }, () => ({ url: payload(100_000) }))));
    for (const body of [strings, keys, urls]) {
      const e = refusedBeforeParse(body);
      expect(e.code).toBe("limit_exceeded");
      expect(e.message).toMatch(/far over the limit/);
    }
  });

  it("a large legitimate request still passes: long text, 8 data-URL images, 128 tools with real schemas, a long agent conversation", () => {
    const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i % 997} tok${i % 13}`).join(" ");
    const image = (i: number) => ({ type: "image_url", image_url: { url: `data:image/png;base64,${String(i).repeat(1_500_000)}` } });
    const schema = (t: number) => ({
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: 30 }, (_, p) => [
          `arg_${t}_${p}`,
          p % 3 === 0
            ? { type: "string", enum: ["alpha", "beta", "gamma", "delta", "epsilon"], description: `choice ${p}` }
            : p % 3 === 1
              ? { type: "array", items: { type: "object", properties: { id: { type: "integer" }, tags: { type: "array", items: { type: "string" } } }, required: ["id"] } }
              : { type: "number", minimum: 0, maximum: 100, description: `the ${p}th number` },
        ]),
      ),
      required: [`arg_${t}_0`],
    });
    const conversation = Array.from({ length: 300 }, (_, i) =>
      i % 3 === 0
        ? { role: "user", content: `step ${i}` }
        : i % 3 === 1
          ? { role: "assistant", content: null, tool_calls: [{ id: `c${i}`, type: "function", function: { name: `tool_${i % 128}`, arguments: JSON.stringify({ [`arg_${i % 128}_0`]: "alpha", n: i }) } }] }
          : { role: "tool", tool_call_id: `c${i - 1}`, content: `result ${i}` },
    );
    const request = {
      model: "m",
      messages: [
        { role: "system", content: "You are an agent." },
        ...conversation,
        { role: "user", content: [{ type: "text", text: words(50_000) }, ...Array.from({ length: 8 }, (_, i) => image(i))] },
      ],
      tools: Array.from({ length: 128 }, (_, t) => ({ type: "function", function: { name: `tool_${t}`, description: `Tool number ${t}.`, parameters: schema(t) } })),
      // At KVEDGE_LIMITS.maxLogitBias (1024 by default).
      logit_bias: Object.fromEntries(Array.from({ length: 1024 }, (_, i) => [String(i + 1000), -100])),
      stop: Array.from({ length: 16 }, (_, i) => `<stop${i}>`),
      max_tokens: 4096,
    };
    const body = JSON.stringify(request);
    expect(body.length).toBeGreaterThan(12_500_000); // most of it data URLs
    expect(body.length).toBeLessThan(DEFAULT_LIMITS.maxBodyBytes);
    const values = scanJsonStructure(body, 1e9, 1e9).values;
    expect(values).toBe(countValues(request));
    expect(values).toBeLessThan(DEFAULT_LIMITS.maxJsonValues / 4); // far from the limit
    for (const literals of [undefined, [] as JsonLiteral[]]) {
      const r = parseChatRequest(body, DEFAULT_LIMITS, { sizeChecked: true, literals });
      expect(r.tools).toHaveLength(128);
      expect(r.messages).toHaveLength(302);
    }
    console.log(`legitimate large request: ${(body.length / 1e6).toFixed(1)} MB, ${values} JSON values (limit ${DEFAULT_LIMITS.maxJsonValues})`);
  });

  it("walking the parsed body keeps no path per value: 500 000 {} fit a 96 MiB V8 heap (maxJsonValues raised)", () => {
    // The old walk kept `{value, path: [...path, i]}` for every pending container and ran out of a 128 MB heap here.
    const validate = pathToFileURL(join(import.meta.dirname, "../../../src/api/validate.ts")).href;
    const limits = pathToFileURL(join(import.meta.dirname, "../../../src/api/limits.ts")).href;
    const code = `
      const { parseChatRequest } = await import(${JSON.stringify(validate)});
      const { DEFAULT_LIMITS } = await import(${JSON.stringify(limits)});
      const body = ${JSON.stringify(HEAD)} + ',"x":[{"y":"\\\\ud800"}' + ",{}".repeat(499_999) + "]}";
      try {
        parseChatRequest(body, { ...DEFAULT_LIMITS, maxJsonValues: 1_000_000 }, { sizeChecked: true });
        console.log("accepted");
      } catch (e) {
        console.log("refused " + e.param); // the lone surrogate, in the object walked last
      }`;
    const r = spawnSync(process.execPath, ["--max-old-space-size=96", "--input-type=module", "-e", code], { encoding: "utf8", timeout: 120_000 });
    expect(r.status, r.stderr.slice(-2000)).toBe(0);
    expect(r.stdout.trim()).toBe("refused x[0].y");
  });
});
