import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { textAt } from "../../../src/util/text-at.ts";

describe("textAt", () => {
  it("agrees with startsWith at every position, past the end included", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), fc.string({ unit: "binary", maxLength: 8 }), fc.nat(40), (text, piece, at) => {
        expect(textAt(text, piece, at)).toBe(text.startsWith(piece, at));
      }),
      { numRuns: 2000 },
    );
  });
  it("a piece running past the end is not there", () => {
    expect(textAt("abc", "cd", 2)).toBe(false);
    expect(textAt("abc", "c", 2)).toBe(true);
    expect(textAt("abc", "", 3)).toBe(true);
  });
});
