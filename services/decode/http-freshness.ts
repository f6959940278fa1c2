/**
 * How long the media store may reuse a URL's stored bytes without asking the origin again: HTTP
 * freshness as a shared cache computes it (RFC 9111 §4.2), and nothing looser.
 * - Lifetime: `s-maxage`, else `max-age`, else `Expires` − `Date`. No heuristic freshness: a
 *   response that states none is revalidated on every use (ETag / Last-Modified).
 * - Never fresh: `no-store`, `no-cache` (any form), `private` (a shared cache must not reuse it),
 *   `Vary: *`, HTTP/1.0 `Pragma: no-cache` without Cache-Control, and any directive it cannot read
 *   (a repeated or malformed `max-age`/`s-maxage`, an `Expires` that is not an IMF-fixdate): §4.2.1
 *   lets a cache treat those as stale, the safe reading.
 * - Age: the response's own `Age` and its apparent age (`Date` vs arrival) plus the request's
 *   round trip, as §4.2.3 corrects them, are used up first.
 * - The operator's cap bounds the rest: an origin that promises a year is asked again after it.
 * A 304 updates the stored fields it carries (§4.3.4), so its own Cache-Control or Expires counts.
 */

/** The response fields freshness depends on, as received (null = absent). */
export interface FreshnessFields {
  cacheControl: string | null;
  expires: string | null;
  pragma: string | null;
  vary: string | null;
  date: string | null;
  age: string | null;
}

export function freshnessFieldsOf(headers: Headers): FreshnessFields {
  return {
    cacheControl: headers.get("cache-control"),
    expires: headers.get("expires"),
    pragma: headers.get("pragma"),
    vary: headers.get("vary"),
    date: headers.get("date"),
    age: headers.get("age"),
  };
}

/** The stored fields after a 304: each field the 304 carries replaces the stored one (RFC 9111 §4.3.4). */
export function fieldsAfter304(stored: FreshnessFields, notModified: FreshnessFields): FreshnessFields {
  return {
    cacheControl: notModified.cacheControl ?? stored.cacheControl,
    expires: notModified.expires ?? stored.expires,
    pragma: notModified.pragma ?? stored.pragma,
    vary: notModified.vary ?? stored.vary,
    // Date and Age describe the 304 itself; the stored ones would count the time since the first fetch twice.
    date: notModified.date,
    age: notModified.age,
  };
}

interface CacheControl {
  /** Lower-case name → value (unquoted; null without `=`); the first occurrence of each. */
  directives: Map<string, string | null>;
  /** Names that occur more than once. */
  repeated: Set<string>;
}

function isSpace(c: string | undefined): boolean {
  return c === " " || c === "\t";
}

/** Cache-Control directives (RFC 9111 §5.2: comma-separated, values token or quoted-string); null if malformed. */
function parseCacheControl(value: string): CacheControl | null {
  const directives = new Map<string, string | null>();
  const repeated = new Set<string>();
  const n = value.length;
  let i = 0;
  while (i < n) {
    while (i < n && (value[i] === "," || isSpace(value[i]))) i++;
    if (i >= n) break;
    let j = i;
    while (j < n && value[j] !== "=" && value[j] !== ",") j++;
    const name = value.slice(i, j).trim().toLowerCase();
    if (name === "" || /\s/.test(name)) return null;
    let v: string | null = null;
    i = j;
    if (value[i] === "=") {
      i++;
      while (isSpace(value[i])) i++;
      if (value[i] === '"') {
        // quoted-string: a backslash escapes the next character; commas inside do not split.
        let s = "";
        for (i++; i < n && value[i] !== '"'; i++) s += value[i] === "\\" && i + 1 < n ? value[++i] : value[i];
        if (i >= n) return null;
        i++;
        while (i < n && value[i] !== ",") if (!isSpace(value[i++])) return null;
        v = s;
      } else {
        let k = i;
        while (k < n && value[k] !== ",") k++;
        v = value.slice(i, k).trim();
        i = k;
      }
    }
    if (directives.has(name)) repeated.add(name);
    else directives.set(name, v);
  }
  return { directives, repeated };
}

/** delta-seconds (digits; a quoted value arrives unquoted), or null when invalid. */
function deltaSeconds(v: string | null | undefined): number | null {
  if (v === null || v === undefined || !/^\d{1,15}$/.test(v)) return null;
  return Number(v);
}

/** IMF-fixdate, the form senders must use (RFC 9110 §5.6.7); the obsolete forms read as invalid (stale). */
const IMF_FIXDATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;

function httpDate(v: string | null): number | null {
  if (v === null || !IMF_FIXDATE.test(v.trim())) return null;
  const t = Date.parse(v);
  return Number.isFinite(t) ? t : null;
}

/**
 * For how long (ms, from the response's arrival) the stored bytes may be reused without contacting
 * the origin; 0 = never. `requestTime` / `responseTime`: when the request was sent and the response
 * (200 or 304) arrived, by the wall clock (the `Date` header is compared with them). `maxMs`: the
 * operator's cap. The caller keeps the deadline on a monotonic clock, so a wall-clock step does not
 * stretch it.
 */
export function freshFor(f: FreshnessFields, requestTime: number, responseTime: number, maxMs: number): number {
  const never = 0;
  if (maxMs <= 0) return never;
  if (f.vary !== null && f.vary.split(",").some((v) => v.trim() === "*")) return never;
  let lifetimeMs: number | null = null;
  if (f.cacheControl !== null) {
    const parsed = parseCacheControl(f.cacheControl);
    if (parsed === null) return never;
    const cc = parsed.directives;
    if (cc.has("no-store") || cc.has("no-cache") || cc.has("private")) return never;
    for (const name of ["s-maxage", "max-age"]) {
      if (!cc.has(name)) continue;
      if (parsed.repeated.has(name)) return never;
      const s = deltaSeconds(cc.get(name));
      if (s === null) return never;
      lifetimeMs = s * 1000;
      break;
    }
  } else if (f.pragma !== null && /(^|,)\s*no-cache\s*(,|$)/i.test(f.pragma)) return never;
  const date = httpDate(f.date);
  if (lifetimeMs === null) {
    if (f.expires === null) return never;
    const expires = httpDate(f.expires);
    if (expires === null) return never;
    lifetimeMs = expires - (date ?? responseTime);
  }
  const apparentAge = date === null ? 0 : Math.max(0, responseTime - date);
  const ageField = f.age === null ? 0 : deltaSeconds(f.age.trim());
  if (ageField === null) return never;
  const initialAge = Math.max(apparentAge, ageField * 1000 + Math.max(0, responseTime - requestTime));
  const left = Math.min(lifetimeMs - initialAge, maxMs);
  return left > 0 ? left : never;
}
