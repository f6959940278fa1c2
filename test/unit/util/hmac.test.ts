// hmacSha256 against RFC 4231's test vectors and Node's own HMAC.
import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { bytesToHex } from "../../../src/util/hex.ts";
import { hmacSha256 } from "../../../src/util/hmac.ts";

describe("hmacSha256", () => {
  it("gives RFC 4231 test case 2's MAC", async () => {
    expect(bytesToHex(await hmacSha256("Jefe", "what do ya want for nothing?"))).toBe("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  });

  it("equals node:crypto's HMAC-SHA256 of the UTF-8 texts", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 80, unit: "grapheme" }), fc.string({ maxLength: 200, unit: "grapheme" }), async (secret, message) => {
        expect(bytesToHex(await hmacSha256(secret, message))).toBe(createHmac("sha256", secret).update(message).digest("hex"));
      }),
      { numRuns: 200 },
    );
  });
});
