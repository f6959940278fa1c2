/**
 * The incremental path's sampled checks (src/edge/chat/exactness-check.ts, src/edge/exactness.ts):
 * for each stage built from cached pieces, a cached piece is corrupted in place (a prompt-prefix
 * entry's ids, its block hashes, its partial last block's ids; a kept media view's hashes; a turn
 * chain entry's validated messages; its UTF-8 body escaping), then a sampled request through the
 * stage as the handler runs it gets the full path's exact result, the kind's mismatch counter
 * moves (GET /admin/edge-caches and /metrics), and the entries holding the piece are dropped: the
 * next, unsampled, request is exact too. With the check rate at 0 nothing is checked.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { ChatCompletionRequest } from "../../../src/api/openai-schema.ts";
import { localBlockHashes, namespacedLocalHashWords, namespaceTag, type NamespaceTag } from "../../../src/blocks/block-hash.ts";
import { parseEdgeConfig, type EdgeConfig } from "../../../src/config/config.ts";
import { handleAdminRoute } from "../../../src/edge/admin-routes.ts";
import { edgeCacheReport } from "../../../src/edge/cache-budgets.ts";
import { routedHashes } from "../../../src/edge/cache-salt.ts";
import { checkedEncode, checkedRoutedHashes } from "../../../src/edge/chat/exactness-check.ts";
import { planMediaRouting } from "../../../src/edge/chat/layout.ts";
import { routeItems } from "../../../src/edge/chat/routed-items.ts";
import { parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { prepareRouting, type PrepareDeps, type PreparedRouting } from "../../../src/edge/chat/prepare.ts";
import { chatUpstreamBody } from "../../../src/edge/chat/upstream-body.ts";
import type { VerifiedMedia } from "../../../src/edge/media.ts";
import type { ExactnessKind } from "../../../src/edge/exactness.ts";
import { cohortEligibility, SGLANG_CONTRACT_KEY, type LayoutPiece } from "../../../src/layout/index.ts";
import { sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { modelParsers } from "../../../src/proxy/chat-output.ts";
import type { ChatFrontDoor } from "../../../src/routing-index/front-door.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";

beforeAll(() => initHashing());
afterEach(() => vi.restoreAllMocks());

const ADMIN = "exactness-check-admin-token-0123456789";
const configAt = (rate: string): EdgeConfig => parseEdgeConfig({ KVEDGE_ACCESS: "public", ADMIN_TOKEN: ADMIN, KVEDGE_TURN_CHECK_RATE: rate });
/** Every stage checked, and none. */
const always = configAt("1");
const never = configAt("0");
const model = always.models[0]!;
const tok = getQwenTokenizer(model.family);
const BLOCK = model.blockSize;

let cohort: ReturnType<typeof cohortEligibility>;
beforeAll(async () => {
  await initHashing();
  cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
});
const fail = (): never => {
  throw new Error("not used by these stages");
};
const index: ChatFrontDoor = {
  profile: async () => {
    if (!cohort.ok) throw new Error(cohort.reason);
    return { blockSize: null, workers: 1, workersUp: 1, cohort };
  },
  route: fail,
  settle: fail,
  quarantine: fail,
  markPrefillDone: fail,
  receipts: fail,
};
const depsOf = (config: EdgeConfig): PrepareDeps => ({ config, index: () => index, fetch: fail });

