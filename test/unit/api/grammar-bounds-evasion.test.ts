/**
 * Spellings that must not slip past the grammar bounds (src/api/grammar-bounds.ts): a repetition
 * count with more than nine digits (Python's re and XGrammar read any number of digits, leading
 * zeros included) and regexes held in a schema's patternProperties keys.
 */
import { describe, expect, it } from "vitest";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { InvalidRequestError } from "../../../src/api/errors.ts";

const base = { model: "q", messages: [{ role: "user", content: "hi" }] };

function codeOf(extra: Record<string, unknown>): string {
  try {
    parseChatRequest(JSON.stringify({ ...base, ...extra }), DEFAULT_LIMITS);
  } catch (e) {
    if (e instanceof InvalidRequestError) return e.code ?? "invalid_request_error";
    throw e;
  }
  return "accepted";
}

describe("grammar bound spellings", () => {
  it("counts a repetition written with more than nine digits", () => {
    expect(codeOf({ regex: "(a{1000}){0000001000}" })).toBe("grammar_too_complex");
    expect(codeOf({ regex: "(a{1000}){1,00000000001000}" })).toBe("grammar_too_complex");
    expect(codeOf({ regex: "a{99999999999999999999}" })).toBe("grammar_too_complex");
    expect(codeOf({ ebnf: 'root ::= ("a"{1000}){0000001000}' })).toBe("grammar_too_complex");
    // The same counts written plainly stay accepted below the bound.
    expect(codeOf({ regex: "(a{10}){0000000010}" })).toBe("accepted");
  });

  it("measures the regexes that are patternProperties keys", () => {
    const schema = { type: "object", patternProperties: { "^(a{1000}){1000}$": { type: "string" } } };
    expect(codeOf({ response_format: { type: "json_schema", json_schema: { name: "s", schema } } })).toBe("grammar_too_complex");
    const fine = { type: "object", patternProperties: { "^x_[a-z]{1,8}$": { type: "string" } } };
    expect(codeOf({ response_format: { type: "json_schema", json_schema: { name: "s", schema: fine } } })).toBe("accepted");
  });
});

describe("tools that become one constraint", () => {
  const tool = (i: number, maxLength: number) => ({ type: "function", function: { name: `f${i}`, parameters: { type: "object", properties: { s: { type: "string", maxLength } } } } });

  it("a forced call's tools are measured together: many tools each under the bound are refused when their sum is past it", () => {
    const tools = Array.from({ length: 64 }, (_, i) => tool(i, 60_000));
    expect(codeOf({ tools, tool_choice: "required" })).toBe("grammar_too_complex");
    expect(codeOf({ tools: tools.map((t) => ({ ...t, function: { ...t.function, strict: true } })) })).toBe("grammar_too_complex");
    // One such tool alone fits, and unforced, non-strict tools compile nothing.
    expect(codeOf({ tools: [tool(0, 60_000)], tool_choice: "required" })).toBe("accepted");
    expect(codeOf({ tools })).toBe("accepted");
  });
});
