/** The decode service's edge token: its length on both sides and the bound on failed attempts. */
import type http from "node:http";
import { describe, expect, it } from "vitest";
import { AuthenticationError, RateLimitError } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { EdgeAuth } from "../../../services/decode/edge-auth.ts";
import { DecodeServiceOptionsSchema } from "../../../services/decode/options.ts";

const TOKEN = "edge-auth-test-token-0123456789ab";

function req(address: string, token?: string): http.IncomingMessage {
  return { headers: token === undefined ? {} : { authorization: `Bearer ${token}` }, socket: { remoteAddress: address } } as unknown as http.IncomingMessage;
}

describe("decode token length", () => {
  it("is at least 32 characters on the edge and in the service", () => {
    expect(() => parseEdgeConfig({ DECODE_TOKEN: "d".repeat(31) })).toThrow(/DECODE_TOKEN must be at least 32 characters/);
    expect(parseEdgeConfig({ DECODE_TOKEN: "d".repeat(32) }).decode.token).toBe("d".repeat(32));
    expect(() => DecodeServiceOptionsSchema.parse({ token: "d".repeat(31) })).toThrow(/at least 32 characters/);
    expect(DecodeServiceOptionsSchema.parse({ token: "d".repeat(32) }).token).toBe("d".repeat(32));
  });
});

describe("failed token attempts", () => {
  const limits = { burst: 3, refillMs: 1000, maxPeers: 2 };

  it("past its budget a network's wrong tokens are 429 until one attempt refills; the right token always passes", () => {
    let now = 0;
    const auth = new EdgeAuth(TOKEN, limits, () => now);
    for (let i = 0; i < 3; i++) expect(() => auth.require(req("198.51.100.7", "guess-" + i))).toThrow(AuthenticationError);
    expect(() => auth.require(req("198.51.100.7", "guess-3"))).toThrow(RateLimitError);
    // Behind a proxy the edge shares the guesser's address: its right token still passes.
    expect(() => auth.require(req("198.51.100.7", TOKEN))).not.toThrow();
    expect(auth.presents(req("198.51.100.7", TOKEN))).toBe(true);
    now = 999;
    expect(() => auth.require(req("198.51.100.7", "guess-4"))).toThrow(RateLimitError);
    now = 1000;
    expect(() => auth.require(req("198.51.100.7", "guess-5"))).toThrow(AuthenticationError);
    expect(() => auth.require(req("198.51.100.7", "guess-6"))).toThrow(RateLimitError);
    expect(() => auth.require(req("198.51.100.7", TOKEN))).not.toThrow();
  });

  it("a right token never counts; an IPv6 /64 is one network; no header on /healthz is no attempt", () => {
    const auth = new EdgeAuth(TOKEN, limits, () => 0);
    for (let i = 0; i < 10; i++) expect(() => auth.require(req("2001:db8:1:2::1", TOKEN))).not.toThrow();
    for (let i = 0; i < 10; i++) expect(auth.presents(req("2001:db8:1:2::5"))).toBe(false);
    for (let i = 0; i < 3; i++) expect(auth.presents(req(`2001:db8:1:2::${i + 10}`, "guess"))).toBe(false);
    expect(() => auth.require(req("2001:db8:1:2:ffff::1", "guess"))).toThrow(RateLimitError);
    expect(auth.presents(req("2001:db8:1:2::1", TOKEN))).toBe(true);
    expect(() => auth.require(req("2001:db8:1:3::1", "guess"))).toThrow(AuthenticationError);
  });

  it("remembers at most maxPeers networks, forgetting the least recently failed", () => {
    const auth = new EdgeAuth(TOKEN, limits, () => 0);
    for (let i = 0; i < 3; i++) expect(() => auth.require(req("192.0.2.1", "guess"))).toThrow(AuthenticationError);
    expect(() => auth.require(req("192.0.2.2", "guess"))).toThrow(AuthenticationError);
    expect(() => auth.require(req("192.0.2.1", "guess"))).toThrow(RateLimitError);
    expect(() => auth.require(req("192.0.2.3", "guess"))).toThrow(AuthenticationError);
    // 192.0.2.1 failed before 192.0.2.2 did: forgotten for 192.0.2.3.
    expect(() => auth.require(req("192.0.2.1", "guess"))).toThrow(AuthenticationError);
  });

  it("without a token (allowNoAuth) every call passes", () => {
    const auth = new EdgeAuth(null, limits, () => 0);
    for (let i = 0; i < 5; i++) expect(() => auth.require(req("192.0.2.1", "anything"))).not.toThrow();
    expect(auth.presents(req("192.0.2.1"))).toBe(true);
  });
});
