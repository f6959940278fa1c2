import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { InvalidRequestError } from "../../../src/api/errors.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { preparePrompt, type ModelFamily, type TemplateId } from "../../../src/prompt/index.ts";
import { PrefixCache, SPLIT_TOKEN, splitIsSafe, splitSpanIds, type PrefixTokenizer } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer, MODEL_FAMILIES } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { fuzzString, mulberry32 } from "../support/tokenizer-fuzz.ts";

beforeAll(() => initHashing());

const PROFILES: { family: ModelFamily; templateId: TemplateId }[] = [
  { family: "qwen2_vl", templateId: "qwen2vl" },
  { family: "qwen2_5_vl", templateId: "qwen2vl" },
  { family: "qwen3_vl", templateId: "qwen3vl-instruct" },
  { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
];

/** The cached result must be exactly the uncached computation: ids, count and every block hash. */
function checkExact(cache: PrefixCache, tok: PrefixTokenizer, text: string, blockSize: number): number {
  const r = cache.encode(tok, text, blockSize, "");
  const ids = tok.encode(text, "");
  expect(r.length).toBe(ids.length);
  expect(r.idPieces!.flat()).toEqual(ids);
  expect(r.tokens()).toEqual(ids);
  expect(r.localHashes).toEqual(localBlockHashes(ids, blockSize));
  return r.reusedTokens;
}

const TOOLS = [{ type: "function", function: { name: "lookup", description: "Find a <|im_start|> thing", parameters: { type: "object", properties: { q: { type: "string" } } } } }];
const SPECIALS = ["<|im_start|>", "<|im_end|>", "<|im_start|>assistant\n", "<think>", "</think>", "<tool_call>", "<|endoftext|>", "<|vision_start|>", "<|im_", "<<|im_start|>>"];

const contentArb = fc.oneof(
  fc.constant(""),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.integer({ min: 1, max: 2 ** 31 - 1 }).map((seed) => fuzzString(mulberry32(seed), 30)),
  fc.tuple(fc.string({ maxLength: 10 }), fc.constantFrom(...SPECIALS), fc.string({ unit: "grapheme", maxLength: 10 })).map(([a, s, b]) => a + s + b),
  fc.constantFrom("héllo wörld e\u0301 \u212b 中文 👨‍👩‍👧‍👦 🇫🇷", "def f(x):\n    return x\n", " ", "\n\n"),
);

type Msg = Record<string, unknown>;
const turnArb = fc.record({
  user: contentArb,
  reply: fc.oneof(
    contentArb.map((c): Msg[] => [{ role: "assistant", content: c }]),
    fc.tuple(contentArb, contentArb).map(([arg, out]): Msg[] => [
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "lookup", arguments: JSON.stringify({ q: arg }) } }] },
      { role: "tool", tool_call_id: "c1", content: out },
    ]),
  ),
});

const conversationArb = fc.record({
  profile: fc.constantFrom(...PROFILES),
  system: fc.option(contentArb, { nil: undefined }),
  tools: fc.boolean(),
  turns: fc.array(turnArb, { minLength: 1, maxLength: 5 }),
  branch: contentArb,
  blockSize: fc.constantFrom(1, 2, 7, 16, 64),
});

