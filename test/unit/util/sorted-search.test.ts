import { describe, expect, it } from "vitest";
import { lastAtOrBefore } from "../../../src/util/sorted-search.ts";

describe("lastAtOrBefore", () => {
  it("finds the last start at or before i, as a linear scan does", () => {
    const starts = [0, 3, 3, 7, 20];
    for (let i = 0; i < 25; i++) {
      let want = 0;
      for (let k = 0; k < starts.length; k++) if (starts[k]! <= i) want = k;
      expect(lastAtOrBefore(starts, i)).toBe(want);
    }
  });

  it("answers 0 for one start", () => {
    expect(lastAtOrBefore([0], 0)).toBe(0);
    expect(lastAtOrBefore([0], 99)).toBe(0);
  });
});
