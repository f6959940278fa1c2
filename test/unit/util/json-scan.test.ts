/**
 * topLevelMemberSpan against JSON.parse (the oracle): the span's text parses to the member JSON.parse
 * keeps, for random documents, with random whitespace, repeated and escaped keys. parseRecordingLiterals
 * against JSON.parse and JSON.stringify: the same value, and a kept escaping is exactly JSON.stringify's,
 * whatever escapes the client chose.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isCanonicalEscaping, LITERAL_MIN_CHARS, parseRecordingLiterals, topLevelMemberSpan, type JsonLiteral } from "../../../src/util/json-scan.ts";

/** JSON text of `v` with random whitespace between tokens (strings kept intact). */
function spaced(v: unknown, ws: () => string): string {
  if (Array.isArray(v)) return `${ws()}[${v.map((x) => spaced(x, ws)).join(`${ws()},`)}${ws()}]`;
  if (v !== null && typeof v === "object") return `${ws()}{${Object.entries(v).map(([k, x]) => `${ws()}${JSON.stringify(k)}${ws()}:${spaced(x, ws)}`).join(",")}${ws()}}`;
  return `${ws()}${JSON.stringify(v)}`;
}

const KEY = "tools";

/** The definition as written out: some `\\u` or `\\/` whose backslash is preceded by an even run of backslashes (not itself escaped). */
function canonicalByDefinition(inner: string): boolean {
  for (let j = 0; j + 1 < inner.length; j++) {
    if (inner[j] !== "\\" || (inner[j + 1] !== "u" && inner[j + 1] !== "/")) continue;
    let run = 0;
    for (let k = j - 1; k >= 0 && inner[k] === "\\"; k--) run++;
    if (run % 2 === 0) return false;
  }
  return true;
}

describe("isCanonicalEscaping", () => {
  it("equals the definition on any text of backslashes, u, / and others, and on JSON.stringify's and Python's escapings", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom("\\", "u", "/", "n", "a", '"', "é"), { maxLength: 40 }), (chars) => {
        const s = chars.join("");
        expect(isCanonicalEscaping(s)).toBe(canonicalByDefinition(s));
      }),
      { seed: 0xe5c, numRuns: 3000 },
    );
    const prose = 'a "quoted" path C:\\dir\\u1 / é\n\tend\\';
    expect(isCanonicalEscaping(JSON.stringify(prose).slice(1, -1))).toBe(true);
    // Python's json.dumps (ensure_ascii) writes \u00e9, and some clients escape "/".
    expect(isCanonicalEscaping('caf\\u00e9')).toBe(false);
    expect(isCanonicalEscaping('a\\/b')).toBe(false);
    expect(isCanonicalEscaping('a\\\\/b')).toBe(true);
    expect(isCanonicalEscaping('a\\\\\\u0041')).toBe(false);
  });
});

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

/** A JSON string literal of `s` in one of the spellings clients use. */
function literal(s: string, style: "canonical" | "ascii" | "slashes" | "all-u"): string {
  if (style === "canonical") return JSON.stringify(s);
  if (style === "slashes") return JSON.stringify(s).replace(/\//g, "\\/");
  const hex = (c: number) => `\\u${c.toString(16).padStart(4, "0")}`;
  // Python's json.dumps (ensure_ascii) writes non-ASCII as \uXXXX; "all-u" escapes every unit.
  return JSON.stringify(s).replace(style === "ascii" ? /[^\x00-\x7f]/g : /[^"\\]/g, (ch) => hex(ch.charCodeAt(0)));
}

describe("parseRecordingLiterals", () => {
  const keys = new Set(["content", "text"]);
  it("parses as JSON.parse does and keeps only escapings equal to JSON.stringify's", () => {
    // "\\u00" and "\\/" are a backslash then "u00" or "/": JSON escapes the backslash, so the
    // source holds "\\" + "u00", which must not be taken for a \u escape.
    const unit = fc.constantFrom("a", "/", "é", "\n", '"', "\\", "\\u00", "\\/", "\u0001", "\t", "😀", "中", "\u2028", "x y");
    const textArb = fc.array(fc.tuple(unit, fc.integer({ min: 1, max: 900 })), { minLength: 1, maxLength: 5 }).map((runs) => runs.map(([u, n]) => u.repeat(n)).join(""));
    const styleArb = fc.constantFrom("canonical", "ascii", "slashes", "all-u") as fc.Arbitrary<"canonical" | "ascii" | "slashes" | "all-u">;
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom("content", "text", "name"), textArb, styleArb), { minLength: 1, maxLength: 4 }), (members) => {
        const body = `{"messages":[${members.map(([k, s, style]) => `{"role":"user",${JSON.stringify(k)}:${literal(s, style)}}`).join(",")}]}`;
        const kept: JsonLiteral[] = [];
        expect(parseRecordingLiterals(body, keys, kept)).toEqual(JSON.parse(body));
        for (const { value, escaped } of kept) expect(escaped).toBe(JSON.stringify(value).slice(1, -1));
        for (const [k, s, style] of members) {
          // Kept exactly when the client wrote JSON.stringify's spelling and that spelling has no
          // \u escape of its own (a control character without a short escape).
          const keepable = keys.has(k) && s.length >= LITERAL_MIN_CHARS && literal(s, style) === JSON.stringify(s) && !/[\u0000-\u0007\u000b\u000e-\u001f]/.test(s);
          const found = kept.find((l) => l.value === s);
          if (keepable) expect(found?.escaped).toBe(JSON.stringify(s).slice(1, -1));
          // (An identical string sent once canonically and once not is kept from the canonical one.)
          if (!found) expect(keepable).toBe(false);
        }
      }),
      { numRuns: 200, seed: 1515 },
    );
  });
});
