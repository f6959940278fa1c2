/**
 * The media view cache against the whole computation (expandPrompt over all template ids, then
 * localBlockHashes): every turn of vision conversations through the real tokenizer and prompt-prefix
 * cache gives the same view length and block hashes, while its work counters show that only the new
 * template tokens are expanded (none copied) and only the new blocks hashed; an earlier item that
 * changed, another scope, placeholder mismatches and a triplet across two pieces stay exact.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { ViewHashCache, type ViewInput } from "../../../src/edge/chat/view-hashes.ts";
import { expandPrompt, MAX_ROUTING_TOKENS, QWEN_VISION_TOKEN_IDS, type ExpandItem, type LayoutPiece } from "../../../src/layout/index.ts";
import { PrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const tok = getQwenTokenizer("qwen3_vl");
const ids = QWEN_VISION_TOKEN_IDS;
const encode = (t: string): number[] => tok.encode(t, "");
const BLOCK = 16;

const image = (pads: number, padValue: number): ExpandItem => ({
  modality: "image",
  pieces: [{ kind: "vision_start" }, { kind: "pad", modality: "image", count: pads }, { kind: "vision_end" }],
  padValue,
});
/** A Qwen3-VL style timestamped video: a text piece before each group. */
const video = (groups: number, pads: number, padValue: number): ExpandItem => ({
  modality: "video",
  pieces: Array.from({ length: groups }, (_, g): LayoutPiece[] => [{ kind: "text", text: `<${(g * 1.5).toFixed(1)} seconds>` }, { kind: "vision_start" }, { kind: "pad", modality: "video", count: pads }, { kind: "vision_end" }]).flat(),
  padValue,
});
const IMAGE = "<|vision_start|><|image_pad|><|vision_end|>";
const VIDEO = "<|vision_start|><|video_pad|><|vision_end|>";

function whole(text: string, items: readonly ExpandItem[]): { length: number; hashes: bigint[] } | string {
  const ex = expandPrompt(tok.encode(text, ""), items, ids, encode);
  return ex.ok ? { length: ex.tokens.length, hashes: localBlockHashes(ex.tokens, BLOCK) } : ex.detail;
}

function input(prefix: PrefixCache, text: string, items: readonly ExpandItem[], scope = "ns-a"): { view: ViewInput; newTemplate: number } {
  const r = prefix.encode(tok, text, BLOCK, "");
  return { view: { pieces: r.idPieces!, items, ids, encode, blockSize: BLOCK, scope, maxTokens: MAX_ROUTING_TOKENS }, newTemplate: r.length - r.reusedTokens };
}

/** Four user turns with an image each, every turn's view kept: the caches, the items and the text so far (answers included). */
function fourImageTurns(): { prefix: PrefixCache; views: ViewHashCache; items: ExpandItem[]; text: string } {
  const prefix = new PrefixCache();
  const views = new ViewHashCache();
  let text = "";
  const items: ExpandItem[] = [];
  for (let turn = 0; turn < 4; turn++) {
    items.push(image(50 + turn, 100 + turn));
    text += `<|im_start|>user\nq${turn}${IMAGE}<|im_end|>\n<|im_start|>assistant\n`;
    views.hashes(input(prefix, text, items).view);
    text += `a${turn}<|im_end|>\n`;
  }
  return { prefix, views, items, text };
}

