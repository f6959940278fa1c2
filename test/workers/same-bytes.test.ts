/**
 * sameBytes in workerd: the native `crypto.subtle.timingSafeEqual` is there (the held-body compare
 * of a 100k-token history would otherwise be a JS loop), and its verdicts are the byte-wise ones,
 * at any offset of the views and for a difference in any position.
 */
import { describe, expect, it } from "vitest";
import { sameBytes } from "../../src/util/same-bytes.ts";

describe("sameBytes in workerd", () => {
  it("uses the runtime's timingSafeEqual", () => {
    expect(typeof (crypto.subtle as unknown as { timingSafeEqual?: unknown }).timingSafeEqual).toBe("function");
  });

  it("answers byte for byte", () => {
    const a = Uint8Array.from({ length: 433_001 }, (_, i) => (i * 31 + 7) & 0xff);
    const b = new Uint8Array(a.length + 3);
    b.set(a, 3);
    const view = b.subarray(3);
    expect(sameBytes(a, view)).toBe(true);
    for (const at of [0, 1, 4095, 200_000, a.length - 1]) {
      view[at] = view[at]! ^ 0x40;
      expect(sameBytes(a, view)).toBe(false);
      view[at] = view[at]! ^ 0x40;
    }
    expect(sameBytes(a, view.subarray(0, a.length - 1))).toBe(false);
    expect(sameBytes(new Uint8Array(0), new Uint8Array(0))).toBe(true);
  });
});
