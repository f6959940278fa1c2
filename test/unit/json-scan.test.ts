/**
 * topLevelMemberSpan against JSON.parse (the oracle): the span's text parses to the member JSON.parse
 * keeps, for random documents, with random whitespace, repeated and escaped keys.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { topLevelMemberSpan } from "../../src/util/json-scan.ts";

/** JSON text of `v` with random whitespace between tokens (strings kept intact). */
function spaced(v: unknown, ws: () => string): string {
  if (Array.isArray(v)) return `${ws()}[${v.map((x) => spaced(x, ws)).join(`${ws()},`)}${ws()}]`;
  if (v !== null && typeof v === "object") return `${ws()}{${Object.entries(v).map(([k, x]) => `${ws()}${JSON.stringify(k)}${ws()}:${spaced(x, ws)}`).join(",")}${ws()}}`;
  return `${ws()}${JSON.stringify(v)}`;
}

const KEY = "tools";

describe("topLevelMemberSpan", () => {
  it("finds the text of the member JSON.parse keeps", () => {
    const keyArb = fc.oneof(fc.constant(KEY), fc.constant("tool"), fc.constant("messages"), fc.string({ maxLength: 6 }));
    const doc = fc.dictionary(keyArb, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 });
    fc.assert(
      fc.property(doc, fc.array(fc.constantFrom("", " ", "\n", "\t "), { minLength: 1, maxLength: 8 }), (obj, spaces) => {
        let n = 0;
        const text = spaced(obj, () => spaces[n++ % spaces.length]!);
        const span = topLevelMemberSpan(text, KEY);
        const parsed = JSON.parse(text) as Record<string, unknown>;
        if (!Object.hasOwn(parsed, KEY)) expect(span).toBeNull();
        else expect(JSON.parse(text.slice(span![0], span![1]))).toEqual(parsed[KEY]);
      }),
      { numRuns: 500, seed: 1519 },
    );
  });

  it("takes the last of repeated keys, compares escaped keys decoded, ignores nested and quoted lookalikes", () => {
    const cases: [string, unknown][] = [
      ['{"tools":[1],"tools":[2]}', [2]],
      ['{"t\\u006fols" : [3] }', [3]],
      ['{"a":{"tools":[4]},"b":"\\"tools\\":[5]"}', undefined],
      ['{"a":"x\\\\","tools":{"k":[6]}}', { k: [6] }],
      ['[{"tools":[7]}]', undefined],
    ];
    for (const [text, want] of cases) {
      const span = topLevelMemberSpan(text, KEY);
      expect(span === null ? undefined : JSON.parse(text.slice(span[0], span[1])), text).toEqual(want);
    }
  });
});
