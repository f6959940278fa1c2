/**
 * The relay's input side under a generated corpus: valid SGLang KV-event streams (prompts with
 * shared prefixes stored as chained pages, leaves evicted) interleaved with junk — wrong frame
 * counts, bad sequence frames, random bytes and non-batch msgpack as payloads, unknown event tags,
 * malformed events, wrong block sizes, self-referencing and repeated blocks, unknown parents,
 * removals of unknown blocks, non-GPU media. Decoding (src/engine-events/event-decode.ts) and the worker block
 * set (services/relay/tiered-block-set.ts) must count and drop every piece of junk and end with exactly
 * the block set of the valid stream alone.
 */
import { encode } from "@msgpack/msgpack";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { decodeKvEventMessage, encodeSeq } from "../../../src/engine-events/event-decode.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { TieredBlockSet } from "../../../services/relay/tiered-block-set.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import type { KvEvent } from "../../../services/sglang-sim/radix-cache.ts";

const B = 4;
const RUNS = Number(process.env.KVEDGE_FUZZ_RUNS ?? 300);
beforeAll(() => initHashing());

type Junk =
  | { t: "frame_count"; n: number }
  | { t: "bad_seq"; len: number }
  | { t: "random_payload"; bytes: Uint8Array }
  | { t: "not_a_batch"; value: unknown }
  | { t: "unknown_tag"; tag: string }
  | { t: "bad_event"; shape: number }
  | { t: "declared_block_size"; size: number; h: bigint }
  | { t: "short_block"; h: bigint }
  | { t: "self_parent"; pick: number }
  | { t: "repeated"; h: bigint }
  | { t: "unknown_parent"; parent: bigint; h: bigint }
  | { t: "removed_unknown"; h: bigint }
  | { t: "non_gpu"; h: bigint; medium: string };

type Step = { t: "store"; tokens: number[] } | { t: "evict"; pick: number } | { t: "junk"; junk: Junk };

/** Hashes no valid stream uses (valid engine hashes are SHA-256 derived; collisions are 2^-64). */
const junkHash = fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
const junkArb: fc.Arbitrary<Junk> = fc.oneof(
  fc.constantFrom(0, 1, 2, 4, 5).map((n) => ({ t: "frame_count" as const, n })),
  fc.constantFrom(0, 1, 4, 7, 9, 16).map((len) => ({ t: "bad_seq" as const, len })),
  fc.uint8Array({ minLength: 0, maxLength: 48 }).map((bytes) => ({ t: "random_payload" as const, bytes })),
  fc.oneof(fc.jsonValue({ maxDepth: 2 }).filter((v) => !Array.isArray(v)), fc.constant([1]), fc.constant([0, "events", 0])).map((value) => ({ t: "not_a_batch" as const, value })),
  fc.constantFrom("BlockEvicted", "blockstored", "", "AllBlocksClearedX").map((tag) => ({ t: "unknown_tag" as const, tag })),
  fc.integer({ min: 0, max: 4 }).map((shape) => ({ t: "bad_event" as const, shape })),
  fc.tuple(fc.constantFrom(1, 2, 8, 16), junkHash).map(([size, h]) => ({ t: "declared_block_size" as const, size, h })),
  junkHash.map((h) => ({ t: "short_block" as const, h })),
  fc.nat().map((pick) => ({ t: "self_parent" as const, pick })),
  junkHash.map((h) => ({ t: "repeated" as const, h })),
  fc.tuple(junkHash, junkHash).map(([parent, h]) => ({ t: "unknown_parent" as const, parent, h })),
  junkHash.map((h) => ({ t: "removed_unknown" as const, h })),
  fc.tuple(junkHash, fc.constantFrom("DISK", "EXTERNAL")).map(([h, medium]) => ({ t: "non_gpu" as const, h, medium })),
);

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: B, maxLength: 5 * B }).map((tokens) => ({ t: "store" as const, tokens })) },
  { weight: 1, arbitrary: fc.nat().map((pick) => ({ t: "evict" as const, pick })) },
  { weight: 3, arbitrary: junkArb.map((junk) => ({ t: "junk" as const, junk })) },
);

const enc = new TextEncoder();
const batch = (events: unknown[]): Uint8Array => encode([1.5, events, 0], { useBigInt64: true });
const toks = (n: number) => Array.from({ length: n }, (_, i) => 100 + i);

