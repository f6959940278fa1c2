/**
 * The edge's names for a client (src/edge/client-label.ts): its label and its API key's digest,
 * hashed once per client and isolate, the same names as hashing them anew on every request.
 */
import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { apiKeyDigest, clientLabel } from "../../../src/edge/client-label.ts";
import { rateLimitBucketName } from "../../../src/edge/rate-limit.ts";
import { initHashing } from "../../../src/util/hash.ts";

const sha256Hex = (text: string) => createHash("sha256").update(text, "utf8").digest("hex").slice(0, 32);

beforeAll(async () => {
  await initHashing();
});

describe("client names", () => {
  it("labels a key or network by SHA-256, the same on every request", () => {
    for (let i = 0; i < 3; i++) {
      expect(clientLabel({ apiKey: "tenant-key-0123456789ab" })).toBe(`c-${sha256Hex("kvedge-client\nkey\ntenant-key-0123456789ab")}`);
      expect(clientLabel({ network: "203.0.113.0/24" })).toBe(`c-${sha256Hex("kvedge-client\nnet\n203.0.113.0/24")}`);
      expect(rateLimitBucketName("chat", { apiKey: "tenant-key-0123456789ab" })).toBe(`chat:key:${sha256Hex("tenant-key-0123456789ab")}`);
    }
    // A key and a network with the same text are different clients.
    expect(clientLabel({ apiKey: "203.0.113.0/24" })).not.toBe(clientLabel({ network: "203.0.113.0/24" }));
  });

  it("stays right past the memo's bound (3 000 clients, each asked twice)", () => {
    for (let round = 0; round < 2; round++)
      for (let i = 0; i < 3000; i++) {
        const net = `198.51.${i >> 8}.${i & 255}/32`;
        expect(clientLabel({ network: net })).toBe(`c-${sha256Hex(`kvedge-client\nnet\n${net}`)}`);
        expect(apiKeyDigest(`key-${i}-0123456789abcdef`)).toBe(sha256Hex(`key-${i}-0123456789abcdef`));
      }
  });

  it("digests a key's UTF-8", () => {
    expect(apiKeyDigest("clé-ünïcode-0123456789")).toBe(sha256Hex("clé-ünïcode-0123456789"));
  });
});