const prose = (seed: number, words: number) => Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 997}`).join(" ");

function mismatches(kind: ExactnessKind): number {
  return edgeCacheReport().exactness[kind].mismatches;
}
function checks(kind: ExactnessKind): number {
  return edgeCacheReport().exactness[kind].checks;
}

/** The whole path's ids and block hashes of a prepared prompt. */
function fullEncode(prep: PreparedRouting): { ids: number[]; hashes: bigint[] } {
  const ids = tok.encode(prep.prompt.text, "");
  return { ids, hashes: localBlockHashes(ids, BLOCK) };
}

/** A text chat's turn through the prompt stage (rendered whole: only the prompt-prefix cache is reused). */
async function textTurn(config: EdgeConfig, messages: unknown[]): Promise<PreparedRouting> {
  const req = parseChatBody(JSON.stringify({ model: model.id, messages }), config.limits);
  return prepareRouting(req, depsOf(config), "");
}

/** A conversation's messages after `turns` answered turns plus a new question. */
function textConversation(seed: number, turns: number): unknown[] {
  const messages: unknown[] = [{ role: "system", content: `Exactness check ${seed}. ${prose(seed, 40)}` }];
  for (let t = 0; t < turns; t++) messages.push({ role: "user", content: prose(seed * 10 + t, 90) }, { role: "assistant", content: prose(seed * 20 + t, 70) });
  messages.push({ role: "user", content: prose(seed * 10 + turns, 90) });
  return messages;
}

/** Parses and prepares `body` through `chain`, its parse check drawn (sampled) or not; the request. */
function servedBy(chain: TurnChainCache, profile: Parameters<TurnChainCache["prepare"]>[2]) {
  return (body: string, sampled: boolean) => {
    const parsed = parseChatTurn(body, always, "", { random: () => (sampled ? 0 : 1) }, chain);
    chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
    return parsed.req;
  };
}

/** Every held entry's validated messages in `chain` given other content; how many entries. */
function poisonParsed(chain: readonly { parsed: readonly ChatCompletionRequest["messages"][number][] | null }[]): number {
  let poisoned = 0;
  for (const n of chain) {
    if (!n.parsed) continue;
    n.parsed = n.parsed.map((m) => ({ ...m, content: "poisoned" }) as typeof m);
    poisoned++;
  }
  return poisoned;
}

function expectExact(prep: PreparedRouting): void {
  const full = fullEncode(prep);
  expect(prep.tokens).toEqual(full.ids);
  expect(prep.plan.isl).toBe(full.ids.length);
  expect(prep.plan.localHashes).toEqual(full.hashes);
}

describe("sampled checks of the prompt-prefix cache", () => {
  it("a cached piece's ids corrupted: the sampled request gets the whole encode, prompt_ids counts it, the entry is dropped", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const first = await textTurn(never, textConversation(1, 1));
    // The first turn's stored piece (up to its generation prompt) is the cache's own array.
    const stored = first.idPieces![0] as number[];
    expect(stored.length).toBeGreaterThan(BLOCK);
    stored[3] = stored[3] === 100 ? 101 : 100;
    const before = mismatches("prompt_ids");
    const checked = await textTurn(always, textConversation(1, 2));
    expect(checked.prompt.text.startsWith(first.prompt.text)).toBe(true);
    expectExact(checked);
    expect(mismatches("prompt_ids")).toBe(before + 1);
    // Dropped: the next turn, unchecked, does not reuse the corrupted piece.
    expectExact(await textTurn(never, textConversation(1, 3)));
  });

  it("a cached piece's block hashes corrupted: the sampled request gets the whole hashes, block_hashes counts it, the entry is dropped", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    await textTurn(never, textConversation(2, 1));
    const second = await textTurn(never, textConversation(2, 2));
    // A hit: its first hash piece is the first turn's stored piece's own array.
    expect(second.prompt.text.length).toBeGreaterThan(0);
    const cachedHashes = second.plan.hashPieces![0] as bigint[];
    expect(cachedHashes.length).toBeGreaterThan(0);
    cachedHashes[0] = cachedHashes[0]! ^ 1n;
    const [ids, hashes] = [mismatches("prompt_ids"), mismatches("block_hashes")];
    expectExact(await textTurn(always, textConversation(2, 3)));
    expect(mismatches("block_hashes")).toBe(hashes + 1);
    expect(mismatches("prompt_ids")).toBe(ids);
    const line = JSON.parse(String(warn.mock.calls.at(-1)![0])) as Record<string, unknown>;
    expect(line).toMatchObject({ event: "exactness_mismatch", kind: "block_hashes" });
    // Sizes only: no request text in the line.
    expect(Object.values(line).every((v) => typeof v === "number" || v === "exactness_mismatch" || v === "block_hashes")).toBe(true);
    expectExact(await textTurn(never, textConversation(2, 4)));
  });

  it("the partial last block's ids corrupted: the block that spans the cached prefix's end is hashed from the whole encode", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    // A first turn whose stored piece does not end at a block boundary.
    let seed = 3;
    let first = await textTurn(never, textConversation(seed, 1));
    while ((first.idPieces![0]!.length % BLOCK) === 0) first = await textTurn(never, textConversation(++seed, 1));
    const stored = first.idPieces![0] as number[];
    const last = stored.length - 1;
    // Past the last full block: only the next turn's hashing reads it (idsFrom), no stored hash covers it.
    expect(last).toBeGreaterThanOrEqual(Math.floor(stored.length / BLOCK) * BLOCK);
    stored[last] = stored[last] === 100 ? 101 : 100;
    const before = mismatches("prompt_ids");
    const checked = await textTurn(always, textConversation(seed, 2));
    expectExact(checked);
    expect(mismatches("prompt_ids")).toBe(before + 1);
    expectExact(await textTurn(never, textConversation(seed, 3)));
  });

  it("a tokenizer segment-cache entry corrupted: the reference encode does not read it, prompt_ids counts it, the next turn is exact", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const system = `Exactness segment check. ${prose(47, 40)}`;
    // The truth: encoded in a partition no cache entry is in, before anything is corrupted.
    const truthOf = (text: string) => tok.encode(text, `exactness-truth-${text.length}-${Math.random()}`);
    const conversation = (turns: number) => [{ role: "system", content: system }, ...(textConversation(47, turns).slice(1))];
    tok.encode(`<|im_start|>system\n${system}<|im_end|>\n`, "");
    const buckets = (tok as unknown as { engine: { segments: { map: Map<unknown, { text: string; ids: Int32Array }[]> } } }).engine.segments.map;
    let corrupted = 0;
    for (const bucket of buckets.values())
      for (const e of bucket)
        if (e.text.includes(system)) {
          e.ids[2] = e.ids[2] === 100 ? 101 : 100;
          corrupted++;
        }
    expect(corrupted).toBeGreaterThan(0);
    // The prompt-prefix cache stores the first turn's ids as the segment cache gave them.
    const first = await textTurn(never, conversation(1));
    expect(first.tokens).not.toEqual(truthOf(first.prompt.text));
    const before = mismatches("prompt_ids");
    const checked = await textTurn(always, conversation(2));
    expect(mismatches("prompt_ids")).toBe(before + 1);
    const truth = truthOf(checked.prompt.text);
    expect(checked.tokens).toEqual(truth);
    expect(checked.plan.localHashes).toEqual(localBlockHashes(truth, BLOCK));
    expect(JSON.parse(String(warn.mock.calls.at(-1)![0]))).toMatchObject({ kind: "prompt_ids", tokenizerCaches: 1 });
    // The tokenizer's caches were emptied and the entry dropped: the next, unchecked, turn is exact.
    const next = await textTurn(never, conversation(3));
    expect(next.tokens).toEqual(truthOf(next.prompt.text));
  });

  it("a branch off a corrupted piece: every entry extending it is dropped, not only those the sampled request used", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const first = await textTurn(never, textConversation(48, 1));
    await textTurn(never, textConversation(48, 2));
    await textTurn(never, textConversation(48, 3));
    const stored = first.idPieces![0] as number[];
    stored[3] = stored[3] === 100 ? 101 : 100;
    // A branch off turn 1 (its last question changed): it hits turn 1's entry only, not turn 2's or 3's, which extend it.
    const branch = textConversation(48, 2);
    const last = branch.at(-1) as { role: string; content: string };
    branch[branch.length - 1] = { ...last, content: `${last.content} branch` };
    const before = mismatches("prompt_ids");
    expectExact(await textTurn(always, branch));
    expect(mismatches("prompt_ids")).toBe(before + 1);
    // Turn 3's entry held the corrupted piece too: gone, so the next unsampled turn is exact.
    expectExact(await textTurn(never, textConversation(48, 4)));
  });

  it("a wrong token count with the right pieces: prompt_ids counts it and the whole encode's count is used", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const text = `<|im_start|>system\nExactness count check. ${prose(45, 120)}<|im_end|>\n<|im_start|>user\n${prose(46, 60)}<|im_end|>\n<|im_start|>assistant\n`;
    const cache = sharedPrefixCache();
    const right = cache.encode(tok, text, BLOCK, "");
    const ids = tok.encode(text, "");
    expect(right.length).toBe(ids.length);
    // Every piece and hash as they should be; only the count that the context fit and isl read is off.
    const wrong = { ...right, length: right.length + 1, tokens: right.tokens };
    const before = mismatches("prompt_ids");
    const checked = checkedEncode(wrong, { tokenizer: tok, text, blockSize: BLOCK, partition: "" }, cache);
    expect(mismatches("prompt_ids")).toBe(before + 1);
    expect(checked.length).toBe(ids.length);
    expect(checked.tokens()).toEqual(ids);
    expect(checked.localHashes).toEqual(localBlockHashes(ids, BLOCK));
    // The right one passes.
    expect(checkedEncode(right, { tokenizer: tok, text, blockSize: BLOCK, partition: "" }, cache)).toBe(right);
    expect(mismatches("prompt_ids")).toBe(before + 1);
  });

  it("with the check rate at 0 nothing is checked", async () => {
    const before = [checks("prompt_ids"), checks("block_hashes"), checks("generate_body")];
    await textTurn(never, textConversation(40, 1));
    await textTurn(never, textConversation(40, 2));
    expect([checks("prompt_ids"), checks("block_hashes"), checks("generate_body")]).toEqual(before);
    await textTurn(always, textConversation(40, 3));
    expect(checks("prompt_ids")).toBe(before[0]! + 1);
  });
});

const image = (n: number, width: number, height: number, digestBase = 0xe0000): VerifiedMedia => ({ kind: "image", forward: null, stored: true, digest: (digestBase + n).toString(16).padStart(64, "0"), metadata: { modality: "image", width, height }, unresolved: null });

/** A vision chat's turn through the media layout stage (the template from the prompt-prefix cache); `digestBase` names its images' bytes, `itemTag` its namespace. */
async function visionTurn(config: EdgeConfig, turns: number, branch = "", digestBase = 0xe0000, itemTag: NamespaceTag = null) {
  let text = `<|im_start|>system\nExactness view check.<|im_end|>\n`;
  const media: VerifiedMedia[] = [];
  const messages: unknown[] = [];
  for (let t = 0; t <= turns; t++) {
    media.push(image(t, 320 + 32 * t, 240, digestBase));
    text += `<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>${prose(50 + t, 30)}${t === turns ? branch : ""}<|im_end|>\n<|im_start|>assistant\n`;
    messages.push({ role: "user", content: [{ type: "image_url", image_url: { url: `https://example.com/${t}.png` } }, { type: "text", text: "q" }] });
    if (t < turns) {
      text += `${prose(60 + t, 20)}<|im_end|>\n`;
      messages.push({ role: "assistant", content: "a" });
    }
  }
  const template = sharedPrefixCache().encode(tok, text, BLOCK, "");
  const req = { model: model.id, messages, n: 1 } as unknown as ChatCompletionRequest;
  const plan = await planMediaRouting({ config, req, model, index, template, media: { parts: [], media, leased: [] }, itemTag });
  expect(plan.fallbackReason).toBeNull();
  return plan;
}