/** Frames for one junk item (the seq is always usable unless the junk is about frames/seq). */
function junkFrames(j: Junk, seq: bigint, known: bigint[]): Uint8Array[] {
  const topic = enc.encode("");
  const s = encodeSeq(Number(seq));
  switch (j.t) {
    case "frame_count":
      return Array.from({ length: j.n }, () => new Uint8Array(1));
    case "bad_seq":
      return [topic, new Uint8Array(j.len), batch([])];
    case "random_payload":
      return [topic, s, j.bytes];
    case "not_a_batch":
      return [topic, s, encode(j.value)];
    case "unknown_tag":
      return [topic, s, batch([[j.tag, [1], null, toks(B), B, null, "GPU"]])];
    case "bad_event":
      return [topic, s, batch([[["BlockStored", "h", null, toks(B), B], 42, { type: 7 }, ["BlockRemoved", "x"], ["BlockStored", [1], null, "tokens", B]][j.shape]])];
    case "declared_block_size":
      return [topic, s, batch([["BlockStored", [j.h], null, toks(B), j.size === B ? B * 2 : j.size, null, "GPU"]])];
    case "short_block":
      return [topic, s, batch([["BlockStored", [j.h], null, toks(B - 1), B, null, "GPU"]])];
    case "self_parent": {
      const h = known.length ? known[j.pick % known.length]! : 77n;
      return [topic, s, batch([["BlockStored", [h], h, toks(B), B, null, "GPU"]])];
    }
    case "repeated":
      return [topic, s, batch([["BlockStored", [j.h, j.h], null, toks(2 * B), B, null, "GPU"]])];
    case "unknown_parent":
      return [topic, s, batch([["BlockStored", [j.h], j.parent, toks(B), B, null, "GPU"]])];
    case "removed_unknown":
      return [topic, s, batch([["BlockRemoved", [j.h], "GPU"]])];
    case "non_gpu":
      return [topic, s, batch([["BlockStored", [j.h], null, toks(B), B, null, j.medium]])];
  }
}

/** Junk that must show up as at least one drop (random bytes may happen to be an empty batch). */
const mustDrop = (j: Junk): boolean => j.t !== "random_payload";

interface Model {
  parent: Map<bigint, bigint | null>;
}

/** The valid events for storing a prompt (new pages only) or evicting one leaf, applied to the model. */
function validEvents(step: Exclude<Step, { t: "junk" }>, m: Model): KvEvent[] {
  if (step.t === "store") {
    const tokens = step.tokens.slice(0, step.tokens.length - (step.tokens.length % B)); // whole pages only
    const { hashes } = engineBlockHashes(tokens, B);
    const out: KvEvent[] = [];
    hashes.forEach((h, i) => {
      if (m.parent.has(h)) return;
      const parent = i === 0 ? null : hashes[i - 1]!;
      m.parent.set(h, parent);
      out.push({ type: "BlockStored", hash: h, parent, tokens: tokens.slice(i * B, (i + 1) * B), blockSize: B });
    });
    return out;
  }
  const parents = new Set([...m.parent.values()].filter((p) => p !== null));
  const leaves = [...m.parent.keys()].filter((h) => !parents.has(h));
  if (leaves.length === 0) return [];
  const leaf = leaves[step.pick % leaves.length]!;
  m.parent.delete(leaf);
  return [{ type: "BlockRemoved", hashes: [leaf] }];
}

function apply(set: TieredBlockSet, frames: Uint8Array[]): number {
  const msg = decodeKvEventMessage(frames);
  if (msg.seq === null) return msg.dropped.length;
  const out = set.apply(msg.events);
  return msg.dropped.length + out.dropped.reduce((n, d) => n + (d.count > 0 ? 1 : 0), 0);
}

const view = (s: TieredBlockSet) => s.dumpBlocks().map((b) => `${b.h}<${b.p}:${b.l}`).sort();

describe("relay input fuzz: junk is counted and dropped, the block set is the valid stream's", () => {
  it(`${RUNS} generated streams`, () => {
    let junkTotal = 0;
    let blocksTotal = 0;
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 1, maxLength: 40, size: "max" }), (steps) => {
        const model: Model = { parent: new Map() };
        const clean = new TieredBlockSet(B);
        const noisy = new TieredBlockSet(B);
        let seq = 0n;
        let drops = 0;
        let required = 0;
        let junkCount = 0;
        for (const step of steps) {
          if (step.t === "junk") {
            junkCount++;
            if (mustDrop(step.junk)) required++;
            drops += apply(noisy, junkFrames(step.junk, seq++, [...model.parent.keys()]));
            continue;
          }
          const events = validEvents(step, model);
          if (events.length === 0) continue;
          const frames = [enc.encode(""), encodeSeq(Number(seq++)), encodeEventBatch(1.5, events, 0)];
          expect(apply(clean, frames)).toBe(0);
          expect(apply(noisy, frames)).toBe(0);
        }
        const expected = [...model.parent.keys()].map(String).sort();
        expect(clean.dumpBlocks().map((b) => b.h).sort()).toEqual(expected);
        expect(view(noisy)).toEqual(view(clean));
        expect(drops).toBeGreaterThanOrEqual(required);
        junkTotal += junkCount;
        blocksTotal += expected.length;
      }),
      { numRuns: RUNS },
    );
    console.log(`relay input fuzz: ${RUNS} streams, ${junkTotal} junk messages, ${blocksTotal} final blocks`);
  });
});
