/**
 * Every per-isolate cache of the edge stays within its byte budget however much it is fed
 * (src/edge/cache-budgets.ts), and the estimates of the prompt-prefix cache, the turn chain, the
 * segment cache, the media item memo and the media view cache are checked against what V8 really
 * retains (heap after GC plus array buffers), so a budget means bytes, not a guess.
 */
import { IdBuffer } from "../../../src/prompt/tokenizer/id-buffer.ts";
import { runInNewContext } from "node:vm";
import { setFlagsFromString } from "node:v8";
import { beforeAll, describe, expect, it } from "vitest";
import { edgeCacheBudgets } from "../../../src/edge/cache-budgets.ts";
import { layoutMemoStats, memoEncode, MEMO_MAX_BYTES } from "../../../src/layout/layout.ts";
import { PrefixCache, SPLIT_TOKEN } from "../../../src/prompt/prefix-cache.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { BpeEngine } from "../../../src/prompt/tokenizer/engine.ts";
import { fingerprint, SegmentCache } from "../../../src/prompt/tokenizer/segment-cache.ts";
import { decodeVocab } from "../../../src/prompt/tokenizer/vocab.ts";
import { VOCAB_B64 } from "../../../src/generated/tokenizer/qwen-vocab.js";
import { initHashing } from "../../../src/util/hash.ts";
import { MediaMemo } from "../../../src/edge/media-memo.ts";
import type { VerifiedMedia } from "../../../src/edge/media.ts";
import { routedItemStats, routeItems } from "../../../src/edge/chat/routed-items.ts";
import { ViewHashCache } from "../../../src/edge/chat/view-hashes.ts";
import { routedHashes, routedRunWords, type RoutingNamespace } from "../../../src/edge/cache-salt.ts";
import { namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { cohortEligibility, MAX_ROUTING_TOKENS, routeViewItems, SGLANG_CONTRACT_KEY } from "../../../src/layout/index.ts";
import type { VisionTokenIds } from "../../../src/layout/model-geometry.ts";
import { bytesToHex } from "../../../src/util/hex.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
beforeAll(() => initHashing());

/** Seeded words: distinct text per seed, like users' messages. */
function text(seed: number, words: number): string {
  const vocab = ["alpha", "beta", "gamma", "delta", "router", "cache", "prefix", "token", "edge", "index", "video", "frame"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`#${seed}`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]! + (x % 7 === 0 ? String(x % 1000) : ""));
  }
  return out.join(" ");
}

/** One token per character: isolates the prefix cache's own memory from a tokenizer's caches. */
const charTokenizer = {
  family: "chars",
  addedTokens: [{ content: SPLIT_TOKEN }, { content: "<|im_end|>" }],
  encode: (s: string) => Array.from(s, (c) => c.charCodeAt(0)),
};

/** Four characters a token, as BPE gives for English: short turns make pieces of one or two blocks. */
const quadTokenizer = {
  family: "quads",
  addedTokens: charTokenizer.addedTokens,
  encode: (s: string) => Array.from({ length: Math.ceil(s.length / 4) }, (_, i) => s.charCodeAt(4 * i)),
};

/**
 * Four characters a token, with the chat template's and the vision placeholders' added tokens as one
 * id each (the contract's ids), as the Qwen tokenizer gives them: template ids a media view expands.
 */
function visionTokenizer(ids: VisionTokenIds) {
  const added = new Map<string, number>([[SPLIT_TOKEN, 9], ["<|im_end|>", 10], ["<|vision_start|>", ids.visionStart], ["<|image_pad|>", ids.imagePad], ["<|video_pad|>", ids.videoPad], ["<|vision_end|>", ids.visionEnd]]);
  return {
    family: "vision-quads",
    addedTokens: [...added.keys()].map((content) => ({ content })),
    encode: (s: string) => {
      const out: number[] = [];
      for (const part of s.split(/(<\|[a-z_]+\|>)/)) {
        const id = added.get(part);
        if (id !== undefined) out.push(id);
        else for (let i = 0; i < part.length; i += 4) out.push(100 + part.charCodeAt(i));
      }
      return out;
    },
  };
}

/** What a vision chat feed sends: `images` items at most a turn (1 to `images`), of `sizes` in turn; words a question and an answer. */
interface VisionFeed {
  kind: "image" | "video";
  sizes: readonly (readonly [number, number])[];
  images: number;
  question: number;
  answer: number;
  seeds: number;
}

