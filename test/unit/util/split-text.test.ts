/**
 * SplitText reads its pieces as the joined text reads: every slice, character, region, match and
 * blank test over random splits (empty pieces, surrogate pairs cut at a boundary) equals the
 * joined string's, and a read inside one piece is that piece's own string.
 */
import { describe, expect, it } from "vitest";
import { SplitText } from "../../../src/util/split-text.ts";

describe("SplitText", () => {
  it("slices, characters, regions, matches and blankness equal the joined text's", () => {
    let x = 7;
    const rand = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const alphabet = ["a", " ", "é", "😀", "\n", "{", "}", '"'];
    const word = (n: number) => Array.from({ length: n }, () => alphabet[rand(alphabet.length)]).join("");
    for (let round = 0; round < 200; round++) {
      const head = word(rand(6));
      const gap = Array.from({ length: rand(4) }, () => word(rand(8)));
      const rest = word(rand(6));
      const s = new SplitText(head, gap, rest);
      const whole = head + gap.join("") + rest;
      expect(s.length).toBe(whole.length);
      expect(s.joined).toBe(whole);
      expect(s.blank()).toBe(whole.trim() === "");
      for (let a = 0; a <= whole.length; a++) {
        if (a < whole.length) expect(s.charCodeAt(a)).toBe(whole.charCodeAt(a));
        for (let b = a; b <= whole.length + 1; b++) {
          expect(s.slice(a, b)).toBe(whole.slice(a, b));
          const r = s.region(a, Math.min(b, whole.length));
          expect(r.text.slice(a - r.at, Math.min(b, whole.length) - r.at)).toBe(whole.slice(a, b));
          const piece = whole.slice(a, b);
          expect(s.matches(a, piece)).toBe(whole.substring(a, a + piece.length) === piece);
          expect(s.matches(a, piece + "x")).toBe(whole.substring(a, a + piece.length + 1) === piece + "x");
        }
      }
      expect(s.outside()).toBe(head + rest);
    }
  });

  it("matches a gap piece's own string at every position as the joined text compares it", () => {
    // The held-piece shortcut answers only where the piece itself starts; any other place is compared.
    let x = 11;
    const rand = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const alphabet = ["a", "b", "é", "😀"];
    const word = (n: number) => Array.from({ length: n }, () => alphabet[rand(alphabet.length)]).join("");
    let shortcut = 0;
    for (let round = 0; round < 300; round++) {
      const gap = Array.from({ length: 1 + rand(4) }, () => word(rand(4)));
      const s = new SplitText(word(rand(4)), gap, word(rand(4)));
      const whole = s.head + gap.join("") + s.rest;
      for (const g of gap) {
        for (let a = 0; a <= whole.length; a++) {
          expect(s.matches(a, g), `${JSON.stringify(g)} at ${a} of ${JSON.stringify([s.head, gap, s.rest])}`).toBe(whole.substring(a, a + g.length) === g);
          if (a >= s.gapStart && a < s.gapEnd) shortcut++;
        }
      }
    }
    expect(shortcut, "positions inside the gap were asked").toBeGreaterThan(1000);
  });

  it("a range inside one gap piece is read in that piece, never joined", () => {
    const s = new SplitText("{[", ["first", "second"], "]}");
    expect(s.region(2, 7)).toEqual({ text: "first", at: 2 });
    expect(s.region(8, 10)).toEqual({ text: "second", at: 7 });
    expect(s.region(13, 15)).toEqual({ text: "]}", at: 13 });
    expect(s.region(5, 9)).toEqual({ text: "stse", at: 5 });
    expect(SplitText.of("abc").joined).toBe("abc");
  });
});
