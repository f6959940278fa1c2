// bytesToBase64url equals Node's base64url encoding (no padding) for any bytes.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { bytesToBase64url } from "../../../src/util/base64url.ts";

describe("bytesToBase64url", () => {
  it("equals Buffer's base64url for any bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), (bytes) => {
        expect(bytesToBase64url(bytes)).toBe(Buffer.from(bytes).toString("base64url"));
      }),
      { numRuns: 1000 },
    );
    expect(bytesToBase64url(new Uint8Array([0xfb, 0xff]))).toBe("-_8");
  });
});
