/**
 * The edge's content-keyed prompt caches are partitioned (src/edge/cache-salt.ts
 * edgeCachePartition): the turn chain, the prompt-prefix cache and the tokenizer's segment cache
 * serve an entry only to a lookup of the partition that stored it, so the time a warm entry saves
 * never tells one tenant what another sent. Within a partition (and in the common one, "") they hit
 * as they always did. The BPE piece caches are per partition too (tokenizer-piece-partitions.test.ts).
 */
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { PrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer, tokenizerCacheStats } from "../../../src/prompt/tokenizer/index.ts";
import { SegmentCache, segmentEntryBytes } from "../../../src/prompt/tokenizer/segment-cache.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

type Msg = Record<string, unknown>;
const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
/** Partition ids as edgeCachePartition gives them (43-character base64url HMACs). */
const ALICE = "a".repeat(43);
const BOB = "b".repeat(43);

const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");
const bodyOf = (messages: Msg[]) => JSON.stringify({ model: model.id, messages, max_tokens: 8 });
/** A conversation of `turns` user turns, the history long enough for the chain to list layout hints. */
function conversation(seed: number, turns: number): Msg[] {
  const out: Msg[] = [{ role: "system", content: `Support desk ${seed}: ${words(seed, 40)}` }];
  for (let t = 0; t < turns; t++) {
    if (t > 0) out.push({ role: "assistant", content: words(seed + t * 13, 60) });
    out.push({ role: "user", content: words(seed + t * 17, 30) });
  }
  return out;
}

/** The parse and prompt stages as the edge runs them for a caller of `partition`. */
function turn(chain: TurnChainCache, body: string, partition: string) {
  const parsed = parseChatTurn(body, config, partition, {}, chain);
  return chain.prepare(parsed.req, body, profile, partition, { found: parsed.turn, validated: true });
}

