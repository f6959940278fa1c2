import { describe, expect, it } from "vitest";
import { asciiWordEnd, PieceScanner } from "../../../src/prompt/tokenizer/piece-scanner.ts";
import { hashAscii, hashBytes } from "../../../src/prompt/tokenizer/vocab.ts";
import { mulberry32 } from "../support/tokenizer-fuzz.ts";

// The encoder's memo probe for ASCII words (engine.ts hotWord) trusts asciiWordEnd's end and
// hashAscii's slot: both must be exactly the general scanner's and the byte hash's.
describe("asciiWordEnd", () => {
  const scanner = new PieceScanner();

  it("ends ASCII words where the scanner does", () => {
    expect(asciiWordEnd("hello, world", 0)).toBe(5);
    expect(asciiWordEnd("hello, world", 6)).toBe(12);
    expect(asciiWordEnd("(word) x", 0)).toBe(5);
    expect(asciiWordEnd("\tTab", 0)).toBe(4);
    expect(asciiWordEnd("a", 0)).toBe(1);
  });

  it("leaves every other piece to the scanner", () => {
    // A contraction goes first; digits, newlines and non-ASCII letters are not its pieces.
    for (const [text, i] of [["'s", 0], ["'hello", 0], [" 12", 0], ["12", 0], ["\nabc", 0], ["\rabc", 0], ["héllo", 0], [" é", 0], ["日本", 0], ["  a", 0], [", ", 0], [" ", 0], ["x ", 1]] as const) {
      expect(asciiWordEnd(text, i), JSON.stringify(text)).toBe(-1);
    }
  });

  it("agrees with pieceEnd at every piece start of seeded mixed text", () => {
    const rand = mulberry32(37);
    const alphabet = ["a", "Z", "q", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'LL", "7", ",", ".", "-", "é", "ß", "中", "😀", "\u00a0", "ſ", "_"];
    let words = 0;
    for (let t = 0; t < 2000; t++) {
      const text = Array.from({ length: 1 + Math.floor(rand() * 30) }, () => alphabet[Math.floor(rand() * alphabet.length)]).join("");
      for (let i = 0; i < text.length; ) {
        const end = scanner.pieceEnd(text, i);
        const word = asciiWordEnd(text, i);
        if (word >= 0) {
          expect(word, JSON.stringify([text, i])).toBe(end);
          words++;
        }
        i = end;
      }
    }
    expect(words).toBeGreaterThan(2000);
  });
});

describe("hashAscii", () => {
  it("is hashBytes of the span's UTF-8", () => {
    const utf8 = new TextEncoder();
    for (const s of ["", "a", " hello", "The quick brown fox", "x".repeat(24), "~!@#$%^&*()"]) {
      const b = utf8.encode(`..${s}..`);
      expect(hashAscii(`..${s}..`, 2, 2 + s.length)).toBe(hashBytes(b, 2, 2 + s.length));
    }
  });
});
