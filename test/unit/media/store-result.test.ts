/**
 * The guard of store-result.ts fastStoreResult: for every answer it accepts, its result is exactly
 * StoreResultSchema's (deep and strictly equal, same key order); every answer the schema refuses
 * it declines. Generated answers: valid, near-valid (one member off) and hostile.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { MAX_URL_FRESH_SEC, StoreResultSchema } from "../../../src/media/store-result.ts";
import { compilesDuring, modulesUnderZodMode, ZOD_MODES } from "../../helpers/zod-compiles.ts";

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
/** Values valid and invalid for the answer's keys (counts at the bounds, digests, kinds, objects). */
const EXTRA_VALUES: readonly unknown[] = [null, 0, 7, -1, 1.5, 86_400_000, 86_400_001, "", "x", "png", "image", "video", DIGEST, [], {}, { width: 1, height: 1, format: "png" }, { frames: 1 }];
/**
 * An extra member, maybe not enumerable (zod still reads a schema key so defined): a key of the
 * answer's or its image's schema (so a key the schema gains is sent at once), or a stranger.
 */
const extra = fc.record({
  key: fc.constantFrom(...Object.keys(StoreResultSchema.shape), ...Object.keys(StoreResultSchema.shape.image.unwrap().shape), "__proto__", "extra", "Digest"),
  value: fc.oneof(fc.constantFrom(...EXTRA_VALUES), fc.anything()),
  enumerable: fc.oneof({ arbitrary: fc.constant(true), weight: 3 }, fc.constant(false)),
});
const answer = fc
  .tuple(
    fc.oneof({ arbitrary: fc.constant(DIGEST), weight: 6 }, fc.constantFrom(DIGEST.toUpperCase(), DIGEST.slice(1), `${DIGEST}0`, "", 5)),
    count,
    fc.oneof({ arbitrary: fc.constant("image"), weight: 6 }, fc.constantFrom("video", "Image", undefined)),
    fc.oneof({ arbitrary: image, weight: 6 }, fc.constantFrom(null, undefined, [], "png")),
    fc.oneof({ arbitrary: fc.constant(null), weight: 6 }, fc.constantFrom(undefined, {}, { frames: 1 })),
    fc.oneof({ arbitrary: fc.constant(undefined), weight: 2 }, count),
    fc.oneof({ arbitrary: fc.constant(undefined), weight: 2 }, count),
    rarely(extra),
  )
  .map(([digest, byteLength, kind, img, probe, leaseMs, freshMs, e]) => {
    const o = members({ digest, byteLength, kind, image: img, probe, leaseMs, freshMs });
    if (e) Object.defineProperty(o, e.key, { value: e.value, enumerable: e.enumerable, writable: true, configurable: true });
    return o;
  });

describe.each(ZOD_MODES)("fastStoreResult mirrors StoreResultSchema, zod %s", (_name, jitless) => {
  const loaded = modulesUnderZodMode(jitless, () => import("../../../src/media/store-result.ts"));
  let m: typeof import("../../../src/media/store-result.ts");
  beforeAll(() => {
    m = loaded();
  });

  function agrees(v: unknown): boolean {
    const fast = m.fastStoreResult(v);
    if (fast === null) return false;
    const zod = m.StoreResultSchema.safeParse(v);
    expect(zod.success).toBe(true);
    expect(fast).toStrictEqual(zod.data);
    expect(JSON.stringify(fast)).toBe(JSON.stringify(zod.data));
    return true;
  }
  const fastStoreResult = (v: unknown) => m.fastStoreResult(v);

  it("answers exactly the schema's output for every answer it accepts, and declines every answer the schema refuses", () => {
    let accepted = 0;
    const compiles = compilesDuring(() =>
      fc.assert(
        fc.property(fc.oneof({ arbitrary: answer, weight: 6 }, fc.anything()), (v) => {
          if (agrees(v)) accepted++;
          if (agrees(JSON.parse(JSON.stringify(v) ?? "null"))) accepted++;
        }),
        { numRuns: 3000 },
      ),
    );
    expect(accepted).toBeGreaterThan(100);
    // zod ran as configured: compiled parsers or none at all.
    if (jitless) expect(compiles).toBe(0);
    else expect(compiles).toBeGreaterThan(0);
  });

  it("accepts a store's image answer and declines a video's", () => {
    const ok = { digest: DIGEST, byteLength: 10, kind: "image", image: { width: 2, height: 3, format: "png" }, probe: null, leaseMs: 600_000, freshMs: 0 };
    expect(agrees(ok)).toBe(true);
    expect(fastStoreResult({ ...ok, kind: "video", image: null, probe: { frames: 1 } })).toBeNull();
    expect(fastStoreResult({ ...ok, leaseMs: 86_400_001 })).toBeNull();
    const hidden = (o: object, key: string, value: unknown) => Object.defineProperty({ ...o }, key, { value, enumerable: false });
    expect(fastStoreResult(hidden(ok, "freshMs", MAX_URL_FRESH_SEC * 1000 + 1))).toBeNull();
    expect(agrees(hidden(ok, "leaseMs", 5))).toBe(true);
  });
});

describe("the schema fastStoreResult mirrors", () => {
  // A pin, not a property: it fails on any edit of StoreResultSchema (a key, a type, a bound, the
  // digest pattern) until store-result.ts fastStoreResult is reviewed against the edit. Re-check
  // that it still accepts only what the schema accepts (its key lists, DIGEST, the bounds of
  // leaseMs and freshMs) and that this file's value pools cover the new values, then update this.
  it("is as reviewed", () => {
    const { $schema: _, ...answer } = z.toJSONSchema(StoreResultSchema.omit({ probe: true }), { io: "input", unrepresentable: "any" });
    const count = { type: "integer", minimum: 0, maximum: 9007199254740991 };
    expect(answer).toStrictEqual({
      type: "object",
      properties: {
        digest: { type: "string", pattern: "^[0-9a-f]{64}$" },
        byteLength: count,
        kind: { type: "string", enum: ["image", "video"] },
        image: { anyOf: [{ type: "object", properties: { width: count, height: count, format: { type: "string" } }, required: ["width", "height", "format"] }, { type: "null" }] },
        leaseMs: { type: "integer", minimum: 0, maximum: 86_400_000 },
        freshMs: { type: "integer", minimum: 0, maximum: MAX_URL_FRESH_SEC * 1000 },
      },
      required: ["digest", "byteLength", "kind", "image"],
    });
    // The answer answered null for probe (an image's): any other probe is declined, whatever its shape.
    expect(Object.keys(StoreResultSchema.shape)).toStrictEqual(["digest", "byteLength", "kind", "image", "probe", "leaseMs", "freshMs"]);
  });
});