describe("sampled check of the media view hashes", () => {
  it("a kept view's hashes corrupted: the sampled request gets the whole view's hashes, view_hashes counts it, the kept pieces are dropped", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    await visionTurn(never, 0);
    const second = await visionTurn(never, 1);
    const kept = second.hashPieces![0] as bigint[];
    expect(kept.length).toBeGreaterThan(0);
    kept[0] = kept[0]! ^ 1n;
    const before = mismatches("view_hashes");
    const checked = await visionTurn(always, 2);
    expect(checked.localHashes).toEqual(localBlockHashes(checked.view!.tokens, BLOCK));
    expect(checked.isl).toBe(checked.view!.tokens.length);
    expect(mismatches("view_hashes")).toBe(before + 1);
    const next = await visionTurn(never, 3);
    expect(next.localHashes).toEqual(localBlockHashes(next.view!.tokens, BLOCK));
  });

  it("a kept view piece corrupted under a branch: every kept piece extending it is dropped, a sibling that went further too", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    await visionTurn(never, 0);
    const second = await visionTurn(never, 1);
    await visionTurn(never, 2);
    const kept = second.hashPieces![0] as bigint[];
    expect(kept.length).toBeGreaterThan(0);
    kept[0] = kept[0]! ^ 1n;
    const before = mismatches("view_hashes");
    // A branch of turn 1 (its question changed): it reuses the first kept piece, not turn 2's, which extends it.
    const branched = await visionTurn(always, 1, " branch");
    expect(branched.localHashes).toEqual(localBlockHashes(branched.view!.tokens, BLOCK));
    expect(mismatches("view_hashes")).toBe(before + 1);
    const next = await visionTurn(never, 3);
    expect(next.localHashes).toEqual(localBlockHashes(next.view!.tokens, BLOCK));
  });
});

