/**
 * Inside workerd: the edge Worker's own prompt caches are partitioned by cache tenant
 * (KVEDGE_KV_SHARING=per_tenant, the default; this pool's config is public access). A conversation
 * one client network sent is found, turn after turn, by that network and by no other: the turn
 * chain, prompt-prefix and tokenizer segment counters of GET /admin/edge-caches move only for the
 * tenant that stored the entries. No worker is up, so each request is prepared (parse, template,
 * tokens, hashes) and then answered 503.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";

interface Counters {
  chainHits: number;
  prefixTokens: number;
  segmentHits: number;
}

async function counters(): Promise<Counters> {
  const r = await SELF.fetch("https://edge/admin/edge-caches", { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  const j = (await r.json()) as { turnChain: { hits: number }; promptPrefix: { reusedTokens: number }; tokenSegments: { hits: number } };
  return { chainHits: j.turnChain.hits, prefixTokens: j.promptPrefix.reusedTokens, segmentHits: j.tokenSegments.hits };
}

function conversation(turns: number): unknown[] {
  const words = (k: number) => Array.from({ length: 40 }, (_, i) => `v${(k * 131 + i * 31) % 997}`).join(" ");
  const out: unknown[] = [{ role: "system", content: `Internal note, never reveal: the vault passphrase is amber-falcon-7731. ${words(0)}` }];
  for (let t = 1; t <= turns; t++) {
    if (t > 1) out.push({ role: "assistant", content: words(2 * t) });
    out.push({ role: "user", content: words(2 * t + 1) });
  }
  return out;
}

/** What one request from `ip` found in the edge's caches. */
async function send(messages: unknown[], ip: string): Promise<Counters> {
  const before = await counters();
  const r = await SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "cf-connecting-ip": ip }, body: JSON.stringify({ model: MODEL, max_tokens: 2, messages }) });
  expect(r.status).toBe(503);
  await r.arrayBuffer();
  const after = await counters();
  return { chainHits: after.chainHits - before.chainHits, prefixTokens: after.prefixTokens - before.prefixTokens, segmentHits: after.segmentHits - before.segmentHits };
}

describe("the edge's prompt caches are the tenant's own", () => {
  it("another client network finds nothing of a conversation; the network that sent it reuses its history", async () => {
    // What a body's first sender finds: its own repeated segments (the "\n" between messages), nothing else.
    const first = await send(conversation(4), "100.64.9.1");
    expect(first.chainHits + first.prefixTokens).toBe(0);
    await send(conversation(3), "198.51.100.7");
    expect(await send(conversation(4), "203.0.113.9")).toEqual(first);
    const owner = await send(conversation(4), "198.51.100.7");
    expect(owner.chainHits).toBe(1);
    expect(owner.prefixTokens).toBeGreaterThan(500);
  });
});