describe("prefix cache: exactness", () => {
  it("multi-turn conversations through the real templates: cached = uncached (ids and local hashes)", () => {
    let hits = 0;
    let reused = 0;
    fc.assert(
      fc.property(conversationArb, (conv) => {
        const cache = new PrefixCache();
        const tok = getQwenTokenizer(conv.profile.family);
        const render = (messages: Msg[]): string =>
          preparePrompt({ messages, ...(conv.tools ? { tools: TOOLS } : {}) }, conv.profile).text;
        const history: Msg[] = conv.system === undefined ? [] : [{ role: "system", content: conv.system }];
        let previous: Msg[] | null = null;
        for (const turn of conv.turns) {
          const messages = [...history, { role: "user", content: turn.user }];
          checkExact(cache, tok, render(messages), conv.blockSize);
          // Regenerate: the same request again reuses everything up to its generation prompt.
          const text = render(messages);
          const again = checkExact(cache, tok, text, conv.blockSize);
          expect(again).toBe(tok.encode(text.slice(0, text.lastIndexOf(SPLIT_TOKEN)), "").length);
          previous = messages;
          history.push({ role: "user", content: turn.user }, ...turn.reply);
        }
        // A branch: the last turn's history with another user message.
        if (previous) checkExact(cache, tok, render([...previous.slice(0, -1), { role: "user", content: conv.branch }]), conv.blockSize);
        hits += cache.stats().hits;
        reused += cache.stats().reusedTokens;
      }),
      { seed: 0x5eed, numRuns: 150 },
    );
    // Not vacuous: the cache was actually used.
    expect(hits).toBeGreaterThan(150);
    expect(reused).toBeGreaterThan(1000);
  });

  it("raw texts with split tokens anywhere (start, end, adjacent, inside other tokens' lookalikes)", () => {
    const pieces = ["<|im_start|>", "<|im_start|><|im_start|>", "<|im_end|>\n", "<<|im_start|>", "<|im_start", "|>", "e\u0301", "\u0301", "😀", "中", " ", "\n"];
    for (const family of MODEL_FAMILIES) {
      const tok = getQwenTokenizer(family);
      const rand = mulberry32(family.length * 7919);
      for (const blockSize of [1, 3, 16]) {
        const cache = new PrefixCache();
        let text = "";
        for (let i = 0; i < 120; i++) {
          // Each text continues a previous one from its last split point (a next turn) or starts anew.
          const cut = text.lastIndexOf(SPLIT_TOKEN);
          const base = rand() < 0.15 ? "" : rand() < 0.2 ? text : cut > 0 ? text.slice(0, cut) : text;
          // A next turn starts with the split token (mostly); other texts test the no-split paths.
          let add = rand() < 0.8 ? SPLIT_TOKEN : "";
          for (let k = 1 + Math.floor(rand() * 6); k > 0; k--) add += rand() < 0.4 ? pieces[Math.floor(rand() * pieces.length)]! : fuzzString(rand, 12);
          text = base + add;
          checkExact(cache, tok, text, blockSize);
        }
        expect(cache.stats().hits).toBeGreaterThan(40);
      }
    }
  });

  it("the split lemma: encode(t) = encode(t[:p]) ++ encode(t[p:]) at every <|im_start|>", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const rand = mulberry32(99);
    for (let i = 0; i < 300; i++) {
      let t = "";
      for (let k = 0; k < 6; k++) t += fuzzString(rand, 10) + (rand() < 0.6 ? SPLIT_TOKEN : "");
      for (let p = t.indexOf(SPLIT_TOKEN); p >= 0; p = t.indexOf(SPLIT_TOKEN, p + 1)) {
        expect([...tok.encode(t.slice(0, p), ""), ...tok.encode(t.slice(p), "")]).toEqual(tok.encode(t, ""));
      }
    }
  });

  it("token arrays handed out are copies: changing one does not change the cache", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const a = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n";
    const b = a + "hi<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n";
    const first = cache.encode(tok, a, 4, "");
    first.tokens().fill(0);
    first.localHashes.fill(0n);
    checkExact(cache, tok, b, 4);
    const r = cache.encode(tok, b, 4, "");
    const ids = r.tokens();
    ids.fill(7);
    expect(cache.encode(tok, b, 4, "").tokens()).toEqual(tok.encode(b, ""));
    expect(cache.stats().hits).toBe(3);
  });

  it("id pieces: a turn's earlier ids are the cached arrays themselves (the same objects next turn), none copied", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    let text = "<|im_start|>system\nYou look at pictures.<|im_end|>\n";
    let before: readonly (readonly number[])[] = [];
    for (let turn = 0; turn < 5; turn++) {
      text += `<|im_start|>user\nPicture ${turn}: <|vision_start|><|image_pad|><|vision_end|>what is it?<|im_end|>\n<|im_start|>assistant\n`;
      const r = cache.encode(tok, text, 16, "");
      const pieces = r.idPieces!;
      expect(pieces.flat()).toEqual(tok.encode(text, ""));
      // The previous turn's pieces up to its generation prompt, then its own new piece: the same objects.
      for (let i = 0; i < before.length - 1; i++) expect(pieces[i]).toBe(before[i]);
      before = pieces;
      text += `It is picture ${turn}.<|im_end|>\n`;
    }
    expect(cache.stats().copiedTokens).toBe(0);
    cache.encode(tok, text, 16, "").tokens();
    expect(cache.stats().copiedTokens).toBe(tok.encode(text, "").length);
  });

  it("a seeded prefix has no id pieces until its ids are encoded once; then the conversation's turns have them", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const seedText = "<|im_start|>user\nA long history, stored elsewhere.<|im_end|>\n<|im_start|>assistant\nNoted.<|im_end|>\n";
    const ids = tok.encode(seedText, "");
    const blocks = Math.floor(ids.length / 4);
    cache.seed(tok, 4, { text: seedText, count: ids.length, hashes: localBlockHashes(ids, 4), tailIds: ids.slice(blocks * 4) }, "");
    const t1 = seedText + "<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n";
    const first = cache.encode(tok, t1, 4, "");
    expect(first.reusedTokens).toBe(ids.length);
    expect(first.idPieces).toBeNull();
    const tokensBefore = cache.stats().tokens;
    expect(first.tokens()).toEqual(tok.encode(t1, ""));
    // Its full ids are counted from now on.
    expect(cache.stats().tokens).toBe(tokensBefore + blocks * 4);
    const t2 = t1 + "ok<|im_end|>\n<|im_start|>user\nand more<|im_end|>\n<|im_start|>assistant\n";
    const second = cache.encode(tok, t2, 4, "");
    expect(second.reusedTokens).toBeGreaterThan(ids.length);
    expect(second.idPieces!.flat()).toEqual(tok.encode(t2, ""));
    expect(second.localHashes).toEqual(localBlockHashes(tok.encode(t2, ""), 4));
  });

  it("seeding a prefix held as a chain of pieces adds nothing; one with the same key but another middle is added", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const pad = " filler words to push the middle away from both ends".repeat(15);
    let text = `<|im_start|>system\nsys${pad}<|im_end|>\n`;
    // Three turns: the held prefix is a chain of three pieces.
    for (const word of ["one", "two", "three"]) {
      text += `<|im_start|>user\n${word}${pad}<|im_end|>\n`;
      cache.encode(tok, `${text}<|im_start|>assistant\n`, 4, "");
      text += `<|im_start|>assistant\nok<|im_end|>\n`;
    }
    const held = text.slice(0, text.lastIndexOf("<|im_start|>assistant"));
    const seedOf = (t: string) => {
      const ids = tok.encode(t, "");
      const blocks = Math.floor(ids.length / 4);
      return { text: t, count: ids.length, hashes: localBlockHashes(ids, 4), tailIds: ids.slice(blocks * 4) };
    };
    const stores = cache.stats().stores;
    cache.seed(tok, 4, seedOf(held), "");
    expect(cache.stats().stores).toBe(stores);
    // Same length, head and tail (the key), another middle piece: not held, so added.
    const other = held.replace("user\ntwo", "user\nTWO");
    expect(other.length).toBe(held.length);
    cache.seed(tok, 4, seedOf(other), "");
    expect(cache.stats().stores).toBe(stores + 1);
  });

  it("splitSpanIds reads a split-to-split span's ids from the prompt's pieces, and nothing where they do not line up", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const a = "<|im_start|>system\nsys<|im_end|>\n";
    const b = "<|im_start|>user\nquote <|im_start|> inside<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n";
    const text = `${a}${b}<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n`;
    cache.encode(tok, text, 4, "");
    const pieces = cache.encode(tok, text, 4, "").idPieces!;
    expect(pieces.length).toBeGreaterThan(1);
    const split = tok.encode(SPLIT_TOKEN, "")[0]!;
    const from = tok.encode(a, "").length;
    expect(splitSpanIds(pieces, from, b, split)).toEqual(tok.encode(b, ""));
    expect(splitSpanIds(pieces, 0, a, split)).toEqual(tok.encode(a, ""));
    expect(splitSpanIds(pieces, from, "", split)).toEqual([]);
    // Not starting at a split token, a start off by one, a span with no split token after it.
    expect(splitSpanIds(pieces, from, b.slice(1), split)).toBeNull();
    expect(splitSpanIds(pieces, from + 1, b, split)).toBeNull();
    expect(splitSpanIds(pieces, 0, text.slice(0, text.lastIndexOf(SPLIT_TOKEN)) + SPLIT_TOKEN + "assistant\n", split)).toBeNull();
  });

  it("a lone surrogate is refused as without the cache, on a miss and after a hit", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const good = "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n";
    checkExact(cache, tok, good, 16);
    expect(() => cache.encode(tok, "<|im_start|>user\n\ud800<|im_end|>\n<|im_start|>assistant\n", 16, "")).toThrow(InvalidRequestError);
    const hitThenBad = good.slice(0, good.lastIndexOf(SPLIT_TOKEN)) + "<|im_start|>user\n\udc00x<|im_end|>\n<|im_start|>assistant\n";
    expect(() => cache.encode(tok, hitThenBad, 16, "")).toThrow(InvalidRequestError);
    expect(() => tok.encode(hitThenBad, "")).toThrow(InvalidRequestError);
  });
});

