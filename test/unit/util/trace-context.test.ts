/**
 * W3C traceparent parsing and the edge's span (src/util/trace-context.ts), against the spec's
 * parsing rules: https://www.w3.org/TR/trace-context/#traceparent-header.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatTraceparent, parseTraceparent, RandomPool, startEdgeTrace, type RandomBytes } from "../../../src/util/trace-context.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN = "00f067aa0ba902b7";
const VALID = `00-${TRACE}-${SPAN}-01`;

/** A pool of one trace's bytes (span id, then trace id): every trace draws `random` anew. */
const perTrace = (random: RandomBytes) => new RandomPool(random, 24);

/** Random bytes from a fixed list of fills, in order (then the last one again). */
function scripted(...fills: number[]): RandomBytes {
  let i = 0;
  return (b) => {
    b.fill(fills[Math.min(i++, fills.length - 1)]!);
  };
}

describe("parseTraceparent", () => {
  it("reads a version-00 header", () => {
    expect(parseTraceparent(VALID)).toEqual({ traceId: TRACE, parentId: SPAN, flags: 1 });
    expect(parseTraceparent(`00-${TRACE}-${SPAN}-00`)).toEqual({ traceId: TRACE, parentId: SPAN, flags: 0 });
  });

  it.each([
    ["absent", null],
    ["empty", ""],
    ["upper-case hex", `00-${TRACE.toUpperCase()}-${SPAN}-01`],
    ["all-zero trace id", `00-${"0".repeat(32)}-${SPAN}-01`],
    ["all-zero parent id", `00-${TRACE}-${"0".repeat(16)}-01`],
    ["version ff", `ff-${TRACE}-${SPAN}-01`],
    ["version 00 with more after it", `${VALID}-extra`],
    ["short trace id", `00-${TRACE.slice(1)}-${SPAN}-01`],
    ["long parent id", `00-${TRACE}-${SPAN}0-01`],
    ["one-digit flags", `00-${TRACE}-${SPAN}-1`],
    ["non-hex", `00-${TRACE.replace("4", "g")}-${SPAN}-01`],
    ["two headers joined by a comma", `${VALID}, 00-${"1".repeat(32)}-${SPAN}-01`],
    ["leading space", ` ${VALID}`],
    ["a future version glued to more text", `cc-${TRACE}-${SPAN}-01x`],
    ["one-digit version", `0-${TRACE}-${SPAN}-01`],
  ])("refuses %s", (_why, value) => {
    expect(parseTraceparent(value)).toBeNull();
  });

  it("reads a higher version by its first four fields", () => {
    expect(parseTraceparent(`cc-${TRACE}-${SPAN}-09`)).toEqual({ traceId: TRACE, parentId: SPAN, flags: 9 });
    expect(parseTraceparent(`cc-${TRACE}-${SPAN}-01-what-the-future-will-be-like`)).toEqual({ traceId: TRACE, parentId: SPAN, flags: 1 });
  });

  it("reads back whatever formatTraceparent writes", () => {
    const hex = (n: number) => fc.uint8Array({ minLength: n, maxLength: n }).filter((b) => b.some((x) => x !== 0)).map((b) => Buffer.from(b).toString("hex"));
    fc.assert(
      fc.property(hex(16), hex(8), fc.boolean(), (traceId, spanId, sampled) => {
        expect(parseTraceparent(formatTraceparent(traceId, spanId, sampled))).toEqual({ traceId, parentId: spanId, flags: sampled ? 1 : 0 });
      }),
    );
  });
});