describe("sampled check of the media items' routed forms", () => {
  it("a kept item's routed form corrupted: the sampled request routes on every item laid out again, routed_items counts it, the kept entry is dropped", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    if (!cohort.ok) throw new Error(cohort.reason);
    const bytes = 0xf1000;
    // The same images in another namespace (their own kept entries): the same pad counts, so the same view length and spans.
    const other = namespaceTag("routed-items-check");
    const truth = await visionTurn(never, 2, "", bytes, other);
    const truthNext = await visionTurn(never, 3, "", bytes, other);
    await visionTurn(never, 1, "", bytes);
    // Turn 0's image as the memo keeps it (routeItems gives the kept form itself): one more pad token.
    const kept = routeItems([image(0, 320, 240, bytes)], cohort, null).routed[0]!;
    if (!kept.ok) throw new Error(kept.detail);
    const pieces = kept.pieces as LayoutPiece[];
    const at = pieces.findIndex((p) => p.kind === "pad");
    const pad = pieces[at] as Extract<LayoutPiece, { kind: "pad" }>;
    pieces[at] = { ...pad, count: pad.count + 1 };
    const before = mismatches("routed_items");
    const checksBefore = checks("routed_items");
    const checked = await visionTurn(always, 2, "", bytes);
    expect(checks("routed_items")).toBe(checksBefore + 1);
    expect(mismatches("routed_items")).toBe(before + 1);
    expect(checked.isl).toBe(truth.isl);
    expect(checked.view!.spans).toEqual(truth.view!.spans);
    // Unsampled: turn 0's image is laid out again, not taken from the dropped entry.
    const next = await visionTurn(never, 3, "", bytes);
    expect(next.isl).toBe(truthNext.isl);
    expect(next.view!.spans).toEqual(truthNext.view!.spans);
  });

  it("kept forms as the whole path gives them: a sampled request keeps them and counts no mismatch", async () => {
    await visionTurn(never, 1, "", 0xf2000);
    const before = mismatches("routed_items");
    const checksBefore = checks("routed_items");
    await visionTurn(always, 2, "", 0xf2000);
    expect(checks("routed_items")).toBe(checksBefore + 1);
    expect(mismatches("routed_items")).toBe(before);
  });
});

