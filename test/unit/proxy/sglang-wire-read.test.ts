/**
 * The answer readers (parseGenerateResult / parseGenerateResponse) against their zod schemas, the
 * definition: on every input the same success, the same output (values, key order, keys holding
 * undefined) and, on failure, zod's own issues. Inputs: random results built from valid and invalid
 * field values, extra keys and a JSON `__proto__` key; well-formed ones must not reach zod.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { GenerateResponseSchema, GenerateResultSchema } from "../../../src/proxy/sglang-wire.ts";
import { parseGenerateResponse, parseGenerateResult } from "../../../src/proxy/sglang-wire-read.ts";

const ABSENT = Symbol("absent");

/** Deterministic pseudo-random numbers in [0, 1). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Values, key order and keys holding undefined: what toEqual does not tell apart. */
function dump(x: unknown): string {
  if (x === undefined) return "undefined";
  if (typeof x === "number" && !Number.isFinite(x)) return String(x);
  if (Array.isArray(x)) return `[${x.map(dump).join(",")}]`;
  if (typeof x === "object" && x !== null) return `{${Object.keys(x).map((k) => `${JSON.stringify(k)}:${dump((x as Record<string, unknown>)[k])}`).join(",")}}`;
  return JSON.stringify(x);
}

const COUNTS = [0, 7, 1200, 2 ** 53 - 1];
const NOT_COUNTS = [-1, 1.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY, "3", null, true, [], {}];
const STRINGS = ["", "default", "x\u00e9\ud83d\ude00"];
const NOT_STRINGS = [1, null, false, [], {}];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

/** One field's value: mostly valid, sometimes absent, undefined or of the wrong kind. */
function field(r: () => number, valid: readonly unknown[], invalid: readonly unknown[]): unknown {
  const x = r();
  if (x < 0.2) return ABSENT;
  if (x < 0.23) return undefined;
  if (x < 0.3) return pick(r, invalid);
  return pick(r, valid);
}

