/**
 * The edge's block hashes (localBlockHashes, and its many-part form used by the prompt-prefix
 * cache) equal the relay's per-block hash of the same tokens, for any split into parts.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { LOCAL_HASH_SEED, localBlockHash, localBlockHashes, localBlockHashesOfParts, namespacedLocalHash, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { initHashing, xxh3_64 } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

describe("local block hashes", () => {
  it("every full block hashes as the relay hashes it; partial tails are ignored; parts do not matter", () => {
    fc.assert(
      // size "max": the default size keeps tokens to ~10, so few runs had even one full block of up to 40.
      fc.property(fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { maxLength: 200, size: "max" }), fc.integer({ min: 1, max: 40 }), fc.array(fc.nat(), { maxLength: 5 }), (tokens, blockSize, cuts) => {
        const expected: bigint[] = [];
        for (let b = 0; (b + 1) * blockSize <= tokens.length; b++) expected.push(localBlockHash(tokens.slice(b * blockSize, (b + 1) * blockSize)));
        expect(localBlockHashes(tokens, blockSize)).toEqual(expected);
        const at = [...new Set(cuts.map((c) => c % (tokens.length + 1)))].sort((a, b) => a - b);
        const parts = [0, ...at, tokens.length].slice(1).map((end, i, ends) => tokens.slice(i === 0 ? 0 : ends[i - 1]!, end));
        expect(localBlockHashesOfParts(parts, blockSize)).toEqual(expected);
      }),
      { numRuns: 200 },
    );
    expect(() => localBlockHashes([1, 2], 0)).toThrow(RangeError);
  });

  it("namespaced blocks (cache_salt) agree between edge and relay and never equal another namespace's", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { minLength: 4, maxLength: 64 }), fc.string({ maxLength: 20 }), fc.string({ maxLength: 20 }), (tokens, a, b) => {
        const ta = namespaceTag(a);
        const plain = localBlockHashes(tokens, 4);
        const salted = namespacedLocalHashes(plain, ta);
        for (let k = 0; k < salted.length; k++) expect(namespacedLocalHash(localBlockHash(tokens.slice(4 * k, 4 * k + 4)), ta)).toBe(salted[k]);
        for (const h of salted) expect(plain).not.toContain(h);
        if (a !== b) for (const h of namespacedLocalHashes(plain, namespaceTag(b))) expect(salted).not.toContain(h);
      }),
      { numRuns: 100 },
    );
    expect(namespaceTag(null)).toBeNull();
    expect(namespacedLocalHashes(localBlockHashes([1, 2, 3, 4], 4), null)).toEqual(localBlockHashes([1, 2, 3, 4], 4));
  });

  it("a namespaced hash is hash-wasm's XXH3-64 (seed 1337) of the namespace tag and the plain hash (u64 LE)", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.string({ maxLength: 20 }), (plain, name) => {
        const tag = namespaceTag(name)!;
        const bytes = new Uint8Array(16);
        bytes.set(tag, 0);
        new DataView(bytes.buffer).setBigUint64(8, plain, true);
        expect(namespacedLocalHash(plain, tag)).toBe(xxh3_64(bytes, LOCAL_HASH_SEED));
      }),
      { numRuns: 2000 },
    );
  });
});
