/**
 * The edge's own warm caches are no oracle across tenants (docs/security.md): a warm turn chain,
 * prompt-prefix cache or tokenizer segment cache saves most of a request's edge time, so under
 * KVEDGE_KV_SHARING=per_tenant a request may use only entries its own tenant stored. Through the
 * chat and completions handlers (src/edge/chat.ts, completions/handler.ts), read by the caches' own
 * counters: no worker is up (the edge prepares the prompt, then answers 503), so the counters are
 * the edge's alone (a simulated worker in this process would tokenize with the same engine).
 * Another client network or API key that sends the same body finds nothing in any cache; the same
 * tenant reuses its history; under KVEDGE_KV_SHARING=shared every caller shares, as before.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { httpStatusOf, KvedgeError } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { handleCompletions } from "../../../src/edge/completions/handler.ts";
import { PrefixCache, sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer, tokenizerCacheStats } from "../../../src/prompt/tokenizer/index.ts";
import { sharedTurnChain, TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import type { ChatFrontDoor } from "../../../src/routing-index/front-door.ts";
import { initHashing } from "../../../src/util/hash.ts";
import type { ChatMessage } from "../../../src/api/responses-schema.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { assembleState, hydrate, nextPiece } from "../../../src/edge/responses/conversation-state.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const KEYS = ["key-alice-0123456789abcdef", "key-bob-0123456789abcdef", "key-carol-0123456789abcdef"];

beforeAll(() => initHashing());

/** A pool index with no worker up: every route answers none. */
function emptyIndex(): ChatFrontDoor {
  const core = new RoutingCore({ blockSize: 16 });
  return {
    route: async (r) => core.route(r),
    profile: async () => ({ blockSize: null, workers: 0, workersUp: 0, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async (s) => void core.settle(s),
    quarantine: async () => undefined,
    markPrefillDone: async (id) => core.markPrefillDone(id),
    receipts: async (entries) => void core.applyReceipts(entries),
  };
}

function depsFor(env: Record<string, string>): ChatDeps {
  const index = emptyIndex();
  const config = parseEdgeConfig({
    RELAY_SECRET: "relay-secret-for-this-test-0123456789",
    KVEDGE_RATE_LIMIT: "off",
    KVEDGE_WORKER_AUTH: "none",
    ADMIN_TOKEN: "admin-token-for-this-test-0123",
    KVEDGE_DEBUG_HEADERS: "on",
    KVEDGE_TURN_CHECK_RATE: "0",
    ...env,
  });
  return { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
}

let seed = 0;
/** A support conversation nobody else in this file sends: `turns` user turns, a system prompt holding a secret. */
function conversation(turns: number, id: number): unknown[] {
  const words = (k: number) => Array.from({ length: 40 }, (_, i) => `w${(id * 7919 + k * 131 + i * 31) % 997}`).join(" ");
  const out: unknown[] = [{ role: "system", content: `Support desk ${id}. Internal note, never reveal: the vault passphrase is amber-falcon-${id}. ${words(0)}` }];
  for (let t = 1; t <= turns; t++) {
    if (t > 1) out.push({ role: "assistant", content: words(2 * t) });
    out.push({ role: "user", content: words(2 * t + 1) });
  }
  return out;
}

/** What a request found in the edge's caches: turn-chain hits, prompt-prefix tokens reused, tokenizer segments served. */
interface Work {
  chainHits: number;
  prefixTokens: number;
  segmentHits: number;
}

function counters(): Work {
  return { chainHits: sharedTurnChain().stats().hits, prefixTokens: sharedPrefixCache().stats().reusedTokens, segmentHits: tokenizerCacheStats().segments.hits };
}

/** Runs a handler to its answer (503: no worker up, after the prompt was prepared) and reports the counters it moved. */
async function work(run: () => Promise<Response>): Promise<Work> {
  const before = counters();
  const status = await run().then(
    (r) => r.status,
    (e: unknown) => (e instanceof KvedgeError ? httpStatusOf(e) : 0),
  );
  expect(status).toBe(503);
  const after = counters();
  return { chainHits: after.chainHits - before.chainHits, prefixTokens: after.prefixTokens - before.prefixTokens, segmentHits: after.segmentHits - before.segmentHits };
}

function chat(deps: ChatDeps, messages: unknown[], headers: Record<string, string>): Promise<Work> {
  return work(() =>
    handleChatCompletions(new Request("http://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ model: MODEL, max_tokens: 2, messages }) }), deps),
  );
}

/** A request that found nothing of anyone else's: no turn-chain hit, no prefix tokens, only the segments a first sender finds. */
function nothingFound(w: Work, first: Work): void {
  expect(first.chainHits + first.prefixTokens).toBe(0);
  expect(w).toEqual(first);
}

/**
 * A conversation's turn 4 sent first by a client nobody else is (`first`: what a body's first sender
 * finds, its own repeated segments such as the "\n" between messages), then turn 3 by `owner`, turn
 * 4 by `other`, and turn 4 by `owner` again.
 */
async function probe(deps: ChatDeps, owner: Record<string, string>, other: Record<string, string>, firstSender: Record<string, string> | null = null): Promise<{ first: Work; other: Work; owner: Work }> {
  const id = ++seed;
  const next = conversation(4, id);
  const first = await chat(deps, next, firstSender ?? { "cf-connecting-ip": `100.64.0.${id}` });
  await chat(deps, conversation(3, id), owner);
  const otherWork = await chat(deps, next, other);
  return { first, other: otherWork, owner: await chat(deps, next, owner) };
}

describe("per_tenant (default): the edge's caches are the tenant's own", () => {
  let deps: ChatDeps;
  beforeAll(() => {
    deps = depsFor({ KVEDGE_ACCESS: "public" });
  });

  it("another client network reuses nothing of a conversation; its own network (same /64) reuses its history", async () => {
    const { first, other, owner } = await probe(deps, { "cf-connecting-ip": "2001:db8:7:1::10" }, { "cf-connecting-ip": "2001:db8:7:2::10" });
    nothingFound(other, first);
    // The owner's turn: the history's render and tokens come from its caches.
    expect(owner.chainHits).toBe(1);
    expect(owner.prefixTokens).toBeGreaterThan(500);
    const again = await chat(deps, conversation(4, seed), { "cf-connecting-ip": "2001:db8:7:1::99" });
    expect(again.chainHits).toBe(1);
  });

  it("an anonymous caller on an admin's network is not the admin", async () => {
    const { first, other, owner } = await probe(deps, { authorization: "Bearer admin-token-for-this-test-0123", "cf-connecting-ip": "192.0.2.1" }, { "cf-connecting-ip": "192.0.2.1" });
    nothingFound(other, first);
    expect(owner.chainHits).toBe(1);
  });

  it("API-key tenants: another key reuses nothing, the same key does", async () => {
    const keyed = depsFor({ KVEDGE_API_KEYS: KEYS.join(",") });
    const { first, other, owner } = await probe(keyed, { authorization: `Bearer ${KEYS[0]}` }, { authorization: `Bearer ${KEYS[1]}` }, { authorization: `Bearer ${KEYS[2]}` });
    nothingFound(other, first);
    expect(owner.chainHits).toBe(1);
  });

  it("completions: a prompt tokenized for one network is not served from the segment cache to another", async () => {
    const prompt = `Completion probe ${++seed}: the vault passphrase is violet-otter-5150 and the door code is 4471.`;
    const complete = async (ip: string): Promise<number> => {
      const w = await work(() => handleCompletions(new Request("http://edge/v1/completions", { method: "POST", headers: { "content-type": "application/json", "cf-connecting-ip": ip }, body: JSON.stringify({ model: MODEL, max_tokens: 2, prompt }) }), deps));
      return w.segmentHits;
    };
    // One segment, the whole prompt (no added token in it).
    expect(await complete("198.51.100.7")).toBe(0);
    expect(await complete("203.0.113.9")).toBe(0);
    expect(await complete("198.51.100.7")).toBe(1);
  });
});

describe("shared: one common partition, as before", () => {
  it("another network reuses the conversation", async () => {
    const deps = depsFor({ KVEDGE_ACCESS: "public", KVEDGE_KV_SHARING: "shared" });
    const { other } = await probe(deps, { "cf-connecting-ip": "198.51.100.7" }, { "cf-connecting-ip": "203.0.113.9" });
    expect(other.chainHits).toBe(1);
    expect(other.prefixTokens).toBeGreaterThan(500);
  });
});

describe("Responses: a stored conversation seeds the caller's partition only", () => {
  it("hydrate's turn-chain and prompt-prefix entries are found by the seeding tenant, by no other", () => {
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public" });
    const model = config.models[0]!;
    const profile = { family: model.family, templateId: model.templateId };
    const [ALICE, BOB] = ["a".repeat(43), "b".repeat(43)];
    const id = ++seed;
    const history = conversation(3, id).slice(1).concat([{ role: "assistant", content: "Stored answer." }]) as ChatMessage[];
    const first = JSON.stringify({ model: model.id, messages: history.slice(0, -1) });
    // The turn that stored the record: its stable prefix and piece, as the handler keeps them.
    const served = new TurnChainCache({ checkRate: 0 });
    const stable = served.prepare(parseChatBody(first, config.limits), first, profile, ALICE, { validated: true }).stable!();
    const state = assembleState([nextPiece(null, stable, null, model, ALICE)])!;
    const body = JSON.stringify({ model: model.id, messages: [...history, { role: "user", content: `Next question ${id}` }] });
    const turnChain = new TurnChainCache({ checkRate: 0 });
    const prefixCache = new PrefixCache();
    hydrate(state, history, body, model, { checkRate: 0, turnChain, prefixCache, partition: ALICE });
    expect(turnChain.find(body, profile, BOB)?.hit).toBeNull();
    expect(turnChain.find(body, profile, ALICE)?.hit?.node.messages).toBe(stable.messages);
    const text = preparePrompt(parseChatBody(body, config.limits), profile).text;
    const tok = getQwenTokenizer(model.family);
    expect(prefixCache.encode(tok, text, model.blockSize, BOB).reusedTokens).toBe(0);
    expect(prefixCache.encode(tok, text, model.blockSize, ALICE).reusedTokens).toBeGreaterThan(0);
  });
});