/**
 * 4-turn vision chats routed as the chat handler routes them (prompt-prefix cache pieces, the
 * isolate's item memo, the view cache, routedHashes), half of them salted. The largest estimate the
 * view cache reached.
 */
function feedVisionChats(cache: ViewHashCache, prefix: PrefixCache, feed: VisionFeed): number {
  const { kind, sizes, images, question, answer, seeds } = feed;
  const cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
  if (!cohort.ok) throw new Error(cohort.reason);
  const ids = cohort.contract.tokenIds;
  const tokenizer = visionTokenizer(ids);
  const encode = (t: string) => tokenizer.encode(t);
  const tenant: RoutingNamespace = { cacheSalt: "t".repeat(43), tag: namespaceTag("t".repeat(43)) };
  const common: RoutingNamespace = { cacheSalt: null, tag: null };
  let peak = 0;
  for (let seed = 1; seed <= seeds; seed++) {
    const ns = seed % 2 ? tenant : common;
    let prompt = `${SPLIT_TOKEN}system\nYou are a careful visual assistant.<|im_end|>\n`;
    const items: VerifiedMedia[] = [];
    for (let turn = 0; turn < 4; turn++) {
      prompt += `${SPLIT_TOKEN}user\n`;
      for (let k = 0; k <= (seed + turn) % images; k++) {
        const [width, height] = sizes[(seed + turn + k) % sizes.length]!;
        const digest = (seed * 1_000 + turn * 10 + k).toString(16).padStart(64, "0");
        items.push(
          kind === "image"
            ? { kind, forward: null, stored: true, digest, metadata: { modality: kind, width, height }, unresolved: null }
            : { kind, forward: null, stored: true, digest, metadata: { modality: kind, width, height, totalFrames: 60 + ((seed * 37 + turn * 101) % 400), avgFps: 30 }, unresolved: null },
        );
        prompt += `<|vision_start|><|${kind}_pad|><|vision_end|>`;
      }
      prompt += `${text(seed * 100 + turn, question)}<|im_end|>\n${SPLIT_TOKEN}assistant\n`;
      const enc = prefix.encode(tokenizer, prompt, 16, ns.cacheSalt ?? "");
      const resolved = routeItems(items, cohort, ns.tag);
      if (resolved.unresolved) throw new Error(resolved.unresolved.detail);
      const routed = routeViewItems(cohort.contract, resolved.items, (_, i) => resolved.routed[i]!);
      if (!routed.ok) throw new Error(routed.detail);
      const scope = `qwen3_vl\u000016\u0000${cohort.digest}\u0000${ns.tag === null ? "" : bytesToHex(ns.tag)}`;
      const view = cache.hashes({ pieces: enc.idPieces!, items: routed.expandItems, ids, encode, blockSize: 16, scope, maxTokens: MAX_ROUTING_TOKENS });
      if (!view.ok) throw new Error(view.detail);
      routedHashes(ns, view);
      expect(cache.stats().bytes).toBeLessThanOrEqual(cache.maxBytes);
      prompt += `${text(seed * 100 + turn + 50, answer)}<|im_end|>\n`;
    }
    peak = Math.max(peak, cache.stats().bytes);
  }
  return peak;
}

function conversation(seed: number, turns: number, words = 120): string {
  let t = `${SPLIT_TOKEN}system\nYou are helpful.<|im_end|>\n`;
  for (let k = 0; k < turns; k++) t += `${SPLIT_TOKEN}user\n${text(seed * 100 + k, words)}<|im_end|>\n${SPLIT_TOKEN}assistant\nok ${k}<|im_end|>\n`;
  return `${t}${SPLIT_TOKEN}assistant\n`;
}

/**
 * Heap after a full GC plus array buffers' backing stores (held outside the heap, counted in an
 * isolate's memory). Two GCs: V8 frees the backing stores of the buffers a GC found dead while it
 * goes on, and the next GC waits for that (measured: up to 1.5 MB of a turn chain feed's dead key
 * buffers still counted after one).
 */