describe("media view cache: only the new template tokens and blocks", () => {
  it("each turn equals the whole computation; its work is the new template tokens, none copied", () => {
    const prefix = new PrefixCache();
    const views = new ViewHashCache();
    let text = "<|im_start|>system\nYou look at pictures.<|im_end|>\n";
    const items: ExpandItem[] = [];
    let previousBlocks = 0;
    for (let turn = 0; turn < 12; turn++) {
      const media = turn % 3 === 2 ? VIDEO : turn % 3 === 1 ? IMAGE + IMAGE : IMAGE;
      if (media === VIDEO) items.push(video(3, 40 + turn, 9_000 + turn));
      else for (let k = 0; k < media.length / IMAGE.length; k++) items.push(image(64 + 17 * turn + k, 5_000 + 10 * turn + k));
      text += `<|im_start|>user\nQuestion ${turn}: ${"what is in it? ".repeat(turn * 7)}${media}<|im_end|>\n<|im_start|>assistant\n`;
      const before = views.stats();
      const { view, newTemplate } = input(prefix, text, items);
      const got = views.hashes(view);
      const want = whole(text, items);
      if (typeof want === "string" || !got.ok) throw new Error(`turn ${turn}: ${JSON.stringify(got)} ${String(want)}`);
      expect(got.length).toBe(want.length);
      expect(got.localHashes).toEqual(want.hashes);
      expect(got.hashPieces.flat()).toEqual(want.hashes);
      const after = views.stats();
      expect(after.expandedTokens - before.expandedTokens, `turn ${turn}: template tokens expanded`).toBe(turn === 0 ? view.pieces.flat().length : newTemplate);
      if (turn > 0) {
        expect(after.hits - before.hits).toBe(1);
        expect(got.reusedTokens).toBeGreaterThan(0);
        // The blocks from the previous turn's generation prompt on (its partial last block included).
        expect(after.hashedBlocks - before.hashedBlocks).toBeLessThanOrEqual(want.hashes.length - previousBlocks + 1);
        // Items compared: the earlier ones, once each.
        expect(after.comparedItems - before.comparedItems).toBeLessThanOrEqual(items.length);
      }
      previousBlocks = want.hashes.length;
      text += `It shows ${"shapes and colours ".repeat(turn + 1)}.<|im_end|>\n`;
    }
    expect(prefix.stats().copiedTokens).toBe(0);
  });

  it("kept pieces' hash arrays are the same objects on later turns (namespaced once per piece)", () => {
    const prefix = new PrefixCache();
    const views = new ViewHashCache();
    const items = [image(100, 1), image(120, 2)];
    const t1 = `<|im_start|>user\n${IMAGE}one<|im_end|>\n<|im_start|>assistant\n`;
    const r1 = views.hashes(input(prefix, t1, items.slice(0, 1)).view);
    const t2 = `${t1}a<|im_end|>\n<|im_start|>user\n${IMAGE}two<|im_end|>\n<|im_start|>assistant\n`;
    const r2 = views.hashes(input(prefix, t2, items).view);
    const t3 = `${t2}b<|im_end|>\n<|im_start|>user\nthree<|im_end|>\n<|im_start|>assistant\n`;
    const r3 = views.hashes(input(prefix, t3, items).view);
    if (!r1.ok || !r2.ok || !r3.ok) throw new Error("not ok");
    expect(r2.hashPieces[0]).toBe(r1.hashPieces[0]);
    expect(r3.hashPieces[0]).toBe(r1.hashPieces[0]);
    expect(r3.hashPieces[1]).toBe(r2.hashPieces[1]);
  });

  it("an earlier item changed (other pad value or layout): reuse stops before its piece, the result stays exact", () => {
    const { prefix, views, items, text: kept } = fourImageTurns();
    let text = kept;
    text += `<|im_start|>user\nlast<|im_end|>\n<|im_start|>assistant\n`;
    for (const changed of [
      items.map((it, i) => (i === 2 ? { ...it, padValue: 777 } : it)),
      items.map((it, i) => (i === 1 ? image(51 + 16, 101) : it)),
      items.map((it, i) => (i === 1 ? { ...it, pieces: it.pieces.map((p) => ({ ...p })) } : it)),
    ]) {
      const before = views.stats();
      const got = views.hashes(input(prefix, text, changed).view);
      const want = whole(text, changed);
      if (!got.ok || typeof want === "string") throw new Error("not ok");
      expect(got.localHashes).toEqual(want.hashes);
      expect(got.length).toBe(want.length);
      expect(views.stats().hits - before.hits).toBe(1);
    }
    // The equal copy of item 1's layout (third case) reused everything up to the new turn.
    const again = views.hashes(input(prefix, text, items).view);
    if (!again.ok) throw new Error("not ok");
    expect(again.localHashes).toEqual((whole(text, items) as { hashes: bigint[] }).hashes);
  });

  it("a hit on a piece that is no longer kept (only held by later ones) uses it without keeping it again", () => {
    const { prefix, views, items, text } = fourImageTurns();
    // Kept: pieces 0-3 (n0-n3), each extending the one before.
    expect(views.stats().entries).toBe(4);
    // Item 1 changed: n0 is used, the new piece 1 replaces n1 (same piece and parent), and pieces
    // 2-4 are kept after it. n1 is no longer kept, but n2 and n3 still extend it.
    const changed1 = items.map((it, i) => (i === 1 ? { ...it, padValue: 777 } : it));
    views.hashes(input(prefix, `${text}<|im_start|>user\nlast<|im_end|>\n<|im_start|>assistant\n`, changed1).view);
    expect(views.stats().entries).toBe(7);
    // The original item 1 but item 2 changed, after another question: n3's chain is found and used
    // up to n1. The new pieces 2-4 are kept after n1 (piece 2 replaces n2); n1 itself stays unkept
    // (kept again without its chain held, its drop would release pieces still in use).
    const changed2 = items.map((it, i) => (i === 2 ? { ...it, padValue: 778 } : it));
    const other = `${text}<|im_start|>user\nother<|im_end|>\n<|im_start|>assistant\n`;
    const before = views.stats();
    const got = views.hashes(input(prefix, other, changed2).view);
    if (!got.ok) throw new Error("not ok");
    expect(got.localHashes).toEqual((whole(other, changed2) as { hashes: bigint[] }).hashes);
    expect(views.stats().hits - before.hits).toBe(1);
    expect(views.stats().entries).toBe(7 - 1 + 3);
  });

  it("another scope shares nothing", () => {
    const prefix = new PrefixCache();
    const views = new ViewHashCache();
    const items = [image(80, 3)];
    const t1 = `<|im_start|>user\n${IMAGE}x<|im_end|>\n<|im_start|>assistant\n`;
    const t2 = `${t1}y<|im_end|>\n<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n`;
    views.hashes(input(prefix, t1, items, "tenant-a").view);
    const other = views.hashes(input(prefix, t2, items, "tenant-b").view);
    expect(other.ok && other.reusedTokens).toBe(0);
    const same = views.hashes(input(prefix, t2, items, "tenant-a").view);
    expect(same.ok && same.reusedTokens).toBeGreaterThan(0);
  });

  it("placeholder mismatches give expandPrompt's reason and detail, after kept pieces too", () => {
    const prefix = new PrefixCache();
    const views = new ViewHashCache();
    const t1 = `<|im_start|>user\n${IMAGE}<|im_end|>\n<|im_start|>assistant\n`;
    views.hashes(input(prefix, t1, [image(30, 1)]).view);
    const t2 = `${t1}ok<|im_end|>\n<|im_start|>user\n${IMAGE}${VIDEO}<|im_end|>\n<|im_start|>assistant\n`;
    const t3 = `${t1}ok<|im_end|>\n<|im_start|>user\n<|image_pad|> bare<|im_end|>\n<|im_start|>assistant\n`;
    const cases: [string, ExpandItem[]][] = [
      [t2, [image(30, 1), image(31, 2)]],
      [t2, [image(30, 1), image(31, 2), video(2, 8, 3), image(5, 4)]],
      [t2, [image(30, 1), image(31, 2), image(32, 3)]],
      [t3, [image(30, 1), image(31, 2)]],
    ];
    for (const [text, items] of cases) {
      const got = views.hashes(input(prefix, text, items).view);
      const want = whole(text, items);
      expect(typeof want).toBe("string");
      expect(got).toEqual({ ok: false, reason: "placeholder_mismatch", detail: want });
    }
    // A good turn after them is still exact and reuses the first turn.
    const items = [image(30, 1), image(31, 2), video(2, 8, 3)];
    const got = views.hashes(input(prefix, t2, items).view);
    expect(got.ok && got.reusedTokens).toBeGreaterThan(0);
    expect(got.ok && got.localHashes).toEqual((whole(t2, items) as { hashes: bigint[] }).hashes);
  });

  it("a triplet across two pieces is expanded from the pieces joined (exact, nothing kept)", () => {
    const views = new ViewHashCache();
    const all = tok.encode(`<|im_start|>user\nlook ${IMAGE} here<|im_end|>\n<|im_start|>assistant\n`, "");
    const at = all.indexOf(ids.imagePad);
    const items = [image(40, 9)];
    const got = views.hashes({ pieces: [all.slice(0, at), all.slice(at)], items, ids, encode, blockSize: BLOCK, scope: "s", maxTokens: MAX_ROUTING_TOKENS });
    const ex = expandPrompt(all, items, ids, encode);
    if (!got.ok || !ex.ok) throw new Error("not ok");
    expect(got.localHashes).toEqual(localBlockHashes(ex.tokens, BLOCK));
    expect(views.stats().entries).toBe(0);
    // Its work is the joined expansion's alone (the pieces tried first are not counted too).
    expect(views.stats().expandedTokens).toBe(all.length);
    expect(views.stats().hashedBlocks).toBe(got.hashPieces.flat().length);
  });

  it("a view over maxTokens is too_many_tokens and nothing of it is kept; the hashes are joined only when read", () => {
    const prefix = new PrefixCache();
    const views = new ViewHashCache();
    const t1 = `<|im_start|>user\n${IMAGE}one<|im_end|>\n<|im_start|>assistant\n`;
    const t2 = `${t1}a<|im_end|>\n<|im_start|>user\n${IMAGE}two<|im_end|>\n<|im_start|>assistant\n`;
    const items = [image(300, 1), image(300, 2)];
    const whole2 = whole(t2, items) as { length: number; hashes: bigint[] };
    const short = views.hashes({ ...input(prefix, t1, items.slice(0, 1)).view, maxTokens: 200 });
    expect(short).toMatchObject({ ok: false, reason: "too_many_tokens" });
    const long = views.hashes({ ...input(prefix, t2, items).view, maxTokens: whole2.length - 1 });
    expect(long).toMatchObject({ ok: false, reason: "too_many_tokens" });
    expect(views.stats().entries).toBe(0);
    const fits = views.hashes({ ...input(prefix, t2, items).view, maxTokens: whole2.length });
    if (!fits.ok) throw new Error("not ok");
    expect(fits.hashPieces.length).toBeGreaterThan(1);
    expect(views.stats().joinedHashes).toBe(0);
    expect(fits.localHashes).toEqual(whole2.hashes);
    expect(views.stats().joinedHashes).toBe(whole2.hashes.length);
  });

  it("a piece over a quarter of the budget is not kept, nor the pieces after it", () => {
    const prefix = new PrefixCache();
    const t1 = `<|im_start|>user\nsmall${IMAGE}<|im_end|>\n<|im_start|>assistant\n`;
    const t2 = `${t1}${"a long answer ".repeat(400)}<|im_end|>\n<|im_start|>user\n${IMAGE}two<|im_end|>\n<|im_start|>assistant\n`;
    const t3 = `${t2}b<|im_end|>\n<|im_start|>user\nthree<|im_end|>\n<|im_start|>assistant\n`;
    const items = [image(20, 1), image(20, 2)];
    // ~400 blocks (~22 kB with their routed copy) in the second piece, the first under 1 kB: a 16 kB budget admits the first only.
    const views = new ViewHashCache(16 * 1024);
    views.hashes(input(prefix, t1, items.slice(0, 1)).view);
    views.hashes(input(prefix, t2, items).view);
    expect(views.stats().entries).toBe(1);
    const got = views.hashes(input(prefix, t3, items).view);
    expect(views.stats().entries).toBe(1);
    expect(views.stats().bytes).toBeLessThanOrEqual(16 * 1024 / 4);
    expect(got.ok && got.localHashes).toEqual((whole(t3, items) as { hashes: bigint[] }).hashes);
  });
});
