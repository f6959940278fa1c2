/**
 * parseRelayMessage against zod (RelayMessageSchema, the definition): for random relay messages,
 * valid and mutated, the direct check never accepts what zod refuses and returns what zod returns;
 * well-formed events and dumps take the direct path; everything else gets zod's own verdict.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseRelayMessage } from "../../../src/relay-wire/relay-message.ts";
import { IndexToRelaySchema, RelayMessageSchema } from "../../../src/relay-wire/relay-protocol.ts";

// Mostly valid values, so that whole messages are often valid but for one detail.
const engineHash = fc.oneof(
  { weight: 9, arbitrary: fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }).map(String) },
  { weight: 1, arbitrary: fc.constantFrom("0", "-0", "00", "123456789012345678901", "1e3", " 1", "", "x") },
);
const localHash = fc.oneof(
  { weight: 9, arbitrary: fc.bigUint64Array({ minLength: 1, maxLength: 1 }).map((a) => a[0]!.toString(16).padStart(16, "0")) },
  { weight: 1, arbitrary: fc.constantFrom("ABCDEF0123456789", "0123", "0123456789abcdef0", "0123456789abcdeg") },
);
const count = fc.oneof({ weight: 4, arbitrary: fc.nat(1000) }, { weight: 2, arbitrary: fc.constantFrom(-2, -1, 0, 1.5, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, -0, "1", null) });
/** The schema's keys (optional ones half the time), and one time in ten a key it does not have (zod drops it; the direct path must not accept it). */
const opt = <T extends Record<string, fc.Arbitrary<unknown>>>(shape: T, required: (keyof T)[]) =>
  fc.tuple(fc.record(shape, { requiredKeys: required as never }), fc.integer({ min: 0, max: 9 })).map(([o, roll]) => (roll === 0 ? { ...o, extra: 1 } : o));

const stored = opt({ t: fc.constant("stored"), parent: fc.option(engineHash, { nil: null }), blocks: fc.array(opt({ h: engineHash, l: localHash }, ["h", "l"]), { maxLength: 5 }) }, ["t", "parent", "blocks"]);
const removed = opt({ t: fc.constant("removed"), hashes: fc.array(engineHash, { maxLength: 4 }), moved: fc.constantFrom(true, true, false, "yes") }, ["t", "hashes"]);
const event = fc.oneof({ weight: 4, arbitrary: stored }, { weight: 2, arbitrary: removed }, { weight: 1, arbitrary: opt({ t: fc.constant("cleared") }, ["t"]) }, { weight: 1, arbitrary: fc.constant({ t: "other" }) });
const events = opt({ type: fc.constant("events"), epoch: count, seq: count, events: fc.array(event, { maxLength: 4 }) }, ["type", "epoch", "seq", "events"]);
const dump = opt(
  { type: fc.constant("dump"), epoch: count, seq: count, blocks: fc.array(opt({ h: engineHash, p: fc.option(engineHash, { nil: null }), l: localHash }, ["h", "p", "l"]), { maxLength: 5 }), approximate: fc.oneof(fc.boolean(), fc.constant("yes")), continues: count },
  ["type", "epoch", "seq", "blocks"],
);
const ping = fc.record({ type: fc.constant("ping"), t: fc.integer() });

/** Mutations a sender could make: an extra key, a dropped key, a replaced value, somewhere in the tree. */
function mutate(v: unknown, path: number[], kind: number): unknown {
  if (path.length === 0 || v === null || typeof v !== "object") {
    if (kind === 0 && v !== null && typeof v === "object" && !Array.isArray(v)) return { ...v, extra: 1 };
    if (kind === 1 && v !== null && typeof v === "object" && !Array.isArray(v)) return Object.fromEntries(Object.entries(v).slice(1));
    return kind === 2 ? "?" : v;
  }
  const [i, ...rest] = path;
  if (Array.isArray(v)) return v.length === 0 ? v : v.map((x, k) => (k === i! % v.length ? mutate(x, rest, kind) : x));
  const keys = Object.keys(v);
  if (keys.length === 0) return v;
  const key = keys[i! % keys.length]!;
  return { ...v, [key]: mutate((v as Record<string, unknown>)[key], rest, kind) };
}

describe("parseRelayMessage", () => {
  it("agrees with zod on every message, and returns zod's data when it accepts", () => {
    const message = fc.tuple(fc.oneof(events, dump, ping), fc.array(fc.nat(8), { maxLength: 5 }), fc.nat(3)).map(([m, path, kind]) => (kind === 3 ? m : mutate(m, path, kind)));
    fc.assert(
      fc.property(message, (m) => {
        const raw = JSON.parse(JSON.stringify(m)) as unknown;
        const ours = parseRelayMessage(raw);
        const zods = RelayMessageSchema.safeParse(raw);
        expect(ours.success).toBe(zods.success);
        if (ours.success && zods.success) expect(ours.data).toEqual(zods.data);
        if (!ours.success && !zods.success) expect(ours.error.issues).toEqual(zods.error.issues);
      }),
      { numRuns: 5000, seed: 20261202 },
    );
  });

  it("takes the direct path for well-formed events and dumps (the same object back)", () => {
    const msgs = [
      { type: "events", epoch: 3, seq: 9, events: [{ t: "stored", parent: null, blocks: [{ h: "-42", l: "00000000000000ff" }] }, { t: "removed", hashes: ["7"] }, { t: "removed", hashes: ["8"], moved: true }, { t: "cleared" }] },
      { type: "dump", epoch: 0, seq: -1, blocks: [{ h: "1", p: null, l: "0123456789abcdef" }, { h: "2", p: "1", l: "fedcba9876543210" }] },
      { type: "dump", epoch: 1, seq: 4, blocks: [], approximate: true },
      { type: "dump", epoch: 1, seq: 4, blocks: [], continues: 3 },
      { type: "dump", epoch: 1, seq: 4, blocks: [], approximate: false, continues: 0 },
    ];
    for (const m of msgs) {
      const r = parseRelayMessage(m);
      expect(r.success && r.data).toBe(m);
      expect(RelayMessageSchema.safeParse(m).success).toBe(true);
    }
  });
});

describe("index welcome", () => {
  it("takes a DP rank's socket id built on a 128-char worker id", () => {
    const welcome = { type: "welcome", workerId: "w".repeat(128) + "#1023", epoch: 0, poolBlockSize: 16 };
    expect(IndexToRelaySchema.safeParse(welcome).success).toBe(true);
    expect(IndexToRelaySchema.safeParse({ ...welcome, workerId: "w".repeat(128) + "#10230" }).success).toBe(false);
  });
});
