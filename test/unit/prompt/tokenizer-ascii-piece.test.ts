import { describe, expect, it } from "vitest";
import { asciiPieceEnd, PieceScanner } from "../../../src/prompt/tokenizer/piece-scanner.ts";
import { mulberry32 } from "../support/tokenizer-fuzz.ts";

// The encoder's memo probe for ASCII pieces (engine.ts hotAscii) trusts asciiPieceEnd's end: it
// must be exactly the general scanner's.
/** asciiPieceEnd at code unit i of text, as a code unit index (it reads the text's UTF-8). */
function asciiEnd(text: string, i: number): number {
  const bytes = new TextEncoder().encode(text);
  const b = new TextEncoder().encode(text.slice(0, i)).length;
  const end = asciiPieceEnd(bytes, b, bytes.length);
  return end < 0 ? -1 : i + end - b;
}

describe("asciiPieceEnd", () => {
  const scanner = new PieceScanner();

  it("ends ASCII pieces where the scanner does", () => {
    const cases: [string, number, number][] = [
      ["hello, world", 0, 5], ["hello, world", 5, 6], ["hello, world", 6, 12], ["(word) x", 0, 5], ["\tTab", 0, 4], ["a", 0, 1],
      ["'s", 0, 2], ["'LL x", 0, 3], ["'hello", 0, 6], ["12", 0, 1], [" 12", 0, 1], ["x  a", 1, 2], [" ", 0, 1], [", ", 0, 1],
      [" ...\n\nx", 0, 6], ["  \n\n  x", 0, 4], ["  \n\n  x", 4, 5], ["a  ", 1, 3], ["\r\nabc", 0, 2],
    ];
    for (const [text, i, end] of cases) {
      expect(asciiEnd(text, i), JSON.stringify([text, i])).toBe(end);
      expect(scanner.pieceEnd(text, i), JSON.stringify([text, i])).toBe(end);
    }
  });

  it("leaves a piece to the scanner where a non-ASCII character takes part", () => {
    // é is a letter, U+00A0 a space, — "other", ſ ends a contraction: each could change the piece.
    for (const [text, i] of [["héllo", 0], [" é", 0], ["日本", 0], ["'ſ", 0], [",—", 0], ["x \u00a0", 1], ["  \u00a0y", 0], [" (—", 0], ["ab中", 0]] as const) {
      expect(asciiEnd(text, i), JSON.stringify(text)).toBe(-1);
    }
  });

  it("agrees with pieceEnd at every piece start of seeded mixed text", () => {
    const rand = mulberry32(37);
    const alphabet = ["a", "Z", "q", " ", "  ", "\t", "\n", "\r\n", "\r", "'", "'s", "'LL", "'re", "'Ve", "7", ",", ".", "-", "(", "é", "ß", "中", "😀", "\u00a0", "\u2003", "ſ", "_", "—"];
    let answered = 0;
    let pieces = 0;
    for (let t = 0; t < 4000; t++) {
      const text = Array.from({ length: 1 + Math.floor(rand() * 30) }, () => alphabet[Math.floor(rand() * alphabet.length)]).join("");
      for (let i = 0; i < text.length; ) {
        const end = scanner.pieceEnd(text, i);
        const ascii = asciiEnd(text, i);
        if (ascii >= 0) {
          expect(ascii, JSON.stringify([text, i])).toBe(end);
          answered++;
        }
        pieces++;
        i = end;
      }
    }
    expect(answered).toBeGreaterThan(pieces / 2);
  });

  it("reads only bytes[0, len) of a longer buffer", () => {
    const bytes = new TextEncoder().encode("ab cd");
    expect(asciiPieceEnd(bytes, 0, 2)).toBe(2);
    expect(asciiPieceEnd(bytes, 3, 4)).toBe(4);
    expect(asciiPieceEnd(new TextEncoder().encode("  x"), 0, 2)).toBe(2);
  });
});