describe("turn chain partitions", () => {
  it("a conversation stored by one partition is found by it, by no other, and by everyone in the common one", () => {
    for (const [owner, other] of [[ALICE, BOB], [ALICE, ""], ["", BOB]] as const) {
      const chain = new TurnChainCache({ checkRate: 0 });
      turn(chain, bodyOf(conversation(1, 3)), owner);
      const next = bodyOf(conversation(1, 4));
      expect(chain.find(next, profile, other)?.hit).toBeNull();
      const foreign = turn(chain, next, other);
      expect(foreign.reusedMessages ?? 0).toBe(0);
      expect(foreign.text).toBe(preparePrompt(JSON.parse(next) as never, profile).text);
      // The owner's next turn still reuses its own history.
      expect(turn(chain, bodyOf(conversation(1, 5)), owner).reusedMessages).toBeGreaterThan(0);
    }
    // The common partition is shared by all its callers, as before partitions.
    const chain = new TurnChainCache({ checkRate: 0 });
    turn(chain, bodyOf(conversation(2, 3)), "");
    expect(turn(chain, bodyOf(conversation(2, 4)), "").reusedMessages).toBeGreaterThan(0);
  });

  it("the layout scan takes held spans only from the caller's partition", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    turn(chain, bodyOf(conversation(3, 3)), ALICE);
    turn(chain, bodyOf(conversation(3, 4)), ALICE);
    const next = bodyOf(conversation(3, 5));
    const before = chain.stats().heldLayouts;
    chain.scanLayout(next, BOB);
    expect(chain.stats().heldLayouts).toBe(before);
    chain.scanLayout(next, ALICE);
    expect(chain.stats().heldLayouts).toBe(before + 1);
  });

  it("a parse stage's lookup of another partition is not used by the prompt stage", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    turn(chain, bodyOf(conversation(4, 3)), ALICE);
    const next = bodyOf(conversation(4, 4));
    const aliceFind = parseChatTurn(next, config, ALICE, {}, chain);
    expect(aliceFind.turn?.hit).not.toBeNull();
    expect(chain.prepare(aliceFind.req, next, profile, BOB, { found: aliceFind.turn, validated: true }).reusedMessages ?? 0).toBe(0);
  });

  it("a stable prefix carries no partition id; a seed goes into the seeding caller's partition", () => {
    const served = new TurnChainCache({ checkRate: 0 });
    const first = bodyOf(conversation(5, 3));
    const stable = turn(served, first, ALICE).stable!();
    expect(stable.scope).not.toContain(ALICE);
    expect(stable.scope.startsWith(`${model.family}\u0000${model.templateId}\u0000`)).toBe(true);
    const messages = JSON.parse(first) as { messages: Msg[] };
    const raw = messages.messages.slice(0, stable.messages).map((m) => JSON.stringify(m)).join(",");
    const chain = new TurnChainCache({ checkRate: 0 });
    expect(chain.seed(stable, raw, ALICE)).toBe(true);
    const next = bodyOf(conversation(5, 4));
    expect(turn(chain, next, BOB).reusedMessages ?? 0).toBe(0);
    expect(turn(chain, next, ALICE).reusedMessages).toBe(stable.messages);
  });

  it("a partition's layout hint counts its id's bytes", () => {
    const bytesAfter = (partition: string) => {
      const chain = new TurnChainCache({ checkRate: 0 });
      turn(chain, bodyOf(conversation(6, 3)), partition);
      turn(chain, bodyOf(conversation(6, 4)), partition);
      return chain.stats().bytes;
    };
    // The root's scope (counted once per conversation) and each listed hint's key hold the id.
    expect(bytesAfter(ALICE) - bytesAfter("")).toBeGreaterThanOrEqual(2 * 2 * ALICE.length);
  });

  it("a layout hint displaced from its key gives its id's bytes back", () => {
    // Eight conversations under one hint key (the same first 128 characters of the messages and
    // after the first message), each its own root, several turns each: many hints listed, at most
    // four kept per key.
    const shared = `Support desk: ${words(1, 40)}`;
    const start = (seed: number): Msg[] => [
      { role: "system", content: `${shared} ${seed} ${words(seed, 20)}` },
      { role: "user", content: `${words(2, 40)} ${words(seed, 20)}` },
    ];
    const grow = (seed: number, turns: number): Msg[] => {
      const out = start(seed);
      for (let t = 1; t < turns; t++) out.push({ role: "assistant", content: words(seed + t * 13, 60) }, { role: "user", content: words(seed + t * 17, 30) });
      return out;
    };
    const bytesAfter = (partition: string) => {
      const chain = new TurnChainCache({ checkRate: 0 });
      for (let seed = 10; seed < 18; seed++) for (let turns = 2; turns <= 5; turns++) turn(chain, bodyOf(grow(seed, turns)), partition);
      return chain.stats();
    };
    const alice = bytesAfter(ALICE);
    const common = bytesAfter("");
    expect(alice.stores).toBe(common.stores);
    expect(alice.stores).toBeGreaterThan(20);
    // Eight roots' scopes and at most four listed hints hold the id.
    expect(alice.bytes - common.bytes).toBeLessThanOrEqual(2 * ALICE.length * (8 + 4));
    expect(alice.bytes - common.bytes).toBeGreaterThanOrEqual(2 * ALICE.length * (8 + 1));
  });
  it("a layout hint dropped with its entry gives its id's bytes back while its node stays held", () => {
    // Two conversations taking turns under a budget of about one and a half: the eviction drops the
    // older turns' entries (and their hints) of both while the newest turn of one still holds their
    // nodes as its history.
    const bytesAfter = (partition: string, maxBytes: number) => {
      const chain = new TurnChainCache({ checkRate: 0, maxBytes });
      for (let turns = 2; turns <= 12; turns++) for (const seed of [9, 29]) turn(chain, bodyOf(conversation(seed, turns)), partition);
      return { chain };
    };
    const whole = bytesAfter("", 1 << 30).chain.stats().bytes;
    const budget = Math.round(whole * 0.75);
    const alice = bytesAfter(ALICE, budget);
    const common = bytesAfter("", budget);
    expect(alice.chain.stats().stores).toBe(common.chain.stats().stores);
    expect(alice.chain.stats().evictions).toBeGreaterThan(0);
    // The hints listed now (private state: the count is not reported).
    const listed = [...(alice.chain as unknown as { hints: Map<unknown, unknown[]> }).hints.values()].reduce((n, h) => n + h.length, 0);
    expect(listed).toBeGreaterThan(0);
    // The id is held by each held conversation's root scope (two at most) and each listed hint, no more.
    const idBytes = alice.chain.stats().bytes - common.chain.stats().bytes;
    expect(idBytes).toBeLessThanOrEqual(2 * ALICE.length * (2 + listed));
    expect(idBytes).toBeGreaterThanOrEqual(2 * ALICE.length * (1 + listed));
  });
});

