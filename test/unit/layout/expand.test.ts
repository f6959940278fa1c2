import { beforeAll, describe, expect, it } from "vitest";
import {
  QWEN_VISION_TOKEN_IDS as ID,
  buildRoutingView,
  expandPrompt,
  layoutImageItem,
  layoutVideoItem,
  mmHashHex,
  mmHashesInSglangOrder,
  padValueFromHash,
  requestIneligibility,
  sglangItemOrder,
  type ExpandItem,
  type MediaItem,
  type WorkerContract,
} from "../../../src/layout/index.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";

const tok = getQwenTokenizer("qwen3_vl");
const encode = (t: string): number[] => tok.encode(t, "");
let qwen3: WorkerContract;

beforeAll(() => {
  qwen3 = fixtureContract("qwen3_vl");
});

const IMG = [ID.visionStart, ID.imagePad, ID.visionEnd];
const VID = [ID.visionStart, ID.videoPad, ID.visionEnd];
const img = (count: number, padValue: number): ExpandItem => ({
  modality: "image",
  pieces: [{ kind: "vision_start" }, { kind: "pad", modality: "image", count }, { kind: "vision_end" }],
  padValue,
});

describe("expandPrompt", () => {
  it("replaces each template triplet by the item's run with its pad value", () => {
    const r = expandPrompt([10, ...IMG, 11, ...IMG, 12], [img(2, 1_000_001), img(3, 1_000_002)], ID, encode);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(Array.from(r.tokens)).toEqual([
      10, ID.visionStart, 1_000_001, 1_000_001, ID.visionEnd, 11, ID.visionStart, 1_000_002, 1_000_002, 1_000_002, ID.visionEnd, 12,
    ]);
    expect(r.spans).toEqual([
      { item: 0, start: 1, end: 5 },
      { item: 1, start: 6, end: 11 },
    ]);
    const worker = expandPrompt([10, ...IMG, 11], [img(2, 1_000_001)], ID, encode, { fill: "token_id" });
    expect(worker.ok && Array.from(worker.tokens)).toEqual([10, ID.visionStart, ID.imagePad, ID.imagePad, ID.visionEnd, 11]);
  });

  it("fails closed with a named reason on count, order or shape mismatch", () => {
    const video = layoutVideoItem(qwen3, { totalFrames: 60, avgFps: 30, height: 480, width: 640 });
    if (!video.ok) throw new Error(video.detail);
    const vid: ExpandItem = { modality: "video", pieces: video.pieces, padValue: 1_000_009 };
    const bad: [number[], ExpandItem[]][] = [
      [[1, ...IMG, 2], []],
      [[1, ...IMG, 2], [img(1, 1), img(1, 2)]],
      [[1, ...IMG, ...VID], [vid, img(1, 1)]], // order
      [[1, ID.imagePad, 2], [img(1, 1)]], // bare placeholder
      [[1, ID.visionStart, ID.imagePad, 2], [img(1, 1)]],
    ];
    for (const [tokens, items] of bad) {
      expect(expandPrompt(tokens, items, ID, encode), JSON.stringify(tokens)).toMatchObject({ ok: false, reason: "placeholder_mismatch" });
    }
    const good = expandPrompt([1, ...IMG, ...VID], [img(1, 1_000_001), vid], ID, encode);
    expect(good.ok).toBe(true);
  });

  it("mixed media: Qwen3 video keeps the template's outer pair and timestamps stay unpadded", () => {
    const video = layoutVideoItem(qwen3, { totalFrames: 8, avgFps: 2, height: 480, width: 640 });
    if (!video.ok) throw new Error(video.detail);
    // all 8 frames sampled; group means 0.25, 1.25, 2.25, 3.25 are exact ties -> even
    expect(video.geometry.timestampStrings).toEqual(["<0.2 seconds>", "<1.2 seconds>", "<2.2 seconds>", "<3.2 seconds>"]);
    const template = [5, ...VID, 6];
    const r = expandPrompt(template, [{ modality: "video", pieces: video.pieces, padValue: 1_000_777 }], ID, encode);
    if (!r.ok) throw new Error(r.detail);
    const t = Array.from(r.tokens);
    const ts0 = encode("<0.2 seconds>");
    expect(t.slice(0, 2 + ts0.length + 1)).toEqual([5, ID.visionStart, ...ts0, ID.visionStart]);
    expect(t[t.length - 1]).toBe(6);
    expect(t[t.length - 2]).toBe(ID.visionEnd);
    expect(t[t.length - 3]).toBe(ID.visionEnd);
    expect(t.filter((x) => x === 1_000_777).length).toBe(video.geometry.padCount);
  });
});