describe("sampled check of the parse's reused messages", () => {
  it("an entry's validated messages corrupted: the sampled parse is the whole one, parse counts it, the entries are dropped", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const chain = new TurnChainCache({ checkRate: 1 });
    const profile = { family: model.family, templateId: model.templateId };
    const bodyAt = (turns: number) => JSON.stringify({ model: model.id, messages: textConversation(70, turns) });
    const serve = servedBy(chain, profile);
    serve(bodyAt(1), false);
    serve(bodyAt(2), false);
    const found = chain.find(bodyAt(3), profile, "")!;
    expect(found.hit).not.toBeNull();
    expect(poisonParsed(found.hit!.chain)).toBeGreaterThan(0);
    const before = mismatches("parse");
    expect(JSON.stringify(serve(bodyAt(3), true))).toBe(JSON.stringify(parseChatBody(bodyAt(3), always.limits)));
    expect(mismatches("parse")).toBe(before + 1);
    // Dropped: an unchecked parse of the next body reuses nothing poisoned.
    expect(JSON.stringify(serve(bodyAt(4), false))).toBe(JSON.stringify(parseChatBody(bodyAt(4), always.limits)));
  });
});

describe("sampled check of the parse's reused messages, on a branch", () => {
  it("the branch's hit chain poisoned: every entry extending it is dropped, a sibling that went further too", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const chain = new TurnChainCache({ checkRate: 1 });
    const profile = { family: model.family, templateId: model.templateId };
    const bodyOf = (messages: unknown[]) => JSON.stringify({ model: model.id, messages });
    const serve = servedBy(chain, profile);
    for (const turns of [1, 2, 3]) serve(bodyOf(textConversation(71, turns)), false);
    const branch = textConversation(71, 2);
    const last = branch.at(-1) as { role: string; content: string };
    branch[branch.length - 1] = { ...last, content: `${last.content} branch` };
    const found = chain.find(bodyOf(branch), profile, "")!;
    expect(poisonParsed(found.hit!.chain)).toBeGreaterThan(0);
    const before = mismatches("parse");
    expect(JSON.stringify(serve(bodyOf(branch), true))).toBe(JSON.stringify(parseChatBody(bodyOf(branch), always.limits)));
    expect(mismatches("parse")).toBe(before + 1);
    // Turn 3's entry extends the poisoned ones but was not the branch's hit: dropped as well.
    const next = bodyOf(textConversation(71, 4));
    expect(JSON.stringify(serve(next, false))).toBe(JSON.stringify(parseChatBody(next, always.limits)));
  });
});

