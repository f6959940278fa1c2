/**
 * Output constraints the worker compiles get complexity bounds (src/api/grammar-bounds.ts): a
 * pathological regex, grammar or schema is the client's 400 naming the bound, while ordinary
 * constraints pass.
 */
import { describe, expect, it } from "vitest";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS, parseLimits } from "../../../src/api/limits.ts";
import { InvalidRequestError, httpStatusOf } from "../../../src/api/errors.ts";

const base = { model: "q", messages: [{ role: "user", content: "hi" }] };
const parse = (extra: Record<string, unknown>, limits = DEFAULT_LIMITS) => parseChatRequest(JSON.stringify({ ...base, ...extra }), limits);

function refusal(extra: Record<string, unknown>, limits = DEFAULT_LIMITS): InvalidRequestError {
  try {
    parse(extra, limits);
  } catch (e) {
    if (e instanceof InvalidRequestError) return e;
    throw e;
  }
  throw new Error("accepted");
}

describe("regex and ebnf bounds", () => {
  it("refuses nested bounded repetition that expands past the limit, naming the bound", () => {
    const e = refusal({ regex: "(a{1,65535}){1,65535}" });
    expect(httpStatusOf(e)).toBe(400);
    expect(e.param).toBe("regex");
    expect(e.code).toBe("grammar_too_complex");
    expect(e.message).toMatch(/maxGrammarExpansion/);
    expect(refusal({ regex: "(?:(?:x{300}){300})" }).message).toMatch(/maxGrammarExpansion/);
    expect(refusal({ regex: "[a-z]{2,}{70000}" }).message).toMatch(/maxGrammarExpansion/);
  });

  it("refuses deep nesting and too many alternatives", () => {
    expect(refusal({ regex: "(".repeat(40) + "a" + ")".repeat(40) }).message).toMatch(/maxGrammarDepth/);
    expect(refusal({ regex: Array.from({ length: 1100 }, (_, i) => `w${i}`).join("|") }).message).toMatch(/maxGrammarAlternatives/);
    expect(refusal({ ebnf: 'root ::= ("a"{1,1000}){1,1000}' }).param).toBe("ebnf");
  });

  it("passes ordinary constraints; escapes, classes and literals are single positions", () => {
    expect(() => parse({ regex: String.raw`\d{1,3}(\.\d{1,3}){3}` })).not.toThrow();
    expect(() => parse({ regex: String.raw`[{(|]{1000}\{65535\}` })).not.toThrow();
    expect(() => parse({ regex: "(?P<year>[0-9]{4})-(?:0[1-9]|1[0-2])" })).not.toThrow();
    expect(() => parse({ ebnf: 'root ::= "yes" | "no"  # "(((({65535}"\nitem ::= [a-z]+ ("," item)*' })).not.toThrow();
    expect(() => parse({ regex: "a{65537}" })).toThrow(InvalidRequestError);
    expect(() => parse({ regex: "a{65537}" }, parseLimits({ maxGrammarExpansion: 100_000 }))).not.toThrow();
  });
});

describe("json_schema and structural_tag bounds", () => {
  const rf = (schema: unknown) => ({ response_format: { type: "json_schema", json_schema: { name: "s", schema } } });

  it("maxItems multiplies the item schema; a pattern counts as a regex", () => {
    const e = refusal(rf({ type: "array", maxItems: 100_000, items: { type: "string", maxLength: 1000 } }));
    expect(e.param).toBe("response_format.json_schema.schema");
    expect(e.message).toMatch(/maxGrammarExpansion/);
    expect(refusal(rf({ type: "object", properties: { x: { type: "string", pattern: "(a{1,65535}){1,65535}" } } })).message).toMatch(/maxGrammarExpansion/);
  });

  it("refuses deep schemas and too many branches", () => {
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 40; i++) deep = { type: "object", properties: { x: deep } };
    const limits = parseLimits({ maxJsonDepth: 256 });
    expect(refusal(rf(deep), limits).message).toMatch(/maxGrammarDepth/);
    expect(refusal(rf({ anyOf: Array.from({ length: 1100 }, (_, i) => ({ const: i })) })).message).toMatch(/maxGrammarAlternatives/);
  });

  it("a structural tag and a forced tool's parameters are bounded too", () => {
    const tag = { type: "structural_tag", structures: [{ begin: "<f>", schema: { type: "string", pattern: "(x{1,1000}){1,1000}" }, end: "</f>" }], triggers: ["<f>"] };
    expect(refusal({ response_format: tag }).param).toBe("response_format");
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "array", maxItems: 1_000_000, items: { type: "integer" } } } }];
    expect(refusal({ tools, tool_choice: "required" }).param).toBe("tools[0].function.parameters");
    // Not forced and not strict: the schema is only rendered into the prompt, never compiled.
    expect(() => parse({ tools })).not.toThrow();
  });

  it("passes an ordinary schema", () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", maxLength: 200 }, tags: { type: "array", maxItems: 20, items: { type: "string", maxLength: 50 } }, kind: { enum: ["a", "b", "c"] } },
      required: ["name"],
    };
    expect(() => parse(rf(schema))).not.toThrow();
  });
});
