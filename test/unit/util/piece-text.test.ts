/**
 * PieceText against the joined string (the oracle): lastIndexOf, slice and matches, pieces of any
 * size, occurrences across any boundary; matches with a record with one record per compared text over many
 * texts made of the same identified pieces (at other offsets, beside pieces without identity and
 * one-character changes of them).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PieceText, SeenPieces } from "../../../src/util/piece-text.ts";

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

  it("matches with a record: the joined string's answer, a record kept for each compared text across texts", () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: fc.constantFrom("a", "b"), minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 4 }),
        fc.array(fc.array(fc.nat(99), { minLength: 1, maxLength: 7 }), { minLength: 2, maxLength: 12 }),
        fc.array(fc.tuple(fc.nat(30), fc.nat(30)), { minLength: 1, maxLength: 4 }),
        (pool, texts, ranges) => {
          // Identified pieces (an identity always stands for the same text), and each also as an unidentified equal copy or one character changed.
          const ids = pool.map(() => ({}));
          const made = texts.map((picks) => {
            const pieces: string[] = [];
            const pieceIds: (object | null)[] = [];
            for (const x of picks) {
              const k = x % pool.length;
              const kind = Math.floor(x / pool.length) % 4;
              const p = pool[k]!;
              pieces.push(kind === 3 ? (p[0] === "a" ? "b" : "a") + p.slice(1) : p);
              pieceIds.push(kind <= 1 ? ids[k]! : null);
            }
            return { text: new PieceText(pieces, pieceIds), joined: pieces.join("") };
          });
          // The compared texts: slices of the first text, each with its own record, compared with every text in turn.
          const first = made[0]!.joined;
          const compared = ranges.map(([a, n]) => {
            const start = a % (first.length + 1);
            return { start, s: first.slice(start, start + n), seen: new SeenPieces(2) };
          });
          for (let round = 0; round < 2; round++) {
            for (const { text, joined } of made) {
              for (const c of compared) expect(text.matches(c.start, c.s, c.seen)).toBe(joined.slice(c.start, c.start + c.s.length) === c.s && c.start + c.s.length <= joined.length);
            }
          }
        },
      ),
      { numRuns: 400, seed: 37 },
    );
  });

  it("a prompt's split token at the join of the chain's text and the request's own", () => {
    const t = new PieceText(["<|im_start|>system\nhi<|im_end|>\n<|im_st", "art|>user\nq<|im_end|>\n", "<|im_start|>assistant\n"]);
    const joined = t.toString();
    for (let from = 0; from <= joined.length; from++) expect(t.lastIndexOf("<|im_start|>", from)).toBe(joined.lastIndexOf("<|im_start|>", from));
  });

  it("headThrough gives the head of the piece holding a prefix's last character, empty pieces and their heads left out", () => {
    const [a, b, c] = [{}, {}, {}];
    const t = new PieceText(["abc", "", "de", "fgh"], [], [a, {}, b, c]);
    expect([0, 1, 3, 4, 5, 6, 8, 9].map((end) => t.headThrough(end))).toEqual([null, a, a, b, b, c, c, null]);
    expect(new PieceText(["abc", "rest"], [], [a]).headThrough(5)).toBeNull();
    expect(PieceText.of("abc").headThrough(2)).toBeNull();
  });
});
