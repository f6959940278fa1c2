import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { joinedTallies, type MessagesTally } from "../../../src/api/validate.ts";

/** The tallies joined two by two (what the turn chain's hit did per held entry before joinedTallies). */
function joinedPairwise(tallies: readonly MessagesTally[]): MessagesTally {
  const max = 1024;
  return tallies.slice(1).reduce((a, b) => {
    let urls: Pick<MessagesTally, "dataUrls" | "dataUrlsCut">;
    if (a.dataUrlsCut || b.dataUrls.length === 0) urls = { dataUrls: a.dataUrls, dataUrlsCut: a.dataUrlsCut || b.dataUrlsCut };
    else {
      const all = [...a.dataUrls, ...b.dataUrls];
      urls = { dataUrls: all.length > max ? all.slice(0, max) : all, dataUrlsCut: all.length > max || b.dataUrlsCut };
    }
    return {
      messages: a.messages + b.messages,
      values: a.values + b.values,
      depth: Math.max(a.depth, b.depth),
      ...urls,
      chars: a.chars + b.chars,
      maxChars: Math.max(a.maxChars, b.maxChars),
      media: a.media + b.media,
      maxParts: Math.max(a.maxParts, b.maxParts),
      maxUrlChars: Math.max(a.maxUrlChars, b.maxUrlChars),
    };
  }, tallies[0]!);
}

const small = fc.nat({ max: 1000 });
const tally: fc.Arbitrary<MessagesTally> = fc.record({
  messages: small,
  values: small,
  depth: fc.nat({ max: 20 }),
  // Long lists reach the cap in a few joins; most entries list none.
  dataUrls: fc.oneof(fc.constant([]), fc.array(small, { maxLength: 8 }), fc.array(small, { minLength: 300, maxLength: 700 })),
  dataUrlsCut: fc.oneof({ arbitrary: fc.constant(true), weight: 1 }, { arbitrary: fc.constant(false), weight: 5 }),
  chars: small,
  maxChars: small,
  media: small,
  maxParts: small,
  maxUrlChars: small,
});

describe("joinedTallies", () => {
  it("equals joining the tallies two by two, in order", () => {
    fc.assert(
      fc.property(fc.array(tally, { minLength: 1, maxLength: 12 }), (tallies) => {
        expect(joinedTallies(tallies)).toEqual(joinedPairwise(tallies));
      }),
      { numRuns: 500 },
    );
  });

  it("cuts the data URL list at 1024 and lists none after the cut", () => {
    const t = (urls: number, cut = false): MessagesTally => ({ messages: 1, values: 1, depth: 1, dataUrls: Array.from({ length: urls }, (_, i) => i), dataUrlsCut: cut, chars: 0, maxChars: 0, media: urls, maxParts: 1, maxUrlChars: 0 });
    const joined = joinedTallies([t(600), t(600), t(5)]);
    expect(joined.dataUrls.length).toBe(1024);
    expect(joined.dataUrlsCut).toBe(true);
    expect(joined.media).toBe(1205);
    // A cut entry ends the list: later URLs are not listed.
    const cutFirst = joinedTallies([t(3, true), t(4)]);
    expect(cutFirst.dataUrls).toEqual([0, 1, 2]);
    expect(cutFirst.dataUrlsCut).toBe(true);
    // The inputs are never changed.
    const a = t(2);
    joinedTallies([a, t(2)]);
    expect(a.dataUrls).toEqual([0, 1]);
  });
});