describe("startEdgeTrace", () => {
  it("continues a client's trace with a span of its own", () => {
    const t = startEdgeTrace(VALID, perTrace(scripted(0xab)));
    expect(t).toEqual({ traceId: TRACE, spanId: "ab".repeat(8), parentId: SPAN, sampled: true, header: `00-${TRACE}-${"ab".repeat(8)}-01` });
  });

  it("keeps the client's sampling decision and zeroes flags version 00 does not define", () => {
    expect(startEdgeTrace(`00-${TRACE}-${SPAN}-00`).header).toMatch(/-00$/);
    expect(startEdgeTrace(`00-${TRACE}-${SPAN}-03`).header).toMatch(/-01$/);
    expect(startEdgeTrace(`cc-${TRACE}-${SPAN}-ff-more`).header).toMatch(new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));
  });

  it("starts a new sampled trace when the header is absent or invalid", () => {
    for (const incoming of [null, `00-${"0".repeat(32)}-${SPAN}-01`, "garbage"]) {
      const t = startEdgeTrace(incoming);
      expect(t.parentId).toBeNull();
      expect(t.sampled).toBe(true);
      expect(t.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(t.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(t.traceId).not.toBe(TRACE);
      expect(parseTraceparent(t.header)).toEqual({ traceId: t.traceId, parentId: t.spanId, flags: 1 });
    }
  });

  it("draws fresh random ids each time, never all zeros", () => {
    const a = startEdgeTrace(null), b = startEdgeTrace(null);
    expect(a.traceId).not.toBe(b.traceId);
    expect(a.spanId).not.toBe(b.spanId);
    // One draw gives both ids (span id first); a draw where either is all zeros is drawn again.
    const draws = [
      [0, 0],
      [0x11, 0],
      [0, 0x22],
      [0x33, 0x44],
    ];
    let d = 0;
    const zeroFirst: RandomBytes = (b) => {
      const [span, trace] = draws[d++]!;
      b.fill(span!, 0, 8);
      b.fill(trace!, 8);
    };
    const t = startEdgeTrace(null, perTrace(zeroFirst));
    expect([t.spanId, t.traceId, d]).toEqual(["33".repeat(8), "44".repeat(16), 4]);
    // A continued trace draws only its span id, again while it is all zeros.
    const c = startEdgeTrace(VALID, new RandomPool(scripted(0, 0x55), 8));
    expect([c.traceId, c.spanId]).toEqual([TRACE, "55".repeat(8)]);
  });

  it("writes every byte value as its two lower-case hex digits", () => {
    // The source counts up byte by byte (mod 256): 11 traces draw 264 bytes, every value at least once.
    let next = 1;
    const counting: RandomBytes = (b) => {
      for (let i = 0; i < b.length; i++) b[i] = next++ % 256;
    };
    const hexOf = (from: number, n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (from + i) % 256)).toString("hex");
    const seen = new Set<string>();
    for (let k = 0; k < 11; k++) {
      const from = next;
      const t = startEdgeTrace(null, perTrace(counting));
      expect([t.spanId, t.traceId]).toEqual([hexOf(from, 8), hexOf(from + 8, 16)]);
      for (const id of [t.traceId, t.spanId]) for (let i = 0; i < id.length; i += 2) seen.add(id.slice(i, i + 2));
    }
    expect(seen.size).toBe(256);
  });

  it("draws the source once per pool of ids and hands out no byte twice", () => {
    // The source numbers its bytes 1, 2, 3, … (mod 256) so each id shows which bytes it took.
    let next = 1, draws = 0;
    const counting: RandomBytes = (b) => {
      draws++;
      for (let i = 0; i < b.length; i++) b[i] = next++ % 256;
    };
    const hexOf = (from: number, n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (from + i) % 256)).toString("hex");
    const pool = new RandomPool(counting, 240);
    const ids = Array.from({ length: 25 }, () => startEdgeTrace(null, pool));
    // Ten new traces per draw of 240 bytes: three draws for 25 traces, each trace the next 24 bytes.
    expect(draws).toBe(3);
    ids.forEach((t, k) => expect([t.spanId, t.traceId]).toEqual([hexOf(1 + 24 * k, 8), hexOf(9 + 24 * k, 16)]));
    // A continued trace takes 8 bytes; a new trace that no longer fits draws again and skips the rest.
    const mixed = new RandomPool(counting, 48);
    const from = next;
    const c = startEdgeTrace(VALID, mixed);
    const a = startEdgeTrace(null, mixed);
    const b = startEdgeTrace(null, mixed);
    expect([c.spanId, a.spanId, a.traceId, b.spanId, b.traceId]).toEqual([hexOf(from, 8), hexOf(from + 8, 8), hexOf(from + 16, 16), hexOf(from + 48, 8), hexOf(from + 56, 16)]);
    expect(draws).toBe(5);
  });

  it("refuses a pool too small for a take or too large for one crypto.getRandomValues call", () => {
    const zeros: RandomBytes = (b) => b.fill(0);
    // 8 bytes hold a continued trace's span id, not a new trace's 24: a RangeError, not an endless retry.
    const small = new RandomPool(scripted(0x66), 8);
    expect(startEdgeTrace(VALID, small).spanId).toBe("66".repeat(8));
    expect(() => startEdgeTrace(null, small)).toThrow(RangeError);
    expect(() => new RandomPool(zeros, 16).take(17)).toThrow(RangeError);
    expect(new RandomPool(zeros, 65_536).take(24)).toBe(0);
    for (const size of [0, -1, 1.5, Number.NaN, 65_537]) expect(() => new RandomPool(zeros, size)).toThrow(RangeError);
  });
});