function object(r: () => number, fields: Record<string, unknown>): unknown {
  const out: Record<string, unknown> = {};
  const extras: [string, unknown][] = [["num_retractions", 0], ["cached_tokens_details", { device: 3, host: 0 }], ["output_ids", [1, 2]], ["e2e_latency", 0.25]];
  const entries: [string, unknown][] = [...Object.entries(fields), ...extras.filter(() => r() < 0.4)];
  // Keys in a random order: the output's order is the schema's, then the input's.
  for (let i = entries.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  for (const [k, v] of entries) if (v !== ABSENT) out[k] = v;
  if (r() < 0.03) return JSON.parse(pick(r, [`{"__proto__": 1, "text": "p", "meta_info": {}}`, `{"__proto__": {"x": 1}, "text": "p", "meta_info": {}}`, `{"text": "p", "meta_info": {"__proto__": {"prompt_tokens": 3}}}`])) as unknown;
  return out;
}

function finishReason(r: () => number): unknown {
  const x = r();
  if (x < 0.3) return null;
  if (x < 0.35) return pick(r, ["stop", 1, []]);
  return object(r, {
    type: field(r, ["stop", "length", "abort"], NOT_STRINGS),
    matched: field(r, [null, 151645, "</s>"], [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, true, []]),
    message: field(r, [null, "why"], NOT_STRINGS),
    status_code: field(r, [null, 400, -1], [1.5, "400", 2 ** 53, Number.NaN]),
    length: field(r, [16], []),
  });
}

function metaInfo(r: () => number): unknown {
  if (r() < 0.03) return pick(r, [null, "meta", [], 3]);
  return object(r, {
    id: field(r, STRINGS, NOT_STRINGS),
    finish_reason: r() < 0.2 ? ABSENT : finishReason(r),
    prompt_tokens: field(r, COUNTS, NOT_COUNTS),
    completion_tokens: field(r, COUNTS, NOT_COUNTS),
    cached_tokens: field(r, COUNTS, NOT_COUNTS),
    reasoning_tokens: field(r, COUNTS, NOT_COUNTS),
    image_tokens: field(r, COUNTS, NOT_COUNTS),
    video_tokens: field(r, COUNTS, NOT_COUNTS),
    audio_tokens: field(r, COUNTS, NOT_COUNTS),
    weight_version: field(r, STRINGS, NOT_STRINGS),
  });
}

function result(r: () => number): unknown {
  if (r() < 0.02) return pick(r, [null, "text", 3, true]);
  return object(r, { text: field(r, STRINGS, NOT_STRINGS), meta_info: r() < 0.05 ? ABSENT : metaInfo(r), index: field(r, [0, 1, 3], NOT_COUNTS) });
}

function sameAsSchema(read: { success: boolean; data?: unknown; error?: { issues: unknown[] } }, zod: { success: boolean; data?: unknown; error?: { issues: unknown[] } }): void {
  expect(read.success).toBe(zod.success);
  if (zod.success) {
    expect(dump(read.data)).toBe(dump(zod.data));
    expect(Object.getPrototypeOf(read.data)).toBe(Object.getPrototypeOf(zod.data));
  }
  else expect(dump(read.error!.issues.map((i) => (i as { message: string }).message))).toBe(dump(zod.error!.issues.map((i) => (i as { message: string }).message)));
}

describe("answer readers against their zod schemas", () => {
  afterEach(() => vi.restoreAllMocks());

  it("an answer zod's own check throws on is refused as malformed, not thrown", () => {
    // zod reads an array-like's `length` as given: an object whose valueOf and toString are not callable throws.
    const raw = { length: { toString: 0, valueOf: 0 }, meta_info: 1 };
    expect(() => GenerateResponseSchema.safeParse(raw)).toThrow(TypeError);
    const read = parseGenerateResponse(raw);
    expect(read.success).toBe(false);
    expect(read.error!.issues[0]!.message).toMatch(/unreadable value/);
  });

  it("a stream frame: same success, output and issues on 20,000 random results", () => {
    const r = random(0x5eed);
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      const raw = result(r);
      const zod = GenerateResultSchema.safeParse(raw);
      sameAsSchema(parseGenerateResult(raw), zod);
      if (zod.success) accepted++;
    }
    // Both sides of the schema are exercised.
    expect(accepted).toBeGreaterThan(2_000);
    expect(accepted).toBeLessThan(18_000);
  });

  it("a whole answer (one result or an array of n): same as GenerateResponseSchema", () => {
    const r = random(0xa11);
    for (let i = 0; i < 5_000; i++) {
      const x = r();
      const raw = x < 0.6 ? result(r) : x < 0.62 ? [] : Array.from({ length: 1 + Math.floor(r() * 3) }, () => result(r));
      sameAsSchema(parseGenerateResponse(raw), GenerateResponseSchema.safeParse(raw));
    }
  });

  it("reads a worker's well-formed frames without zod, and leaves the rest to it", () => {
    const frame = { text: "Hi", output_ids: [9], meta_info: { id: "r1", finish_reason: { type: "length", length: 16 }, prompt_tokens: 12, weight_version: "default", completion_tokens: 1, cached_tokens: 8, cached_tokens_details: { device: 8, host: 0 } } };
    const zodResult = vi.spyOn(GenerateResultSchema, "safeParse");
    const zodResponse = vi.spyOn(GenerateResponseSchema, "safeParse");
    expect(parseGenerateResult(frame).success).toBe(true);
    expect(parseGenerateResponse(frame).success).toBe(true);
    expect(parseGenerateResponse([frame, { ...frame, index: 1 }]).success).toBe(true);
    expect(zodResult).not.toHaveBeenCalled();
    expect(zodResponse).not.toHaveBeenCalled();
    const bad = { ...frame, meta_info: { ...frame.meta_info, prompt_tokens: -1 } };
    expect(parseGenerateResult(bad).success).toBe(false);
    expect(parseGenerateResponse([frame, bad]).success).toBe(false);
    expect(zodResult).toHaveBeenCalledTimes(1);
    expect(zodResponse).toHaveBeenCalledTimes(1);
  });
});