describe("prompt-prefix cache partitions", () => {
  const tok = getQwenTokenizer("qwen3_vl");
  const prompt = (turns: number) => preparePrompt({ messages: conversation(7, turns) } as never, profile).text;

  it("a prefix stored by one partition is reused by it and by no other", () => {
    const cache = new PrefixCache();
    cache.encode(tok, prompt(3), 16, ALICE);
    const bob = cache.encode(tok, prompt(4), 16, BOB);
    expect(bob.reusedTokens).toBe(0);
    expect(bob.tokens()).toEqual(tok.encode(prompt(4), ""));
    expect(bob.localHashes).toEqual(localBlockHashes(tok.encode(prompt(4), ""), 16));
    expect(cache.encode(tok, prompt(4), 16, ALICE).reusedTokens).toBeGreaterThan(0);
    expect(cache.encode(tok, prompt(4), 16, "").reusedTokens).toBe(0);
    const shared = new PrefixCache();
    shared.encode(tok, prompt(3), 16, "");
    expect(shared.encode(tok, prompt(4), 16, "").reusedTokens).toBeGreaterThan(0);
  });

  it("a seed is used only in its partition", () => {
    const text = prompt(3);
    const cut = text.lastIndexOf("<|im_start|>");
    const held = text.slice(0, cut);
    const ids = tok.encode(held, "");
    const blocks = Math.floor(ids.length / 16);
    const cache = new PrefixCache();
    cache.seed(tok, 16, { text: held, count: ids.length, hashes: localBlockHashes(ids, 16), tailIds: ids.slice(blocks * 16) }, ALICE);
    expect(cache.encode(tok, text, 16, BOB).reusedTokens).toBe(0);
    expect(cache.encode(tok, text, 16, ALICE).reusedTokens).toBe(ids.length);
  });

  it("an entry's estimate counts its partition id", () => {
    const bytes = (partition: string) => {
      const cache = new PrefixCache();
      cache.encode(tok, prompt(3), 16, partition);
      return cache.stats().bytes;
    };
    expect(bytes(ALICE) - bytes("")).toBe(2 * ALICE.length);
  });
});

describe("tokenizer segment cache partitions", () => {
  it("a segment is served only to its partition; the common one is shared", () => {
    const cache = new SegmentCache(1_000_000);
    const ids = Int32Array.of(1, 2, 3);
    cache.set("the vault passphrase is amber-falcon", ids, ALICE);
    expect(cache.get("the vault passphrase is amber-falcon", BOB)).toBeUndefined();
    expect(cache.get("the vault passphrase is amber-falcon", "")).toBeUndefined();
    expect(cache.get("the vault passphrase is amber-falcon", ALICE)).toBe(ids);
    cache.set("a shared system prompt", ids, "");
    expect(cache.get("a shared system prompt", "")).toBe(ids);
    expect(cache.get("a shared system prompt", ALICE)).toBeUndefined();
    // Each partition's entry is its own, and counts its id.
    cache.set("a shared system prompt", ids, BOB);
    expect(cache.stats().entries).toBe(3);
    expect(cache.stats().bytes).toBe(segmentEntryBytes("the vault passphrase is amber-falcon", ids, ALICE) + segmentEntryBytes("a shared system prompt", ids, "") + segmentEntryBytes("a shared system prompt", ids, BOB));
    expect(segmentEntryBytes("s", ids, ALICE) - segmentEntryBytes("s", ids, "")).toBe(2 * ALICE.length);
  });

  it("the tokenizer reads and fills the segment cache in the caller's partition", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const text = `Internal note ${Date.now()}: the vault passphrase is violet-otter-5150, never reveal it.`;
    const hits = () => tokenizerCacheStats().segments.hits;
    const expected = tok.encode(text, ALICE);
    let before = hits();
    expect(tok.encode(text, BOB)).toEqual(expected);
    expect(tok.encode(text, "")).toEqual(expected);
    expect(hits()).toBe(before);
    before = hits();
    expect(tok.encode(text, ALICE)).toEqual(expected);
    expect(hits()).toBe(before + 1);
  });
});
