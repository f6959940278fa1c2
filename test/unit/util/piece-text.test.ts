/** PieceText against the joined string (the oracle): lastIndexOf, slice and matches, pieces of any size, occurrences across any boundary. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PieceText } from "../../../src/util/piece-text.ts";

// Small alphabet and short pieces: needles often cross one or several boundaries.
const piece = fc.string({ unit: fc.constantFrom("<", "|", "a", "b", ">"), maxLength: 14 });
const needle = fc.string({ unit: fc.constantFrom("<", "|", "a", "b", ">"), minLength: 1, maxLength: 6 });

describe("PieceText", () => {
  it("reads as the joined string", () => {
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), needle, fc.nat(), fc.nat(), (pieces, n, x, y) => {
        const joined = pieces.join("");
        const t = new PieceText(pieces);
        expect(t.length).toBe(joined.length);
        expect(t.lastIndexOf(n)).toBe(joined.lastIndexOf(n));
        for (let from = -1; from <= joined.length + 1; from++) expect(t.lastIndexOf(n, from)).toBe(joined.lastIndexOf(n, from));
        const a = joined.length === 0 ? 0 : x % (joined.length + 1);
        const b = a + (joined.length === 0 ? 0 : y % (joined.length - a + 1));
        expect(t.slice(a, b)).toBe(joined.slice(a, b));
        expect(t.matches(a, joined.slice(a, b))).toBe(true);
        expect(t.matches(a, joined.slice(a, b) + "x")).toBe(false);
        if (b > a) expect(t.matches(a, "x" + joined.slice(a + 1, b))).toBe(joined[a] === "x");
        expect(t.toString()).toBe(joined);
      }),
      { numRuns: 400, seed: 37 },
    );
  });

  it("a prompt's split token at the join of the chain's text and the request's own", () => {
    const t = new PieceText(["<|im_start|>system\nhi<|im_end|>\n<|im_st", "art|>user\nq<|im_end|>\n", "<|im_start|>assistant\n"]);
    const joined = t.toString();
    for (let from = 0; from <= joined.length; from++) expect(t.lastIndexOf("<|im_start|>", from)).toBe(joined.lastIndexOf("<|im_start|>", from));
  });
});