describe("sampled check of the render", () => {
  it("an ancestor entry's text corrupted: a sampled branch gets the whole render, and every entry extending it is dropped", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    let draw = 1;
    const chain = new TurnChainCache({ checkRate: 1, random: () => draw });
    const profile = { family: model.family, templateId: model.templateId };
    const serve = (messages: unknown[]) => {
      const body = JSON.stringify({ model: model.id, messages });
      const parsed = parseChatTurn(body, always, "", { random: () => 1 }, chain);
      const out = chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
      return { out, whole: preparePrompt(parsed.req, profile) };
    };
    const branch = (turns: number) => {
      const messages = textConversation(110, turns);
      const last = messages.at(-1) as { role: string; content: string };
      return [...messages.slice(0, -1), { ...last, content: `${last.content} branch` }];
    };
    serve(textConversation(110, 1));
    serve(textConversation(110, 2));
    serve(textConversation(110, 3));
    const found = chain.find(JSON.stringify({ model: model.id, messages: textConversation(110, 3) }), profile, "")!;
    expect(found.hit!.chain.length).toBeGreaterThan(1);
    const root = found.hit!.chain[0]!;
    root.text = root.text.replace("w", "x");
    draw = 0;
    const before = chain.stats().mismatches;
    // A branch off turn 2: its hit is not turn 3's entry, which holds the corrupted root too.
    const sampled = serve(branch(2));
    expect(chain.stats().mismatches).toBe(before + 1);
    expect(sampled.out.text).toBe(sampled.whole.text);
    draw = 1;
    const next = serve(textConversation(110, 4));
    expect(next.out.text).toBe(next.whole.text);
  });
});

describe("sampled check of the /generate body built from cached pieces", () => {
  /** A chat turn as the handler runs it: parse (the shared turn chain), prompt, the worker's body. */
  async function chatTurn(config: EdgeConfig, messages: unknown[]): Promise<{ prep: PreparedRouting; body: string }> {
    const bodyText = JSON.stringify({ model: model.id, messages });
    const literals: never[] = [];
    const { req, turn } = parseChatTurn(bodyText, config, "", { literals });
    const prep = await prepareRouting(req, depsOf(config), "", null, null, bodyText, turn);
    const bodyFor = await chatUpstreamBody({
      req,
      literals,
      promptText: prep.prompt.text,
      promptPieces: prep.prompt.pieces ?? null,
      requestId: "req-exactness",
      defaultMaxNewTokens: null,
      parsers: modelParsers(model),
      plan: prep.plan,
      media: [],
      sign: null,
      cacheSalt: null,
      adapter: null,
      streamInterval: null,
    });
    return { prep, body: await (await bodyFor("w1")).text() };
  }

  /** Non-ASCII turns: the chain keeps their escaping as UTF-8 bytes once a later turn sends them. */
  function wideConversation(turns: number): unknown[] {
    const messages: unknown[] = [{ role: "system", content: `Réponds brièvement — 日本語も可. ${prose(80, 30)}` }];
    for (let t = 0; t < turns; t++) messages.push({ role: "user", content: `Question ${t} — naïve café ${prose(81 + t, 60)}` }, { role: "assistant", content: `Réponse ${t} — ${prose(90 + t, 50)}` });
    messages.push({ role: "user", content: `Question ${turns} — naïve café ${prose(81 + turns, 60)}` });
    return messages;
  }

  function expectWholeBody(r: { prep: PreparedRouting; body: string }): void {
    const sent = JSON.parse(r.body) as { text: string };
    expect(sent.text).toBe(r.prep.prompt.text);
    expect(r.body).toBe(JSON.stringify(sent));
  }

  it("a held piece's body bytes corrupted: the sampled body is JSON.stringify's, generate_body counts it, the entries are dropped", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    await chatTurn(never, wideConversation(1));
    const second = await chatTurn(never, wideConversation(2));
    expectWholeBody(second);
    const bytes = second.prep.prompt.pieces?.bodyParts.find((p): p is Uint8Array => p instanceof Uint8Array);
    expect(bytes).toBeDefined();
    // An ASCII letter of the kept UTF-8 changed: still valid UTF-8, a different prompt.
    const at = bytes!.indexOf(0x77);
    expect(at).toBeGreaterThanOrEqual(0);
    bytes![at] = 0x78;
    const before = mismatches("generate_body");
    expectWholeBody(await chatTurn(always, wideConversation(3)));
    expect(mismatches("generate_body")).toBe(before + 1);
    expectWholeBody(await chatTurn(never, wideConversation(4)));
  });
});

