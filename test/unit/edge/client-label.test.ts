/**
 * The edge's names for a client (src/edge/client-label.ts): its label and its API key's digest,
 * hashed once per client and isolate, the same names as hashing them anew on every request, in
 * memos that never pass their bound.
 */
import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { apiKeyDigest, CLIENT_NAME_MEMO_ENTRIES, clientLabel, clientNameMemoSizes } from "../../../src/edge/client-label.ts";
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

  it("keeps at most its bound per memo, and stays right past it", () => {
    const clients = CLIENT_NAME_MEMO_ENTRIES + 100;
    const wrong: string[] = [];
    let largest = 0;
    for (let round = 0; round < 2; round++)
      for (let i = 0; i < clients; i++) {
        const net = `198.51.${i >> 8}.${i & 255}/32`;
        const key = `key-${i}-0123456789abcdef`;
        if (clientLabel({ network: net }) !== `c-${sha256Hex(`kvedge-client\nnet\n${net}`)}`) wrong.push(net);
        if (apiKeyDigest(key) !== sha256Hex(key)) wrong.push(key);
        const [labels, digests] = clientNameMemoSizes();
        largest = Math.max(largest, labels!, digests!);
      }
    expect(wrong).toEqual([]);
    expect(clientNameMemoSizes()).toHaveLength(2);
    // The memos reached their bound and never passed it.
    expect(largest).toBe(CLIENT_NAME_MEMO_ENTRIES);
  });

  it("digests a key's UTF-8", () => {
    expect(apiKeyDigest("clé-ünïcode-0123456789")).toBe(sha256Hex("clé-ünïcode-0123456789"));
  });
});
