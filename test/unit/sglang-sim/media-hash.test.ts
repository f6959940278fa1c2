import { describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { contentHash, contentPadValue, sha256Of } from "../../../services/sglang-sim/media-hash.ts";
import { initHashing, sha256 } from "../../../src/util/hash.ts";

describe("contentHash (SGLang hash_feature stand-in)", () => {
  it("is the first 8 bytes of the SHA-256, big-endian", () => {
    // FIPS 180-2 test vector: SHA-256("abc") = ba7816bf 8f01cfea 414140de ...
    expect(contentHash(new TextEncoder().encode("abc"))).toBe(0xba7816bf8f01cfean);
    expect(contentPadValue(new TextEncoder().encode("abc"))).toBe(1_000_000 + Number(0xba7816bf8f01cfean % 2n ** 30n));
  });

  it("agrees with the edge's SHA-256 on bytes of every length up to a few blocks and on a large item", async () => {
    await initHashing();
    let seed = 11;
    const next = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 24);
    const sizes = [...Array.from({ length: 200 }, (_, i) => i), 4096, 1 << 20];
    for (const n of sizes) {
      const bytes = Uint8Array.from({ length: n }, next);
      const d = sha256(bytes);
      let want = 0n;
      for (let i = 0; i < 8; i++) want = (want << 8n) | BigInt(d[i]!);
      expect(contentHash(bytes)).toBe(want);
    }
  });

  it("hashes an item's bytes once: the loader's record and the pad value share the digest", () => {
    const bytes = Uint8Array.from({ length: 5000 }, (_, i) => (i * 7) & 255);
    const d = sha256Of(bytes);
    expect(d.toString("hex")).toBe(createHash("sha256").update(bytes).digest("hex"));
    expect(sha256Of(bytes)).toBe(d);
    expect(sha256Of(bytes.slice())).not.toBe(d);
    expect(sha256Of(bytes.slice())).toEqual(d);
  });
});
