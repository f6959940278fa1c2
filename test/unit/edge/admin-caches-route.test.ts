/**
 * GET /admin/edge-caches: this isolate's cache budgets and each cache's counters (prompt prefix,
 * turn chain, media items, layouts and views, media policy checks and store URL signatures), behind
 * the admin token (the edge benchmark reads its hit rates there).
 */
import { describe, expect, it } from "vitest";
import { AuthenticationError } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleAdminRoute, type AdminDeps } from "../../../src/edge/admin-routes.ts";
import { storeSigner, verifyMedia } from "../../../src/edge/media.ts";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";
import { importMediaUrlKey } from "../../../src/media/signed-url.ts";
import { sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";

const ADMIN = "edge-caches-admin-token-0123456789";
const deps: AdminDeps = {
  config: parseEdgeConfig({ KVEDGE_ACCESS: "public", ADMIN_TOKEN: ADMIN }),
  index: () => {
    throw new Error("the route asks no index");
  },
  fetch: () => Promise.reject(new Error("the route fetches nothing")),
};

interface EdgeCaches {
  caches: { name: string; bytes: number; maxBytes: number }[];
  promptPrefix: { hits: number; misses: number; maxTokens: number };
  turnChain: { hits: number; misses: number; maxBytes: number };
  mediaItems: { hits: number; misses: number; maxBytes: number };
  mediaLayouts: { computed: number; reused: number; keysBuilt: number; maxBytes: number };
  mediaViews: { hits: number; misses: number; hashedBlocks: number; joinedHashes: number; maxBytes: number };
  mediaWork: { policyChecks: number; storeSignatures: number };
}

async function edgeCaches(): Promise<EdgeCaches> {
  const r = await handleAdminRoute(new Request("https://edge/admin/edge-caches", { headers: { authorization: `Bearer ${ADMIN}` } }), deps);
  expect(r.status).toBe(200);
  expect(r.headers.get("cache-control")).toBe("no-store");
  return (await r.json()) as EdgeCaches;
}

describe("GET /admin/edge-caches", () => {
  it("answers the isolate's budgets and the prompt-prefix cache's lookups as they happen", async () => {
    await initHashing();
    const before = await edgeCaches();
    expect(before.caches.map((c) => c.name)).toEqual(expect.arrayContaining(["prompt_prefix", "turn_chain", "token_segments"]));
    for (const c of before.caches) expect(c.bytes).toBeLessThanOrEqual(c.maxBytes);
    expect(before.promptPrefix.maxTokens).toBeGreaterThan(0);
    expect(before.turnChain.maxBytes).toBeGreaterThan(0);
    const tok = getQwenTokenizer("qwen3_vl");
    // A chat prompt, then its next turn: the cache keys prefixes at <|im_start|>, so the second finds the first's.
    const first = `<|im_start|>user\nedge-caches route ${"a conversation that comes back ".repeat(40)}<|im_end|>\n<|im_start|>assistant\n`;
    sharedPrefixCache().encode(tok, first, 16, "");
    sharedPrefixCache().encode(tok, `${first}An answer.<|im_end|>\n<|im_start|>user\nAnd again?<|im_end|>\n<|im_start|>assistant\n`, 16, "");
    const after = await edgeCaches();
    expect(after.promptPrefix.misses - before.promptPrefix.misses).toBe(1);
    expect(after.promptPrefix.hits - before.promptPrefix.hits).toBe(1);
  });

  it("answers the media caches' counters and the media work: a URL checked against the policy and a store URL signed are counted", async () => {
    const before = await edgeCaches();
    expect(before.mediaItems.maxBytes).toBeGreaterThan(0);
    expect(before.mediaLayouts).toMatchObject({ computed: expect.any(Number), reused: expect.any(Number), keysBuilt: expect.any(Number) });
    expect(before.mediaViews).toMatchObject({ hits: expect.any(Number), hashedBlocks: expect.any(Number), joinedHashes: expect.any(Number) });
    // A refused URL: checked, never fetched. A store URL: signed once, then given again from the signer's keep.
    const media = { fetcher: new SafeFetcher({}), decode: new DecodeClient({}), inlineMaxBytes: 1 << 20, sign: null, forwardClientUrls: false };
    await expect(verifyMedia([{ kind: "image", url: "http://10.0.0.1/x.png", param: "messages[0].content[0]" }], media)).rejects.toMatchObject({ reason: "blocked_address" });
    const sign = storeSigner("https://store.example", importMediaUrlKey("edge-caches-media-url-key-0123456789"), 60);
    const url = await sign("a".repeat(64), "w1");
    expect(sign("a".repeat(64), "w1")).toBe(url);
    const after = await edgeCaches();
    expect(after.mediaWork.policyChecks - before.mediaWork.policyChecks).toBe(1);
    expect(after.mediaWork.storeSignatures - before.mediaWork.storeSignatures).toBe(1);
  });

  it("needs the admin token", async () => {
    await expect(handleAdminRoute(new Request("https://edge/admin/edge-caches"), deps)).rejects.toThrow(AuthenticationError);
  });
});
