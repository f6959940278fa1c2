import { encode } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import {
  decodeKvEventBatch,
  decodeKvEventMessage,
  decodeSeq,
  encodeSeq,
  type BlockStoredEvent,
} from "../../../src/engine-events/event-decode.ts";

const pack = (v: unknown): Uint8Array => encode(v, { useBigInt64: true });
const H = -3488128144981237669n; // golden engine hash of page [1,2,3,4]

describe("decodeSeq / encodeSeq", () => {
  it("reads 8-byte big-endian unsigned seqs and the -1 end marker", () => {
    expect(decodeSeq(encodeSeq(0))).toBe(0);
    expect(decodeSeq(encodeSeq(258))).toBe(258);
    expect(Array.from(encodeSeq(258))).toEqual([0, 0, 0, 0, 0, 0, 1, 2]);
    expect(decodeSeq(new Uint8Array(8).fill(0xff))).toBe(-1);
    expect(decodeSeq(new Uint8Array(4))).toBeNull();
    expect(decodeSeq(Uint8Array.of(0x80, 0, 0, 0, 0, 0, 0, 0))).toBeNull();
  });
});

describe("decodeKvEventBatch", () => {
  it("decodes the tagged-tuple form SGLang emits", () => {
    const payload = pack([
      1_700_000_000.25,
      [
        ["BlockStored", [H], null, [1, 2, 3, 4], 4, null, "GPU"],
        ["BlockStored", [5n], H, [5, 6, 7, 8], 4, null, "GPU"],
        ["BlockRemoved", [5, H], "GPU"],
        ["AllBlocksCleared"],
      ],
      0,
    ]);
    const b = decodeKvEventBatch(payload);
    expect(b.dropped).toEqual([]);
    expect(b.ts).toBe(1_700_000_000.25);
    expect(b.attnDpRank).toBe(0);
    expect(b.events).toEqual([
      { type: "BlockStored", blockHashes: [H], parentBlockHash: null, tokenIds: [1, 2, 3, 4], blockSize: 4, medium: "GPU" },
      { type: "BlockStored", blockHashes: [5n], parentBlockHash: H, tokenIds: [5, 6, 7, 8], blockSize: 4, medium: "GPU" },
      { type: "BlockRemoved", blockHashes: [5n, H], medium: "GPU" },
      { type: "AllBlocksCleared" },
    ]);
  });

  it("decodes the tagged-map form", () => {
    const payload = pack([
      2,
      [
        { type: "BlockStored", block_hashes: [7], parent_block_hash: null, token_ids: [9, 9], block_size: 2, lora_id: null, medium: "GPU" },
        { type: "BlockRemoved", block_hashes: [7] },
        { type: "AllBlocksCleared" },
      ],
      null,
    ]);
    const b = decodeKvEventBatch(payload);
    expect(b.dropped).toEqual([]);
    expect(b.attnDpRank).toBeNull();
    expect(b.events.map((e) => e.type)).toEqual(["BlockStored", "BlockRemoved", "AllBlocksCleared"]);
    expect((b.events[0] as BlockStoredEvent).blockHashes).toEqual([7n]);
    expect((b.events[1] as { medium: string }).medium).toBe("GPU");
  });

  it("reinterprets uint64-encoded hashes as signed int64 (hand-built bytes)", () => {
    // ["BlockRemoved", [uint64 0xCF9F…], "GPU"] with the hash written as msgpack uint64 (0xcf),
    // and a second hash written as int64 (0xd3): both must come out as the same signed value.
    const u = BigInt.asUintN(64, H);
    const be = (v: bigint): number[] => {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setBigUint64(0, BigInt.asUintN(64, v), false);
      return Array.from(b);
    };
    const tag = Array.from(new TextEncoder().encode("BlockRemoved"));
    const bytes = Uint8Array.from([
      0x93, // array(3): ts, events, rank
      0x00,
      0x91, // events: array(1)
      0x93, // event: array(3)
      0xa0 | tag.length,
      ...tag,
      0x92, // hashes: array(2)
      0xcf,
      ...be(u),
      0xd3,
      ...be(H),
      0xa3,
      0x47,
      0x50,
      0x55, // "GPU"
      0x00,
    ]);
    const b = decodeKvEventBatch(bytes);
    expect(b.dropped).toEqual([]);
    expect(b.events).toEqual([{ type: "BlockRemoved", blockHashes: [H, H], medium: "GPU" }]);
  });

  it("defaults a missing medium to GPU and ignores unknown trailing fields", () => {
    const payload = pack([
      0,
      [
        ["BlockStored", [1], null, [1, 2], 2],
        ["BlockStored", [2], 1, [3, 4], 2, null, "GPU", "lora-x", null, 0, "full", null, "LOCAL", "extra"],
        ["BlockRemoved", [2]],
        ["BlockRemoved", [1], "GPU", "trailing"],
        ["AllBlocksCleared", "source"],
      ],
      0,
    ]);
    const b = decodeKvEventBatch(payload);
    expect(b.dropped).toEqual([]);
    expect(b.events).toHaveLength(5);
    for (const e of b.events) if (e.type !== "AllBlocksCleared") expect(e.medium).toBe("GPU");
    expect((b.events[0] as BlockStoredEvent).blockSize).toBe(2);
  });

  it("keeps every medium (HiCache tiers are the relay's to sort)", () => {
    const payload = pack([0, [["BlockStored", [1], null, [1, 2], 2, null, "CPU_PINNED"], ["BlockRemoved", [1], "DISK"]], 0]);
    const b = decodeKvEventBatch(payload);
    expect(b.dropped).toEqual([]);
    expect(b.events.map((e) => e.type !== "AllBlocksCleared" && e.medium)).toEqual(["CPU_PINNED", "DISK"]);
  });

  it("counts malformed input and unknown tags without throwing", () => {
    expect(decodeKvEventBatch(Uint8Array.of(0xc1)).dropped[0]!.reason).toBe("bad_msgpack");
    expect(decodeKvEventBatch(new Uint8Array(0)).dropped[0]!.reason).toBe("bad_msgpack");
    expect(decodeKvEventBatch(pack("hello")).dropped[0]!.reason).toBe("bad_batch");
    expect(decodeKvEventBatch(pack([0, "x", 0])).dropped[0]!.reason).toBe("bad_batch");
    const b = decodeKvEventBatch(
      pack([
        0,
        [
          ["BlockStored", [1], null, [1, 2], 2, null, "GPU"], // good
          ["BlockMoved", [1]],
          42,
          ["BlockStored", "nope", null, [1], 1],
          ["BlockStored", [1.5], null, [1], 1],
          ["BlockStored", [1], null, [-1], 1],
          ["BlockStored", [1], null, [[1, 2], [3, 4]], 1],
          ["BlockStored", [1], null, [1], 0],
          ["BlockRemoved", [1], 7],
          { type: 3 },
        ],
        0,
      ]),
    );
    expect(b.events).toHaveLength(1);
    expect(b.dropped.map((d) => d.reason)).toEqual([
      "unknown_tag",
      "bad_event",
      "bad_event",
      "bad_event",
      "bad_event",
      "bad_bigram",
      "bad_event",
      "bad_event",
      "unknown_tag",
    ]);
  });
});

describe("decodeKvEventMessage", () => {
  it("decodes topic, seq and payload", () => {
    const m = decodeKvEventMessage([new TextEncoder().encode("kv"), encodeSeq(12), pack([0, [["AllBlocksCleared"]], 0])]);
    expect(m.topic).toBe("kv");
    expect(m.seq).toBe(12);
    expect(m.events).toEqual([{ type: "AllBlocksCleared" }]);
  });

  it("rejects wrong frame counts and bad seq frames", () => {
    expect(decodeKvEventMessage([new Uint8Array(0), encodeSeq(1)])).toMatchObject({ seq: null, dropped: [{ reason: "frame_count" }] });
    expect(decodeKvEventMessage([new Uint8Array(0), new Uint8Array(3), pack([0, [], 0])])).toMatchObject({
      seq: null,
      dropped: [{ reason: "bad_seq" }],
    });
    expect(decodeKvEventMessage([new Uint8Array(0), encodeSeq(-1), pack([0, [], 0])]).seq).toBeNull();
  });
});