/** A conversation whose prefix (up to the generation prompt) is about `words` tokens long. */
function conversation(tag: string, words: number): { prefix: string; text: string; next: string } {
  let body = "";
  for (let i = 0; i < words; i++) body += ` ${tag}${i % 10}`;
  const prefix = `<|im_start|>system\nsys ${tag}<|im_end|>\n<|im_start|>user\n${body}<|im_end|>\n`;
  return {
    prefix,
    text: prefix + "<|im_start|>assistant\n",
    next: prefix + "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n",
  };
}

describe("prefix cache: bounds and scoping", () => {
  it("evicts least recently used prefixes to stay within maxTokens; an evicted prefix misses but stays exact", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache({ maxTokens: 1000, maxEntryTokens: 600 });
    const a = conversation("alpha", 200);
    const b = conversation("beta", 200);
    const c = conversation("gamma", 200);
    const size = (x: { prefix: string }) => tok.encode(x.prefix, "").length;
    expect(size(a) + size(b) + size(c)).toBeGreaterThan(1000);
    expect(size(a) + size(c)).toBeLessThanOrEqual(1000);
    checkExact(cache, tok, a.text, 16);
    checkExact(cache, tok, b.text, 16);
    // Touch a: b becomes the least recently used.
    expect(checkExact(cache, tok, a.text, 16)).toBe(size(a));
    checkExact(cache, tok, c.text, 16);
    const s = cache.stats();
    expect(s.evictions).toBe(1);
    expect(s.tokens).toBeLessThanOrEqual(1000);
    expect(s.entries).toBe(2);
    expect(checkExact(cache, tok, b.next, 16)).toBe(0); // evicted
    expect(checkExact(cache, tok, c.next, 16)).toBe(size(c));
  });

  it("prefixes with the same key (length, head and tail) are told apart by their text", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const pad = " filler words to push the middle away from both ends of the prefix".repeat(12);
    // Equal length, equal first and last 800 characters: only the middle word differs.
    const prefixes = ["red", "tan", "sky", "oak", "elm", "fig"].map((w) => `<|im_start|>user\n${pad} ${w} ${pad}<|im_end|>\n`);
    expect(new Set(prefixes.map((x) => x.length)).size).toBe(1);
    const next = (x: string) => x + "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nand?<|im_end|>\n<|im_start|>assistant\n";
    for (const x of prefixes.slice(0, 4)) checkExact(cache, tok, x + "<|im_start|>assistant\n", 16);
    for (const x of prefixes.slice(0, 4)) expect(checkExact(cache, tok, next(x), 16)).toBe(tok.encode(x, "").length);
    // An unseen prefix with the same key misses (and stays exact).
    expect(checkExact(cache, tok, next(prefixes[4]!), 16)).toBe(0);
    // A bucket keeps 4 prefixes: a fifth with the same key drops the oldest of them.
    checkExact(cache, tok, prefixes[5]! + "<|im_start|>assistant\n", 16);
    const other = (x: string) => x + "<|im_start|>user\nsomething else<|im_end|>\n<|im_start|>assistant\n";
    expect(checkExact(cache, tok, other(prefixes[0]!), 16)).toBe(0);
    for (const i of [1, 3, 5]) expect(checkExact(cache, tok, other(prefixes[i]!), 16)).toBe(tok.encode(prefixes[i]!, "").length);
  });

  it("branches share their common prefix: it is counted once, so branching off one history does not evict another", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache({ maxTokens: 3000 });
    const a = conversation("first", 200);
    const b = conversation("second", 200);
    const size = (x: { prefix: string }) => tok.encode(x.prefix, "").length;
    checkExact(cache, tok, a.text, 16);
    checkExact(cache, tok, b.text, 16);
    expect(cache.stats().tokens).toBe(size(a) + size(b));
    let pieces = 0;
    for (let i = 0; i < 40; i++) {
      const t = `${a.prefix}<|im_start|>assistant\nanswer ${i}<|im_end|>\n<|im_start|>user\nquestion ${i}?<|im_end|>\n<|im_start|>assistant\n`;
      expect(checkExact(cache, tok, t, 16)).toBe(size(a));
      pieces += tok.encode(t.slice(a.prefix.length, t.lastIndexOf(SPLIT_TOKEN)), "").length;
    }
    // 40 × the whole prefix would be ~17k tokens; each branch holds only its own turn.
    expect(cache.stats()).toMatchObject({ tokens: size(a) + size(b) + pieces, entries: 42, evictions: 0 });
    expect(checkExact(cache, tok, b.next, 16)).toBe(size(b));
    // A branch's next turn reuses the branch (root piece + its own).
    const t5 = `${a.prefix}<|im_start|>assistant\nanswer 5<|im_end|>\n<|im_start|>user\nquestion 5?<|im_end|>\n`;
    expect(checkExact(cache, tok, `${t5}<|im_start|>assistant\nsure<|im_end|>\n<|im_start|>assistant\n`, 16)).toBe(tok.encode(t5, "").length);
    // Dropping everything brings the count back to zero (each piece uncounted exactly once).
    const small = new PrefixCache({ maxTokens: size(a) + 100, maxEntryTokens: size(a) + 100 });
    checkExact(small, tok, a.text, 16);
    checkExact(small, tok, a.next, 16);
    checkExact(small, tok, b.text, 16);
    expect(small.stats()).toMatchObject({ entries: 1, tokens: size(b), evictions: 2 });
  });

  it("does not store prefixes over maxEntryTokens", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache({ maxTokens: 1000, maxEntryTokens: 100 });
    const big = conversation("big", 300);
    checkExact(cache, tok, big.text, 16);
    expect(cache.stats()).toMatchObject({ entries: 0, tokens: 0 });
    expect(checkExact(cache, tok, big.next, 16)).toBe(0);
  });

  it("block sizes do not share entries", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    const conv = conversation("bs", 100);
    checkExact(cache, tok, conv.text, 16);
    expect(checkExact(cache, tok, conv.next, 32)).toBe(0);
    expect(checkExact(cache, tok, conv.next, 16)).toBeGreaterThan(0);
  });

  it("model families do not share entries (<think> is an added token only for Qwen3-VL)", () => {
    const cache = new PrefixCache();
    const q2 = getQwenTokenizer("qwen2_vl");
    const q3 = getQwenTokenizer("qwen3_vl");
    const prefix = "<|im_start|>user\nwhy <think>so</think> <tool_response><|im_end|>\n";
    expect(q2.encode(prefix, "")).not.toEqual(q3.encode(prefix, ""));
    checkExact(cache, q2, prefix + "<|im_start|>assistant\n", 16);
    expect(checkExact(cache, q3, prefix + "<|im_start|>assistant\nx<|im_end|>\n<|im_start|>assistant\n", 16)).toBe(0);
    expect(checkExact(cache, q2, prefix + "<|im_start|>assistant\ny<|im_end|>\n<|im_start|>assistant\n", 16)).toBeGreaterThan(0);
  });

  it("split safety: holds for every Qwen family; a tokenizer whose added tokens could cover the split is bypassed", () => {
    for (const f of MODEL_FAMILIES) expect(splitIsSafe(getQwenTokenizer(f).addedTokens, SPLIT_TOKEN)).toBe(true);
    const t = (...c: string[]) => c.map((content) => ({ content }));
    expect(splitIsSafe(t("<|im_end|>"), SPLIT_TOKEN)).toBe(false); // not an added token at all
    expect(splitIsSafe(t(SPLIT_TOKEN, "<|im_start|>x"), SPLIT_TOKEN)).toBe(false); // longer match at the split
    expect(splitIsSafe(t(SPLIT_TOKEN, "a<|im"), SPLIT_TOKEN)).toBe(false); // a match from the left covers it
    expect(splitIsSafe(t(SPLIT_TOKEN, "ab<|im_start|>cd"), SPLIT_TOKEN)).toBe(false);

    // A toy tokenizer: one id per character, added tokens matched leftmost-longest like the real one.
    const added = ["<|im_start|>", "a<|im"];
    const toy: PrefixTokenizer = {
      family: "toy",
      addedTokens: added.map((content) => ({ content })),
      encode(text) {
        const out: number[] = [];
        for (let i = 0; i < text.length; ) {
          const m = added.find((a) => text.startsWith(a, i));
          if (m) {
            out.push(1000 + added.indexOf(m));
            i += m.length;
          } else out.push(text.charCodeAt(i++));
        }
        return out;
      },
    };
    const cache = new PrefixCache();
    for (const text of ["x<|im_start|>y", "xa<|im_start|>y<|im_start|>z", "xa<|im_start|>y<|im_start|>z<|im_start|>w"]) checkExact(cache, toy, text, 2);
    expect(cache.stats()).toMatchObject({ bypassed: 3, hits: 0, entries: 0 });
  });
});