describe("sampled check of a salted request's namespaced hashes", () => {
  it("a kept run's words stale against its piece: the sampled request gets the whole namespacing, routed_hashes counts it, the runs are forgotten", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const ns = { cacheSalt: "tenant-exactness", tag: new Uint8Array(32).fill(7) };
    const pieces = [0, 1, 2].map((p) => Array.from({ length: 6 }, (_, i) => BigInt(1000 * p + i + 1)));
    const plainOf = (n: number) => ({ localHashes: pieces.slice(0, n).flat(), hashPieces: pieces.slice(0, n) });
    const whole = (n: number) => Array.from(namespacedLocalHashWords(plainOf(n).localHashes, ns.tag));
    // Runs kept for the first two pieces (a two-turn conversation's).
    expect(Array.from(routedHashes(ns, plainOf(3)))).toEqual(whole(3));
    // The first piece's run no longer matches its piece (as a corrupted run would not).
    pieces[0]![2] = 99n;
    const stale = routedHashes(ns, plainOf(3));
    expect(Array.from(stale)).not.toEqual(whole(3));
    const before = mismatches("routed_hashes");
    expect(Array.from(checkedRoutedHashes(stale, ns, plainOf(3)))).toEqual(whole(3));
    expect(mismatches("routed_hashes")).toBe(before + 1);
    // Forgotten: the next, unchecked, request converts its pieces again.
    expect(Array.from(routedHashes(ns, plainOf(3)))).toEqual(whole(3));
    // Equal: returned as is, nothing counted.
    const right = routedHashes(ns, plainOf(3));
    expect(checkedRoutedHashes(right, ns, plainOf(3))).toBe(right);
    expect(mismatches("routed_hashes")).toBe(before + 1);
  });
});

describe("the counts are exposed", () => {
  it("per kind in GET /admin/edge-caches and as kvedge_edge_exactness_* gauges in /metrics", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const deps = { config: always, index: () => fail(), fetch: fail };
    const auth = { authorization: `Bearer ${ADMIN}` };
    const report = (await (await handleAdminRoute(new Request("https://edge/admin/edge-caches", { headers: auth }), deps)).json()) as { exactness: Record<string, { checks: number; mismatches: number }> };
    expect(Object.keys(report.exactness).sort()).toEqual(["block_hashes", "body_prefix", "generate_body", "parse", "prompt_ids", "render", "routed_hashes", "routed_items", "view_hashes"]);
    const metrics = await (await handleAdminRoute(new Request("https://edge/metrics", { headers: auth }), deps)).text();
    for (const [kind, c] of Object.entries(report.exactness)) {
      expect(metrics).toContain(`kvedge_edge_exactness_checks{kind="${kind}"} ${c.checks}\n`);
      expect(metrics).toContain(`kvedge_edge_exactness_mismatches{kind="${kind}"} ${c.mismatches}\n`);
    }
    // Per isolate, so not counters: a scrape may read another isolate than the last.
    expect(metrics).toContain("# TYPE kvedge_edge_exactness_checks gauge\n");
    expect(metrics).toContain("# TYPE kvedge_edge_exactness_mismatches gauge\n");
  });
});
