import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { RadixIndex } from "../../../src/block-index/radix-index.ts";
import { ShardedIndex } from "../../../src/block-index/sharded-index.ts";

const hex = (l: number) => l.toString(16).padStart(16, "0");

/** The rule as the relay's block set states it, on the wire strings: first defect in block order. */
function reference(parent: string | null, hs: readonly string[]): "self_parent" | "duplicate_in_event" | null {
  const seen = new Set<string>();
  for (const h of hs) {
    if (h === parent) return "self_parent";
    if (seen.has(h)) return "duplicate_in_event";
    seen.add(h);
  }
  return null;
}

describe("RadixIndex.applyStoredEvent (a relay stored event, void when a block is its own ancestor)", () => {
  // Engine hashes drawn from a small pool so repeats and parent hits are common; lengths cross the
  // short (pairwise, ≤ 24 blocks) and long (hash table) paths of the check, half the events each
  // (size "max": fast-check's default size keeps arrays to ~10 elements, never the long path).
  const engineHash = fc.integer({ min: 1, max: 400 }).map(String);
  const event = fc.record({
    parent: fc.option(engineHash, { nil: null }),
    hs: fc.oneof(fc.array(engineHash, { minLength: 1, maxLength: 24, size: "max" }), fc.array(engineHash, { minLength: 25, maxLength: 120, size: "max" })),
  });

  it("voids exactly the events the string rule voids, with the same reason, and applies the rest", () => {
    fc.assert(
      fc.property(event, ({ parent, hs }) => {
        for (const ix of [new RadixIndex(), new ShardedIndex(3)]) {
          ix.ensureWorker(0);
          if (parent !== null) expect(ix.applyStoredWire(0, null, [{ h: parent, l: hex(9999) }]).ok).toBe(true);
          const before = ix.workerBlockCount(0);
          const r = ix.applyStoredEvent(0, parent, hs.map((h, i) => ({ h, l: hex(i + 1) })));
          const want = reference(parent, hs);
          if (want) {
            expect(r).toEqual({ ok: false, applied: 0, voided: want });
            expect(ix.workerBlockCount(0)).toBe(before);
          } else expect(r).toEqual({ ok: true, applied: hs.length });
        }
      }),
      { numRuns: 400 },
    );
  });

  it("treats the 64-bit value, not its spelling, as the block's identity (as the index keys blocks)", () => {
    const ix = new RadixIndex();
    ix.ensureWorker(0);
    // Both paths of the check: a short event and one past the pairwise limit.
    for (const n of [5, 40]) {
      const blocks = Array.from({ length: n }, (_, i) => ({ h: String(1000 + i), l: hex(i + 1) }));
      blocks[n - 1] = { h: "01000", l: hex(n) }; // the decimal spelling of block 0's hash with a leading zero
      expect(ix.applyStoredEvent(0, null, blocks)).toEqual({ ok: false, applied: 0, voided: "duplicate_in_event" });
    }
  });
});
