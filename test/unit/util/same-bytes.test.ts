/**
 * sameBytes where the runtime has no timingSafeEqual (Node): the word-wise loop gives the
 * byte-wise verdict at aligned and unaligned view offsets, for a difference in any position.
 */
import { describe, expect, it } from "vitest";
import { sameBytes } from "../../../src/util/same-bytes.ts";

describe("sameBytes (JS fallback)", () => {
  it("has no runtime compare to use here", () => {
    expect((globalThis as { crypto?: { subtle?: { timingSafeEqual?: unknown } } }).crypto?.subtle?.timingSafeEqual).toBeUndefined();
  });

  for (const shift of [0, 1, 4]) {
    it(`answers byte for byte with views offset by ${shift}`, () => {
      const a = Uint8Array.from({ length: 10_007 }, (_, i) => (i * 31 + 7) & 0xff);
      const b = new Uint8Array(a.length + shift);
      b.set(a, shift);
      const view = b.subarray(shift);
      expect(sameBytes(a, view)).toBe(true);
      for (const at of [0, 1, 2, 3, 4096, a.length - 4, a.length - 1]) {
        view[at] = view[at]! ^ 0x01;
        expect(sameBytes(a, view)).toBe(false);
        view[at] = view[at]! ^ 0x01;
      }
      expect(sameBytes(a, view.subarray(0, a.length - 1))).toBe(false);
    });
  }
});
