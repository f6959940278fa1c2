/** Constant-time equality (src/util/constant-time.ts): equal exactly when the UTF-8 bytes are. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { timingSafeEqualBytes, timingSafeEqualString } from "../../../src/util/constant-time.ts";

describe("timingSafeEqual", () => {
  it("bytes: equal exactly when length and every byte are", () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 40 }), fc.uint8Array({ maxLength: 40 }), (a, b) => {
      expect(timingSafeEqualBytes(a, b)).toBe(Buffer.from(a).equals(Buffer.from(b)));
      expect(timingSafeEqualBytes(a, a.slice())).toBe(true);
    }));
    // A prefix, and a tail of zeros (out of range reads as 0: the length difference decides).
    expect(timingSafeEqualBytes(new Uint8Array([1, 2]), new Uint8Array([1, 2, 0]))).toBe(false);
  });

  it("strings: equal exactly when their UTF-8 encodings are", () => {
    fc.assert(fc.property(fc.string({ unit: "binary", maxLength: 12 }), fc.string({ unit: "binary", maxLength: 12 }), (a, b) => {
      expect(timingSafeEqualString(a, b)).toBe(Buffer.from(a, "utf8").equals(Buffer.from(b, "utf8")));
    }));
    expect(timingSafeEqualString("\uD800", "\uDBFF")).toBe(true);
  });
});
