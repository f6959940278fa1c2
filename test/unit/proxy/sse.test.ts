import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { UpstreamError } from "../../../src/api/errors.ts";
import { createSseParser } from "../../../src/proxy/sse.ts";
import type { SseEvent } from "../../../src/proxy/sse.ts";
import { splitAt } from "../../helpers/split-at.ts";

const enc = new TextEncoder();

function parseChunks(chunks: Uint8Array[], max?: number): SseEvent[] {
  const p = createSseParser(max);
  const out: SseEvent[] = [];
  for (const c of chunks) out.push(...p.push(c));
  out.push(...p.end());
  return out;
}

const SAMPLE =
  ': keep-alive comment\n' +
  'data: {"text":"héllo 猫 😀","n":1}\n\n' +
  'event: custom\r\ndata: line one\r\ndata: line two\r\n\r\n' +
  'data:no-space\r\r' +
  'id: 7\nretry: 10\ndata: {"x":"a\\nb"}\n\n' +
  'data: [DONE]\n\n';

const EXPECTED: SseEvent[] = [
  { data: '{"text":"héllo 猫 😀","n":1}' },
  { data: "line one\nline two", event: "custom" },
  { data: "no-space" },
  { data: '{"x":"a\\nb"}' },
  { data: "[DONE]" },
];

describe("SSE parser", () => {
  it("parses LF, CRLF and CR line ends, comments, multi-line data and other fields", () => {
    expect(parseChunks([enc.encode(SAMPLE)])).toEqual(EXPECTED);
  });

  it("gives the same events for a split at every byte position", () => {
    const bytes = enc.encode(SAMPLE);
    for (let i = 1; i < bytes.length; i++) {
      expect(parseChunks(splitAt(bytes, [i]))).toEqual(EXPECTED);
    }
  });

  it("gives the same events when fed one byte at a time", () => {
    const bytes = enc.encode(SAMPLE);
    expect(parseChunks(Array.from(bytes, (b) => new Uint8Array([b])))).toEqual(EXPECTED);
  });

  it("gives the same events for random multi-way splits", () => {
    const bytes = enc.encode(SAMPLE);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: bytes.length - 1 }), { maxLength: 12 }), (cuts) => {
        expect(parseChunks(splitAt(bytes, cuts))).toEqual(EXPECTED);
      }),
      { numRuns: 300 },
    );
  });

  it("dispatches a final event that lacks its blank line (and a line that lacks its newline)", () => {
    expect(parseChunks([enc.encode("data: a\n")])).toEqual([{ data: "a" }]);
    expect(parseChunks([enc.encode("data: [DONE]")])).toEqual([{ data: "[DONE]" }]);
    expect(parseChunks([enc.encode("data: a\r")])).toEqual([{ data: "a" }]);
  });

  it("ignores events without data", () => {
    expect(parseChunks([enc.encode("event: x\n\n: c\n\n\n\n")])).toEqual([]);
  });

  it("refuses unbounded lines and events", () => {
    expect(() => parseChunks([enc.encode(`data: ${"x".repeat(100)}`)], 50)).toThrow(UpstreamError);
    expect(() => parseChunks([enc.encode(`${"data: xxxxxxxxxx\n".repeat(10)}\n`)], 50)).toThrow(UpstreamError);
  });

  it("handles a long line arriving in many small chunks in linear work", () => {
    const line = `data: ${"y".repeat(200_000)}\n\n`;
    const bytes = enc.encode(line);
    const chunks: Uint8Array[] = [];
    for (let i = 0; i < bytes.length; i += 100) chunks.push(bytes.slice(i, i + 100));
    // Each search of a string makes V8 flatten it: searching the whole unfinished line (appended
    // to per chunk) on every chunk would flatten ~200 MB of strings for this 200 kB line.
    const indexOf = String.prototype.indexOf;
    let searched = 0;
    const spy = vi.spyOn(String.prototype, "indexOf").mockImplementation(function (this: string, search: string, from?: number) {
      searched += this.length;
      return indexOf.call(this, search, from);
    });
    let events: SseEvent[];
    try {
      events = parseChunks(chunks);
    } finally {
      spy.mockRestore();
    }
    expect(events).toHaveLength(1);
    expect(events[0]!.data.length).toBe(200_000);
    expect(searched).toBeLessThan(10 * bytes.length); // a few passes per character, not one per chunk
  });
});
