/**
 * xxh3Words against hash-wasm's XXH3-64 (the oracle, a build of the reference C code): every input
 * length it takes (5–32 little-endian words), random and extreme words, the seeds the router uses
 * and random 64-bit ones; and block hashes through it equal the byte path's.
 */
import fc from "fast-check";
import { createXXHash3 } from "hash-wasm";
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { XXH3_WORDS_MAX, XXH3_WORDS_MIN, xxh3Flips16, xxh3Keys, xxh3Of16Bytes, xxh3Words } from "../../../src/blocks/xxh3-words.ts";
import { initHashing, xxh3_64 } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

function bytesOf(words: readonly number[]): Uint8Array {
  const b = new Uint8Array(words.length * 4);
  const v = new DataView(b.buffer);
  words.forEach((w, i) => v.setUint32(i * 4, w >>> 0, true));
  return b;
}

function ours(words: readonly number[], seed: bigint): bigint {
  const out = new Uint32Array(2);
  xxh3Words(words, 0, words.length, xxh3Keys(seed), out, 0);
  return (BigInt(out[1]!) << 32n) | BigInt(out[0]!);
}

const word = fc.oneof(fc.constantFrom(0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 151_642), fc.integer({ min: 0, max: 0xffffffff }));

describe("xxh3Words", () => {
  it("equals hash-wasm's XXH3-64 for every length from 17 to 128 bytes, seeds 0 and 1337", () => {
    fc.assert(
      // size "max": the default size stopped at 20 words (80 bytes), short of the 97-128-byte lane pairs.
      fc.property(fc.array(word, { minLength: XXH3_WORDS_MIN, maxLength: XXH3_WORDS_MAX, size: "max" }), fc.constantFrom(0n, 1337n), (words, seed) => {
        expect(ours(words, seed)).toBe(xxh3_64(bytesOf(words), seed));
      }),
      { numRuns: 3000, seed: 64 },
    );
  });

  it("equals hash-wasm's XXH3-64 under random 64-bit seeds", async () => {
    const cases = fc.sample(fc.tuple(fc.array(word, { minLength: XXH3_WORDS_MIN, maxLength: XXH3_WORDS_MAX, size: "max" }), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })), { numRuns: 300, seed: 7 });
    for (const [words, seed] of cases) {
      const h = await createXXHash3(Number(seed & 0xffffffffn), Number(seed >> 32n));
      h.init();
      h.update(bytesOf(words));
      expect(ours(words, seed)).toBe(BigInt(`0x${h.digest("hex")}`));
    }
  });

  it("xxh3Of16Bytes equals hash-wasm's XXH3-64 of the 16 bytes, seeds 0, 1337 and random 64-bit ones", async () => {
    const of16 = (w: readonly number[], seed: bigint): bigint => {
      const out = new Uint32Array(2);
      xxh3Of16Bytes(w[0]!, w[1]!, w[2]!, w[3]!, xxh3Flips16(seed), out, 0);
      return (BigInt(out[1]!) << 32n) | BigInt(out[0]!);
    };
    const four = fc.array(word, { minLength: 4, maxLength: 4 });
    fc.assert(
      fc.property(four, fc.constantFrom(0n, 1337n), (w, seed) => {
        expect(of16(w, seed)).toBe(xxh3_64(bytesOf(w), seed));
      }),
      { numRuns: 3000, seed: 16 },
    );
    for (const [w, seed] of fc.sample(fc.tuple(four, fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })), { numRuns: 300, seed: 17 })) {
      const h = await createXXHash3(Number(seed & 0xffffffffn), Number(seed >> 32n));
      h.init();
      h.update(bytesOf(w));
      expect(of16(w, seed)).toBe(BigInt(`0x${h.digest("hex")}`));
    }
  });

  it("stays exact where a 32×32-bit product's low word is near 2^32 (the double product rounds across it)", () => {
    // 0xfffffffd · 0xaaaaaaab has low word 0xffffffff: its double rounds up to the next multiple of
    // 2^32, so a high word read off the double alone is one too large. Pairs at the extremes besides.
    const pairs = [
      [0xfffffffd, 0xaaaaaaab],
      [0xffffffff, 0xffffffff],
      [0x80000000, 0x80000001],
      [0x7fffffff, 0xffffffff],
      [0xffffffff, 0],
    ] as const;
    const keys = xxh3Keys(1337n);
    for (let count = XXH3_WORDS_MIN; count <= XXH3_WORDS_MAX; count++) {
      for (const [x, y] of pairs) {
        // XORed with lane 0's key words, lane 0's operands are a = (y:x) and b = (y:x): all four
        // partial products are x·x, x·y, y·x and y·y.
        const words = Array.from({ length: count }, (_, i) => ((i % 2 === 0 ? x : y) ^ keys[i % 4]!) >>> 0);
        expect(ours(words, 1337n)).toBe(xxh3_64(bytesOf(words), 1337n));
      }
    }
  });

  it("gives block hashes equal to the byte path's, a word window anywhere in an array", () => {
    const tokens = Array.from({ length: 4096 }, (_, i) => (i * 2654435761) >>> 8);
    const blocks = localBlockHashes(tokens, 16);
    expect(blocks).toHaveLength(256);
    blocks.forEach((h, b) => expect(h).toBe(xxh3_64(bytesOf(tokens.slice(16 * b, 16 * b + 16)), 1337n)));
    const out = new Uint32Array(4);
    xxh3Words(tokens, 32, 16, xxh3Keys(1337n), out, 2);
    expect((BigInt(out[3]!) << 32n) | BigInt(out[2]!)).toBe(blocks[2]);
    // Block sizes outside 5–32 tokens go through hash-wasm's bytes: still the same hash.
    for (const size of [1, 4, 33, 64]) expect(localBlockHashes(tokens.slice(0, size), size)[0]).toBe(xxh3_64(bytesOf(tokens.slice(0, size)), 1337n));
  });
});
