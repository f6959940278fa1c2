/**
 * The media store's HTTP freshness (services/decode/http-freshness.ts) against RFC 9111 as a
 * shared cache reads it: §4.2.1 lifetime (s-maxage, max-age, Expires), §4.2.3 age, §5.2 directives
 * that forbid reuse, §4.3.4 a 304 updating the stored fields. Expected values are worked from the
 * RFC's formulas by hand, not from the implementation.
 */
import { describe, expect, it } from "vitest";
import { fieldsAfter304, freshFor, type FreshnessFields } from "../../../services/decode/http-freshness.ts";

const T = Date.parse("2026-12-05T06:00:00Z");
const imf = (ms: number): string => new Date(ms).toUTCString();
const DAY = 86_400_000;
const none: FreshnessFields = { cacheControl: null, expires: null, pragma: null, vary: null, date: null, age: null };
const f = (over: Partial<FreshnessFields>): FreshnessFields => ({ ...none, date: imf(T), ...over });
/** Seconds of reuse left, as the store sees it at the response's arrival (T), request sent at T. */
const left = (fields: FreshnessFields, maxMs = DAY, sentAt = T): number => freshFor(fields, sentAt, T, maxMs) / 1000;

describe("HTTP freshness for the media store (RFC 9111, shared cache)", () => {
  it("takes the lifetime from s-maxage, else max-age, else Expires − Date; nothing else makes a response fresh", () => {
    expect(left(f({ cacheControl: "max-age=60" }))).toBe(60);
    expect(left(f({ cacheControl: "Max-Age=60, public" }))).toBe(60);
    expect(left(f({ cacheControl: "s-maxage=10, max-age=60" }))).toBe(10);
    expect(left(f({ cacheControl: 'max-age="60"' }))).toBe(60);
    expect(left(f({ expires: imf(T + 120_000) }))).toBe(120);
    // Expires is measured against the origin's Date, not the store's clock (§4.2.1).
    expect(left(f({ date: imf(T - 30_000), expires: imf(T + 90_000) }))).toBe(120 - 30);
    // max-age wins over Expires.
    expect(left(f({ cacheControl: "max-age=5", expires: imf(T + 120_000) }))).toBe(5);
    // No stated freshness: no heuristic, the store revalidates every time.
    expect(left(f({}))).toBe(0);
    expect(left(f({ cacheControl: "public" }))).toBe(0);
  });

  it("uses up the response's age first: Age, apparent age and the request's round trip (§4.2.3)", () => {
    expect(left(f({ cacheControl: "max-age=60", age: "50" }))).toBe(10);
    expect(left(f({ cacheControl: "max-age=60", age: "70" }))).toBe(0);
    // Date 30 s before arrival: 30 s of the minute are gone.
    expect(left(f({ cacheControl: "max-age=60", date: imf(T - 30_000) }))).toBe(30);
    // A 2 s round trip counts as age on top of Age (corrected_age_value = age_value + response_delay).
    expect(left(f({ cacheControl: "max-age=60", age: "10" }), DAY, T - 2_000)).toBe(48);
    // Apparent age is the larger one here: max(30, 10 + 2).
    expect(left(f({ cacheControl: "max-age=60", age: "10", date: imf(T - 30_000) }), DAY, T - 2_000)).toBe(30);
  });

  it("never reuses what a shared cache must not: no-store, no-cache, private, Vary: *, Pragma without Cache-Control", () => {
    for (const cc of ["no-store, max-age=60", "no-cache, max-age=60", 'no-cache="set-cookie", max-age=60', "private, max-age=60", "max-age=60, PRIVATE"]) {
      expect(left(f({ cacheControl: cc })), cc).toBe(0);
    }
    expect(left(f({ cacheControl: "max-age=60", vary: "accept-encoding, *" }))).toBe(0);
    expect(left(f({ cacheControl: "max-age=60", vary: "accept-encoding" }))).toBe(60);
    expect(left(f({ pragma: "no-cache", expires: imf(T + 60_000) }))).toBe(0);
    // Cache-Control present: Pragma is ignored (RFC 9111 §5.4).
    expect(left(f({ pragma: "no-cache", cacheControl: "max-age=60" }))).toBe(60);
  });

  it("reads what it cannot parse as stale: repeated or malformed lifetimes, Expires not in IMF-fixdate", () => {
    for (const cc of ["max-age=60, max-age=30", "max-age=abc", "max-age=-5", "max-age=", "max-age=6 0", 'max-age="60', "=60"]) {
      expect(left(f({ cacheControl: cc })), cc).toBe(0);
    }
    for (const e of ["0", "2030", "Thu, 01 Dec 2094 16:00:00 +0000", "Sunday, 06-Nov-94 08:49:37 GMT"]) expect(left(f({ expires: e })), e).toBe(0);
    expect(left(f({ cacheControl: "max-age=60", age: "x" }))).toBe(0);
    // A comma inside a quoted value does not start a directive; an unrelated repeat is harmless.
    expect(left(f({ cacheControl: 'ext="a, max-age=1", max-age=60, public, public' }))).toBe(60);
  });

  it("caps the reuse at the operator's bound; 0 turns it off", () => {
    expect(left(f({ cacheControl: "max-age=31536000, immutable" }), 3_600_000)).toBe(3600);
    expect(left(f({ cacheControl: "max-age=60" }), 0)).toBe(0);
  });

  it("a 304 replaces the stored fields it carries and brings its own Date and Age (§4.3.4)", () => {
    const stored = f({ cacheControl: "max-age=60", date: imf(T - 600_000), age: "5" });
    // The 304 restates nothing: the stored max-age counts again from the 304's Date.
    expect(left(fieldsAfter304(stored, { ...none, date: imf(T) }))).toBe(60);
    // The origin changed its mind: now no-cache.
    expect(left(fieldsAfter304(stored, { ...none, cacheControl: "no-cache", date: imf(T) }))).toBe(0);
    // A new lifetime and the 304's own age.
    expect(left(fieldsAfter304(stored, { ...none, cacheControl: "max-age=300", age: "100", date: imf(T) }))).toBe(200);
  });
});