function heldBytes(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

describe("edge cache byte budgets", () => {
  // Each turn's hashes are also routed as the chat handler routes them (routedHashes keeps a copy of
  // every cached piece, in the request's namespace): the cache's budget must bound those copies too.
  // Short turns make small pieces, where the copies weigh most.
  it.each([
    { feed: "long turns", tokenizer: charTokenizer, words: 120, seeds: 600 },
    { feed: "short turns", tokenizer: quadTokenizer, words: 3, seeds: 4_000 },
  ])("the prompt-prefix cache never holds more than its byte budget, and the estimate covers V8's real retention with the routed copies ($feed)", ({ tokenizer, words, seeds }) => {
    const maxBytes = 4 * 1024 * 1024;
    const tenant: RoutingNamespace = { cacheSalt: "tenant-a", tag: namespaceTag("tenant-a") };
    const common: RoutingNamespace = { cacheSalt: null, tag: null };
    const before = heldBytes();
    const cache = new PrefixCache({ maxBytes, maxTokens: 1e9 });
    let peak = 0;
    let copiedPieces = 0;
    for (let seed = 1; seed <= seeds; seed++) {
      for (let turns = 1; turns <= 4; turns++) {
        const enc = cache.encode(tokenizer, conversation(seed, turns, words), 16, "");
        routedHashes(seed % 2 ? tenant : common, enc);
        copiedPieces += enc.hashPieces.slice(0, -1).filter((p) => p.length > 0).length;
      }
      peak = Math.max(peak, cache.stats().bytes);
      expect(cache.stats().bytes).toBeLessThanOrEqual(maxBytes);
    }
    const retained = heldBytes() - before;
    const s = cache.stats();
    expect(copiedPieces, "cached pieces were routed").toBeGreaterThan(seeds * 2);
    expect(s.evictions, "the feed went far past the budget").toBeGreaterThan(1000);
    expect(peak).toBeGreaterThan(maxBytes * 0.9);
    // What V8 keeps alive for the cache is within the budget (plus 25 % for what the estimate misses).
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeLessThan(maxBytes * 1.25);
    expect(cache.encode(tokenizer, conversation(seeds, 4, words), 16, "").reusedTokens).toBeGreaterThan(0); // still a cache
  });

  it("routed runs of held pieces keep at most 4 × their chains' words reachable, whatever later pieces grew their buffers and were evicted", () => {
    // A held prefix (a conversation's first turns) whose long continuation was routed and then
    // evicted, as with an early edited message in a long chat: the budget counts the held pieces'
    // hashes only, so the runs must not keep the continuation's words.
    const tenant: RoutingNamespace = { cacheSalt: "tenant-a", tag: namespaceTag("tenant-a") };
    let next = 1n;
    const piece = (n: number) => Array.from({ length: n }, () => next++);
    const held: bigint[][] = [];
    let counted = 0;
    for (let root = 0; root < 200; root++) {
      const kept = [piece(6), piece(3)];
      held.push(...kept);
      counted += 9;
      const evicted: bigint[][] = [];
      for (let turn = 0; turn < 40; turn++) {
        const pieces = [...kept, ...evicted, piece(2)];
        routedHashes(root % 2 ? tenant : { cacheSalt: null, tag: null }, { localHashes: pieces.flat(), hashPieces: pieces });
        evicted.push(piece(100));
      }
    }
    const reachable = routedRunWords(held);
    expect(reachable, `${reachable} words reachable for ${counted} counted`).toBeLessThanOrEqual(4 * counted);
    expect(reachable, "the held pieces have runs").toBeGreaterThanOrEqual(counted);
  });

  it("routed runs keep at most 4 × their pieces' words reachable with salts alternating: many small branches of one long prefix", () => {
    // A tenant's base and adapter requests share the prefix cache's pieces but not a salt: routing a
    // chain in the other salt must not leave each branch routed before with its own copy of the
    // long prefix (branches × prefix reachable, the prefix counted once).
    const salts: RoutingNamespace[] = [{ cacheSalt: "base", tag: namespaceTag("base") }, { cacheSalt: "adapter", tag: namespaceTag("adapter") }];
    let next = 1n;
    const piece = (n: number) => Array.from({ length: n }, () => next++);
    const prefix = Array.from({ length: 30 }, () => piece(100));
    const held: bigint[][] = [...prefix];
    let counted = 30 * 100;
    for (let request = 0; request < 200; request++) {
      const branch = piece(2);
      const pieces = [...prefix, branch, piece(3)];
      const flat = pieces.flat();
      const n = salts[request % 2]!;
      // Exact (the property tests in cache-salt-pieces cover every word): the prefix's first and the request's own.
      const routed = Array.from(routedHashes(n, { localHashes: flat, hashPieces: pieces }));
      expect([routed[0], ...routed.slice(-5)]).toEqual(namespacedLocalHashes([flat[0]!, ...flat.slice(-5)], n.tag!));
      held.push(branch);
      counted += 2;
    }
    const reachable = routedRunWords(held);
    expect(reachable, `${reachable} words reachable for ${counted} counted`).toBeLessThanOrEqual(4 * counted);
    expect(reachable, "the held pieces have runs").toBeGreaterThanOrEqual(counted / 2);
  });

  it("the turn chain never holds more than its byte budget, and the estimate covers V8's real retention", () => {
    const maxBytes = 4 * 1024 * 1024;
    const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
    const before = heldBytes();
    const chain = new TurnChainCache({ maxBytes, checkRate: 0 });
    for (let seed = 1; seed <= 600; seed++) {
      const messages: { role: string; content: string }[] = [{ role: "system", content: "You are helpful." }];
      for (let turn = 0; turn < 4; turn++) {
        // Non-ASCII text: the pieces a later turn sends again also keep their UTF-8 (outside the heap).
        messages.push({ role: "user", content: `${text(seed * 100 + turn, 300)} — ${turn}` });
        const body = JSON.stringify({ model: "m", messages });
        // As the edge stores a turn: the validated messages are kept too (for the next turn's parse).
        chain.prepare(parseChatBody(body, DEFAULT_LIMITS), body, profile, "", { validated: true });
        expect(chain.stats().bytes).toBeLessThanOrEqual(maxBytes);
        messages.push({ role: "assistant", content: `ok ${turn}` });
      }
    }
    const held = heldBytes();
    const s = chain.stats();
    expect(s.evictions, "the feed went far past the budget").toBeGreaterThan(100);
    expect(s.hits, "still a cache").toBeGreaterThan(1000);
    expect(held).toBeGreaterThan(before);
    // What the chain itself keeps alive: the heap and buffers it frees when cleared (the heap grown since the start
    // also holds the code and memos the feed compiled, ~1.5 MB, which are no part of the chain's budget).
    chain.clear();
    const retained = held - heldBytes();
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeLessThan(maxBytes * 1.25);
  });

  it("the token-segment cache stays within its byte budget (LRU)", () => {
    const c = new SegmentCache(1e9, 256 * 1024);
    for (let i = 0; i < 20_000; i++) {
      const seg = text(i, 20);
      c.set(seg, new Int32Array(seg.length >> 2), "");
      expect(c.stats().bytes).toBeLessThanOrEqual(256 * 1024);
    }
    expect(c.stats().entries).toBeLessThan(20_000);
  });

  it("the token-segment cache's estimate covers V8's real retention when segments are slices of prompts", () => {
    const maxBytes = 8 * 1024 * 1024;
    gc();
    const before = process.memoryUsage().heapUsed;
    const c = new SegmentCache(1e9, maxBytes);
    for (let i = 0; i < 400; i++) {
      // A 40 kB prompt per request, of which one 2 kB segment is cached: the cache must not keep the prompt.
      // Two-byte strings (the "—"), as the estimate assumes.
      const prompt = `—${text(i, 6000)}`;
      const seg = prompt.slice(1000, 3000);
      c.set(seg, new Int32Array(500), "");
      expect(c.get(seg, "")).toBeDefined();
      // A segment that is most of its (named) source is kept as the slice it is: no copy, and little held beyond it.
      const other = `—${text(i + 100_000, 6000)}`;
      c.set(other.slice(100), new Int32Array(500), "", other.length);
    }
    gc();
    const retained = process.memoryUsage().heapUsed - before;
    const s = c.stats();
    expect(s.entries).toBeGreaterThan(40);
    expect(s.bytes).toBeGreaterThan(maxBytes * 0.9);
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeLessThan(s.bytes * 1.25);
  });

  it("the token-segment cache finds a segment whatever string object carries it, and never confuses two with one fingerprint", () => {
    const c = new SegmentCache(1e9);
    const long = text(7, 2000);
    c.set(long.slice(0), Int32Array.of(1), "");
    expect(c.get(`${long.slice(0, 500)}${long.slice(500)}`, "")).toEqual(Int32Array.of(1));
    // Same length, head, tail and sampled characters: one fingerprint, two texts, two entries.
    const i = 1000;
    const other = long.slice(0, i) + (long[i] === "x" ? "y" : "x") + long.slice(i + 1);
    expect(fingerprint(other)).toBe(fingerprint(long));
    expect(c.get(other, "")).toBeUndefined();
    c.set(other, Int32Array.of(2), "");
    expect(c.get(other, "")).toEqual(Int32Array.of(2));
    expect(c.get(long, "")).toEqual(Int32Array.of(1));
  });

  it("the BPE piece cache stays within its byte budget; very long pieces are not cached", () => {
    const engine = new BpeEngine(decodeVocab(VOCAB_B64), { segmentCacheChars: 0, pieceCacheEntries: 1_000_000, pieceCacheBytes: 256 * 1024 });
    const out = new IdBuffer();
    const rare = (i: number) => Array.from({ length: 12 }, (_, k) => String.fromCharCode(97 + ((i * 7 + k * 13) % 26))).join("");
    for (let i = 0; i < 6_000; i++) {
      out.length = 0;
      engine.encodeSegment(`${rare(i)} ${rare(i + 1)}zq ${i % 50 === 0 ? "x".repeat(300) : ""}`, out, "");
      const p = engine.cacheStats().pieces;
      expect(p.bytes).toBeLessThanOrEqual(p.maxBytes);
    }
    const entries = engine.cacheStats().pieces.entries;
    expect(entries).toBeGreaterThan(0);
    expect(entries, "the byte bound, not the entry bound, turned the generations").toBeLessThan(6_000);
  });

  it("the layout memo stays within its byte budget and skips long texts", () => {
    const encode = (s: string) => Array.from(s, (c) => c.charCodeAt(0) % 100);
    const start = layoutMemoStats();
    for (let i = 0; i < 100_000; i++) memoEncode(encode, `<${i}.${i % 10} seconds>`);
    memoEncode(encode, "y".repeat(10_000));
    const s = layoutMemoStats();
    expect(s.bytes - start.bytes).toBeLessThanOrEqual(MEMO_MAX_BYTES);
    expect(s.resets).toBeGreaterThan(start.resets);
  });

  // data: URLs (their text the weight) and http(s) items the media store holds (short URLs, leased:
  // the entry around them the weight), each scope a client label and a tenant's salt.
  it.each([
    { feed: "data: URLs", count: 2_000 },
    { feed: "http(s) images", count: 20_000 },
    { feed: "http(s) videos", count: 20_000 },
  ] as const)("the media item memo never holds more than its byte budget, and the estimate covers V8's real retention ($feed)", ({ feed, count }) => {
    const maxBytes = 4 * 1024 * 1024;
    const before = heldBytes();
    const memo = new MediaMemo(maxBytes);
    const last = { scope: "", kind: "image" as VerifiedMedia["kind"], url: "" };
    for (let i = 0; i < count; i++) {
      const scope = `client-${i % 7}\u0000${"s".repeat(43)}`;
      const digest = i.toString(16).padStart(64, "0");
      if (feed === "data: URLs") {
        // A data: URL of 20–120 kB (its own string, as each request's parse makes it).
        const url = `data:image/png;base64,${String(i).padStart(8, "0")}${"QUJD".repeat(5_000 + (i % 5) * 5_000)}`;
        Object.assign(last, { scope, kind: "image", url });
        memo.set(scope, "image", url, { kind: "image", forward: url, stored: false, digest, metadata: { modality: "image", width: 8, height: 8 }, unresolved: null });
      } else if (feed === "http(s) images") {
        const url = `https://images.example.com/users/${i % 977}/photo-${i}.jpg?w=1024&sig=${((i * 2654435761) >>> 0).toString(16)}`;
        Object.assign(last, { scope, kind: "image", url });
        memo.set(scope, "image", url, { kind: "image", forward: null, stored: true, digest, metadata: { modality: "image", width: 1024, height: 768 }, unresolved: null }, Date.now() + 600_000);
      } else {
        const url = `https://videos.example.com/clips/${i}.mp4`;
        Object.assign(last, { scope, kind: "video", url });
        memo.set(scope, "video", url, { kind: "video", forward: null, stored: true, digest, metadata: { modality: "video", width: 1280, height: 720, totalFrames: 300 + (i % 500), avgFps: 29.97 }, unresolved: null }, Date.now() + 600_000);
      }
      expect(memo.stats().bytes).toBeLessThanOrEqual(maxBytes);
    }
    const retained = heldBytes() - before;
    const s = memo.stats();
    expect(s.evictions, "the feed went far past the budget").toBeGreaterThan(count / 2);
    expect(memo.get(last.scope, last.kind, last.url), "the latest item is kept").not.toBeNull();
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeLessThan(maxBytes * 1.25);
  });

  it("the media layout memo stays within its byte budget", async () => {
    const cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
    if (!cohort.ok) throw new Error(cohort.reason);
    for (let i = 0; i < 6_000; i++) {
      const digest = i.toString(16).padStart(64, "0");
      const media: VerifiedMedia[] = [{ kind: "video", forward: null, stored: true, digest, metadata: { modality: "video", width: 320, height: 240, totalFrames: 300 + i, avgFps: 30 }, unresolved: null }];
      routeItems(media, cohort, null);
      const s = routedItemStats();
      expect(s.bytes).toBeLessThanOrEqual(s.maxBytes);
    }
    expect(routedItemStats().entries).toBeLessThan(6_000);
  });

  // Vision chats as the chat handler runs them: the prompt-prefix cache splits each prompt into turn
  // pieces (and holds them, as in the edge), every turn adds new media, the items are laid out
  // through the isolate's item memo, half the conversations are salted (scope and item hashes in the
  // tenant's namespace) and every turn's view is routed. Long turns make pieces of ~100 blocks and
  // several items; short turns, pieces of a few blocks, where the fixed part of an entry weighs most.
  it.each([
    { feed: "long turns, 1–3 images each", media: "image", sizes: [[1024, 768], [640, 480], [1280, 720], [800, 800]], images: 3, question: 40, answer: 150, seeds: 400 },
    { feed: "short turns, one small image each", media: "image", sizes: [[256, 256], [320, 240], [224, 224]], images: 1, question: 3, answer: 6, seeds: 3_000 },
    { feed: "a video a turn", media: "video", sizes: [[320, 240]], images: 1, question: 20, answer: 60, seeds: 600 },
  ] as const)("the media view cache never holds more than its byte budget, and the estimate is what V8 retains with the routed copies ($feed)", ({ media: kind, sizes, images, question, answer, seeds }) => {
    const maxBytes = 4 * 1024 * 1024;
    const prefix = new PrefixCache({ maxBytes: 2.5 * maxBytes, maxTokens: 1e9 });
    const box: { cache: ViewHashCache | null } = { cache: new ViewHashCache(maxBytes) };
    // Fed in a function of its own: no local of this one refers to the cache when it is dropped.
    const peak = feedVisionChats(box.cache!, prefix, { kind, sizes, images, question, answer, seeds });
    const s = box.cache!.stats();
    // What the cache keeps alive is what V8 frees when it goes (its pieces, and with them their
    // routed copies); the prompt-prefix cache's pieces, code and module memos stay either way.
    const withCache = heldBytes();
    box.cache = null;
    const retained = withCache - heldBytes();
    expect(s.hits, "still a cache").toBeGreaterThan(seeds * 2);
    expect(peak, "the feed went past the budget").toBeGreaterThan(maxBytes * 0.95);
    expect(prefix.stats().hits, "the prompt-prefix cache held the turns' pieces").toBeGreaterThan(seeds * 2);
    // Within the budget plus 25 %, and not far under it (an estimate that overcounts keeps fewer conversations than its budget pays for).
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeLessThan(maxBytes * 1.25);
    expect(retained, `retained ${retained} B for an estimate of ${s.bytes} B`).toBeGreaterThan(maxBytes * 0.8);
  });

  it("lists every budgeted cache with bytes within its budget", () => {
    for (const b of edgeCacheBudgets()) {
      expect(b.maxBytes, b.name).toBeGreaterThan(0);
      expect(b.bytes, b.name).toBeLessThanOrEqual(b.maxBytes);
    }
    expect(edgeCacheBudgets().map((b) => b.name)).toEqual(["prompt_prefix", "token_segments", "bpe_pieces", "layout_memo", "turn_chain", "media_items", "media_layouts", "media_views"]);
  });
});
