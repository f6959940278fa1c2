// stripTrailing equals the trailing-run regex it replaced, in work linear in the run (counted).
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { stripTrailing } from "../../../src/util/strip-trailing.ts";

const escapeRegex = (c: string): string => c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

describe("stripTrailing", () => {
  it("equals s.replace(/c+$/, '') for any string and character", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom("a", "/", ".", "=", "\\"), { maxLength: 30 }), fc.constantFrom("/", ".", "=", "\\"), (chars, c) => {
        const s = chars.join("");
        expect(stripTrailing(s, c)).toBe(s.replace(new RegExp(`${escapeRegex(c)}+$`), ""));
      }),
      { numRuns: 2000 },
    );
  });

  it("a long run that does not reach the end is not scanned (the regex backtracked over it quadratically)", () => {
    const path = "/" + "/".repeat(100_000) + "x";
    const reads = vi.spyOn(String.prototype, "charCodeAt");
    try {
      expect(stripTrailing(path, "/")).toBe(path);
      expect(stripTrailing("/a///", "/")).toBe("/a");
    } finally {
      expect(reads.mock.calls.length).toBeLessThanOrEqual(1 + 2 + 4);
      reads.mockRestore();
    }
  });
});
