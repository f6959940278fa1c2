/**
 * The guard of store-result.ts fastStoreResult: for every answer it accepts, its result is exactly
 * StoreResultSchema's (deep and strictly equal, same key order); every answer the schema refuses
 * it declines. Generated answers: valid, near-valid (one member off) and hostile.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { fastStoreResult, MAX_URL_FRESH_SEC, StoreResultSchema } from "../../../src/media/store-result.ts";

const DIGEST = "0123456789abcdef".repeat(4);
const count = fc.oneof(
  { arbitrary: fc.integer({ min: 0, max: 5000 }), weight: 6 },
  fc.constantFrom(-1, -0, 1.5, Number.NaN, Infinity, 2 ** 53, 86_400_000, 86_400_001, MAX_URL_FRESH_SEC * 1000, MAX_URL_FRESH_SEC * 1000 + 1, "7", null),
);
/** Mostly left out (undefined), sometimes a value. */
function rarely<T>(arb: fc.Arbitrary<T>) {
  return fc.oneof({ arbitrary: fc.constant(undefined), weight: 4 }, { arbitrary: arb, weight: 1 });
}
function members(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
const image = fc
  .tuple(count, count, fc.oneof({ arbitrary: fc.constantFrom("png", "jpeg", ""), weight: 6 }, fc.constantFrom(1, null)), rarely(fc.constantFrom("extra", 1)))
  .map(([width, height, format, extra]) => members({ width, height, format, extra }));
const answer = fc
  .tuple(
    fc.oneof({ arbitrary: fc.constant(DIGEST), weight: 6 }, fc.constantFrom(DIGEST.toUpperCase(), DIGEST.slice(1), `${DIGEST}0`, "", 5)),
    count,
    fc.oneof({ arbitrary: fc.constant("image"), weight: 6 }, fc.constantFrom("video", "Image", undefined)),
    fc.oneof({ arbitrary: image, weight: 6 }, fc.constantFrom(null, undefined, [], "png")),
    fc.oneof({ arbitrary: fc.constant(null), weight: 6 }, fc.constantFrom(undefined, {}, { frames: 1 })),
    fc.oneof({ arbitrary: fc.constant(undefined), weight: 2 }, count),
    fc.oneof({ arbitrary: fc.constant(undefined), weight: 2 }, count),
    rarely(fc.tuple(fc.constantFrom("__proto__", "extra", "Digest"), fc.anything())),
  )
  .map(([digest, byteLength, kind, img, probe, leaseMs, freshMs, extra]) => {
    const o = members({ digest, byteLength, kind, image: img, probe, leaseMs, freshMs });
    if (extra) Object.defineProperty(o, extra[0], { value: extra[1], enumerable: true, writable: true, configurable: true });
    return o;
  });

function agrees(v: unknown): boolean {
  const fast = fastStoreResult(v);
  if (fast === null) return false;
  const zod = StoreResultSchema.safeParse(v);
  expect(zod.success).toBe(true);
  expect(fast).toStrictEqual(zod.data);
  expect(JSON.stringify(fast)).toBe(JSON.stringify(zod.data));
  return true;
}

describe("fastStoreResult mirrors StoreResultSchema", () => {
  it("answers exactly the schema's output for every answer it accepts, and declines every answer the schema refuses", () => {
    let accepted = 0;
    fc.assert(
      fc.property(fc.oneof({ arbitrary: answer, weight: 6 }, fc.anything()), (v) => {
        if (agrees(v)) accepted++;
        if (agrees(JSON.parse(JSON.stringify(v) ?? "null"))) accepted++;
      }),
      { numRuns: 3000 },
    );
    expect(accepted).toBeGreaterThan(100);
  });

  it("accepts a store's image answer and declines a video's", () => {
    const ok = { digest: DIGEST, byteLength: 10, kind: "image", image: { width: 2, height: 3, format: "png" }, probe: null, leaseMs: 600_000, freshMs: 0 };
    expect(agrees(ok)).toBe(true);
    expect(fastStoreResult({ ...ok, kind: "video", image: null, probe: { frames: 1 } })).toBeNull();
    expect(fastStoreResult({ ...ok, leaseMs: 86_400_001 })).toBeNull();
  });
});