describe("SGLang item order for mm_hashes", () => {
  it("is images first then videos, each in prompt order", () => {
    const items = [
      { modality: "video" as const, mmHash: "v1" },
      { modality: "image" as const, mmHash: "i1" },
      { modality: "video" as const, mmHash: "v2" },
      { modality: "image" as const, mmHash: "i2" },
    ];
    expect(sglangItemOrder(items)).toEqual([1, 3, 0, 2]);
    expect(mmHashesInSglangOrder(items)).toEqual(["i1", "i2", "v1", "v2"]);
    expect(mmHashHex(0x1234n)).toBe("0000000000001234");
    expect(mmHashHex(-1n)).toBe("ffffffffffffffff");
  });
});

describe("request eligibility", () => {
  it("returns a named reason for each fail-closed rule", () => {
    expect(requestIneligibility({ partTypes: ["text", "image", "video", "text", "video"] })).toBeNull();
    expect(requestIneligibility({ partTypes: ["image"], mmProcessorKwargs: {} })).toBeNull();
    expect(requestIneligibility({ partTypes: ["image"], mmProcessorKwargs: { fps: 1 } })).toMatchObject({ reason: "mm_processor_kwargs" });
    expect(requestIneligibility({ partTypes: ["image"], mmProcessorKwargs: 0 })).toMatchObject({ reason: "mm_processor_kwargs" });
    expect(requestIneligibility({ partTypes: ["image"], mediaUuids: { image: ["u1"] } })).toMatchObject({ reason: "media_uuids" });
    expect(requestIneligibility({ partTypes: ["image"], mediaUuids: { image: [null] } })).toBeNull();
    expect(requestIneligibility({ partTypes: ["text", "input_audio"] })).toMatchObject({ reason: "audio" });
    expect(requestIneligibility({ partTypes: ["video", "video"] })).toMatchObject({ reason: "adjacent_videos" });
    expect(requestIneligibility({ partTypes: ["file"] })).toMatchObject({ reason: "unsupported_media" });
  });
});

describe("buildRoutingView", () => {
  const template = [100, ...VID, 101, ...IMG, 102];
  const items = (): MediaItem[] => [
    { modality: "video", hash: 0xabcdef0123n, probe: { totalFrames: 300, avgFps: 30, height: 720, width: 1280 } },
    { modality: "image", hash: 0x42n, probe: { width: 640, height: 480 } },
  ];

  it("builds the pad-value view and the mm_hashes SGLang expects", () => {
    const r = buildRoutingView(qwen3, template, items(), encode);
    if (!r.ok) throw new Error(r.detail);
    expect(r.mmHashes).toEqual([mmHashHex(0x42n), mmHashHex(0xabcdef0123n)]);
    expect(r.padValues).toEqual([padValueFromHash(0xabcdef0123n), 1_000_066]);
    const image = layoutImageItem(qwen3, { width: 640, height: 480 });
    if (!image.ok) throw new Error("image");
    expect(r.tokens.filter((t) => t === 1_000_066).length).toBe(image.geometry.padCount);
    expect(r.tokens[0]).toBe(100);
    expect(r.tokens[r.tokens.length - 1]).toBe(102);
    // no raw media placeholder survives in the routing view
    expect(r.tokens.includes(ID.imagePad) || r.tokens.includes(ID.videoPad)).toBe(false);
  });

  it("falls back with a reason instead of failing", () => {
    const it0 = items();
    it0[1] = { modality: "image", hash: null, probe: null };
    expect(buildRoutingView(qwen3, template, it0, encode)).toMatchObject({ ok: false, reason: "unresolved_media" });
    const it1 = items();
    it1[0] = { modality: "video", hash: 1n, probe: { totalFrames: 1, avgFps: 30, height: 720, width: 1280 } };
    expect(buildRoutingView(qwen3, template, it1, encode)).toMatchObject({ ok: false, reason: "single_frame_video" });
    expect(buildRoutingView(qwen3, template, items().slice(0, 1), encode)).toMatchObject({ ok: false, reason: "placeholder_mismatch" });
    const old = fixtureContract("qwen3_vl", { version: "0.5.12", flags: {} });
    expect(buildRoutingView(old, template, items(), encode)).toMatchObject({ ok: false, reason: "worker_rejects_mm_hashes" });
    const it2 = items();
    it2[1] = { modality: "image", hash: 1n, probe: { width: 1, height: 500 } };
    expect(buildRoutingView(qwen3, template, it2, encode)).toMatchObject({ ok: false, reason: "worker_would_reject" });
  });
});
