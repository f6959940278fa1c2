/**
 * `/v1` authorization (src/edge/auth.ts): the admin token, configured keys (each compared, by its
 * UTF-8), a closed endpoint, public access; the configured credentials are encoded once per config.
 */
import { describe, expect, it } from "vitest";
import { AuthenticationError } from "../../../src/api/errors.ts";
import { authorizeClient, bearerToken, matchApiKey } from "../../../src/edge/auth.ts";

const ADMIN = "admin-token-0123456789abcdef";
const KEYS = ["key-one-0123456789abcd", "key-two-0123456789abcd", "clé-trois-0123456789ab"];
const config = (over: Partial<{ apiKeys: Set<string> | null; adminToken: string | null; publicAccess: boolean }> = {}) => ({
  apiKeys: new Set(KEYS),
  adminToken: ADMIN,
  publicAccess: false,
  ...over,
});
const req = (authorization?: string) => new Request("https://edge/v1/chat/completions", { method: "POST", headers: authorization ? { authorization } : {} });

describe("authorizeClient", () => {
  it("tells the admin token, each key, a wrong key and a missing one apart", () => {
    const c = config();
    expect(authorizeClient(req(`Bearer ${ADMIN}`), c)).toEqual({ apiKey: null, admin: true });
    for (const k of KEYS) expect(authorizeClient(req(`Bearer ${k}`), c)).toEqual({ apiKey: k, admin: false });
    for (const wrong of [KEYS[0]!.slice(0, -1), `${KEYS[0]}x`, ADMIN.slice(1), "clé-trois-0123456789aB"])
      expect(() => authorizeClient(req(`Bearer ${wrong}`), c), wrong).toThrow(AuthenticationError);
    expect(() => authorizeClient(req(), c)).toThrow(/Missing API key/);
    expect(() => authorizeClient(req("Basic abc"), c)).toThrow(/Missing API key/);
  });

  it("answers each config by its own credentials, whatever was asked before", () => {
    const a = config();
    const b = config({ apiKeys: new Set(["other-key-0123456789ab"]), adminToken: "other-admin-0123456789ab" });
    for (let round = 0; round < 2; round++) {
      expect(authorizeClient(req(`Bearer ${ADMIN}`), a).admin).toBe(true);
      expect(() => authorizeClient(req(`Bearer ${ADMIN}`), b)).toThrow(AuthenticationError);
      expect(authorizeClient(req("Bearer other-admin-0123456789ab"), b).admin).toBe(true);
      expect(() => authorizeClient(req(`Bearer ${KEYS[1]}`), b)).toThrow(AuthenticationError);
      expect(authorizeClient(req(`Bearer ${KEYS[1]}`), a).apiKey).toBe(KEYS[1]);
      expect(authorizeClient(req("Bearer other-key-0123456789ab"), b).apiKey).toBe("other-key-0123456789ab");
    }
  });

  it("without keys: public access serves anyone, else the endpoint is closed; the admin token still counts", () => {
    expect(authorizeClient(req(), config({ apiKeys: null, publicAccess: true }))).toEqual({ apiKey: null, admin: false });
    expect(authorizeClient(req("Bearer anything-at-all-here"), config({ apiKeys: null, publicAccess: true }))).toEqual({ apiKey: null, admin: false });
    expect(() => authorizeClient(req(), config({ apiKeys: null }))).toThrow(/none is configured/);
    expect(authorizeClient(req(`Bearer ${ADMIN}`), config({ apiKeys: null }))).toEqual({ apiKey: null, admin: true });
    expect(() => authorizeClient(req(`Bearer ${ADMIN}`), config({ adminToken: null }))).toThrow(AuthenticationError);
  });
});

describe("matchApiKey and bearerToken", () => {
  it("finds the key equal to the presented one, by UTF-8", () => {
    expect(matchApiKey(KEYS[2]!, new Set(KEYS))).toBe(KEYS[2]);
    expect(matchApiKey("clé-trois-0123456789a", new Set(KEYS))).toBeNull();
    // A lone surrogate encodes as U+FFFD (as before: the comparison is of UTF-8 encodings).
    expect(matchApiKey("k\uD800", new Set(["k\uFFFD"]))).toBe("k\uFFFD");
    expect(matchApiKey("anything", new Set())).toBeNull();
  });

  it("reads a Bearer token, any case, surrounding space allowed, one token only", () => {
    expect(bearerToken(req("Bearer abc"))).toBe("abc");
    expect(bearerToken(req("bearer   abc  "))).toBe("abc");
    expect(bearerToken(req("Bearer a b"))).toBeNull();
    expect(bearerToken(req())).toBeNull();
  });
});
