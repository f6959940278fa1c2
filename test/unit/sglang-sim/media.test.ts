/**
 * The simulated SGLang worker with media, over real HTTP: images and videos made by ffmpeg (wasm) in a
 * temp dir, served by a 127.0.0.1 media server in the test. Checks the expanded prompt against
 * token ids built with src/layout, pad values from mm_hashes (Python int(s, 16)) or from the SHA-256
 * of the bytes, cache hits/misses, and the pad-valued token ids in the KV events (decoded from the
 * replay ROUTER).
 *
 * Not independent: the simulator expands media with the same src/layout functions (and tokenizer)
 * these expectations use, so a layout bug would be made identically on both sides. These tests show
 * the simulator's plumbing (loading, mm_hashes, item order, caching, events) agrees with the edge's
 * layout; exactness against ids built by upstream code is test/unit/sglang-sim/golden.test.ts (the
 * simulator) and test/unit/edge/whole-request-golden.test.ts (the edge).
 */
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { publishedBlocks } from "../../helpers/published-blocks.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import {
  expandPrompt,
  layoutImageItem,
  layoutVideoItem,
  type ExpandItem,
  type VideoProbe,
  type WorkerContract,
} from "../../../src/layout/index.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { contentHash } from "../../../services/sglang-sim/media-hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

type Json = Record<string, any>;
const PAGE = 16;

// ---- media files -------------------------------------------------------------------------------

let dir: string;
const files: Record<string, Buffer> = {};
function ffmpeg(args: string[], name: string): Promise<Buffer> {
  return ffmpegToFile(args, join(dir, name));
}

/** A media server whose routes can change bytes under the same URL. */
class MediaServer {
  readonly routes = new Map<string, Buffer>();
  hits = 0;
  private readonly server: Server = createServer((req, res) => {
    this.hits++;
    const b = this.routes.get(req.url ?? "");
    if (!b) res.writeHead(404).end();
    else res.writeHead(200, { "content-type": "application/octet-stream", "content-length": b.length }).end(b);
  });
  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
  }
  url(path: string): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${path}`;
  }
  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}

const media = new MediaServer();

beforeAll(async () => {
  await initHashing();
  dir = mkdtempSync(join(tmpdir(), "sim-media-test-"));
  files.imgA = await ffmpeg(["-f", "lavfi", "-i", "testsrc=size=640x480:rate=1", "-frames:v", "1"], "a.png");
  files.imgB = await ffmpeg(["-f", "lavfi", "-i", "smptebars=size=640x480:rate=1", "-frames:v", "1"], "b.png");
  files.img2 = await ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=300x200:rate=1", "-frames:v", "1"], "c.png");
  const vid = (frames: number, name: string): Promise<Buffer> =>
    ffmpeg(["-f", "lavfi", "-i", "testsrc=size=320x240:rate=10", "-frames:v", String(frames), "-pix_fmt", "yuv420p", "-c:v", "libx264", "-bf", "0"], name);
  files.vid10 = await vid(10, "v10.mp4");
  files.vid2 = await vid(2, "v2.mp4");
  files.vid1 = await vid(1, "v1.mp4");
  await media.start();
  for (const [path, key] of [
    ["/a.png", "imgA"],
    ["/a-copy.png", "imgA"],
    ["/b.png", "imgB"],
    ["/c.png", "img2"],
    ["/mutable.png", "imgA"],
    ["/v10.mp4", "vid10"],
    ["/v10-copy.mp4", "vid10"],
    ["/v2.mp4", "vid2"],
    ["/v1.mp4", "vid1"],
  ] as const) {
    media.routes.set(path, files[key]!);
  }
}, 30_000);

afterAll(async () => {
  await media.close();
  rmSync(dir, { recursive: true, force: true });
});

// ---- expectations from src/layout (the code the simulator runs too: consistency, not exactness) ----

const tok = getQwenTokenizer("qwen3_vl");
const encode = (s: string): number[] => tok.encode(s, "");
const MOD = 1n << 30n;
/** SGLang: 1_000_000 + int(s, 16) % 2**30 (here only plain hex strings). */
const padFromHex = (hex: string): number => 1_000_000 + Number(BigInt(`0x${hex}`) % MOD);
/** The simulator's hash_feature stand-in: first 8 bytes of SHA-256, big-endian. */
const padFromBytes = (b: Uint8Array): number => 1_000_000 + Number(BigInt(`0x${createHash("sha256").update(b).digest("hex").slice(0, 16)}`) % MOD);

/** Long enough that the media ends inside a full (published) page. */
const ASK = "Describe what you see in this picture, in detail, with colours, shapes and the overall composition.";
const imagePrompt = (tag: string, n = 1): string =>
  `<|im_start|>user\n${tag} ${"<|vision_start|><|image_pad|><|vision_end|>".repeat(n)}${ASK}<|im_end|>\n<|im_start|>assistant\n`;
const videoPrompt = (tag: string): string => `<|im_start|>user\n${tag} <|vision_start|><|video_pad|><|vision_end|>What happens?<|im_end|>\n<|im_start|>assistant\n`;

function expected(contract: WorkerContract, text: string, items: { kind: "image"; w: number; h: number; pad: number }[] | { kind: "video"; probe: VideoProbe; pad: number }[]): { tokens: number[]; spans: { start: number; end: number }[] } {
  const ex: ExpandItem[] = items.map((it) => {
    const r = it.kind === "image" ? layoutImageItem(contract, { width: it.w, height: it.h }) : layoutVideoItem(contract, it.probe);
    if (!r.ok) throw new Error(r.detail);
    return { modality: it.kind, pieces: r.pieces, padValue: it.pad };
  });
  const r = expandPrompt(encode(text), ex, contract.tokenIds, encode);
  if (!r.ok) throw new Error(r.detail);
  return { tokens: Array.from(r.tokens), spans: r.spans };
}

/** SGLang's best hit for a fully cached prompt: it always computes the last token. */
const fullHit = (n: number): number => Math.floor((n - 1) / PAGE) * PAGE;

// ---- HTTP and KV-event helpers ------------------------------------------------------------------

async function post(w: SimulatedWorker, path: string, body: unknown): Promise<{ status: number; json: Json }> {
  const r = await fetch(`${w.url}${path}`, { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Json };
}

async function generate(w: SimulatedWorker, body: Json): Promise<Json> {
  const r = await post(w, "/generate", { sampling_params: { max_new_tokens: 2 }, ...body });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return r.json.meta_info as Json;
}

/** The prompt's full pages are all published, under SGLang's hashes of the expected (pad-valued) ids. */
async function expectPublished(w: SimulatedWorker, tokens: number[]): Promise<void> {
  const pages = Math.floor(tokens.length / PAGE);
  const { hashes } = engineBlockHashes(tokens.slice(0, pages * PAGE), PAGE);
  const blocks = await publishedBlocks(w.replayEndpoint!);
  hashes.forEach((h, k) => expect(blocks.get(h), `page ${k}`).toEqual(tokens.slice(k * PAGE, (k + 1) * PAGE)));
}

// ---- tests ----------------------------------------------------------------------------------------

describe("simulated worker with media (Qwen3-VL)", () => {
  let w: SimulatedWorker;
  let contract: WorkerContract;
  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", pageSize: PAGE });
    contract = fixtureContract("qwen3_vl", { version: "0.5.19-sim" });
  });
  afterAll(() => w.close());

  it("derives its contract from the model dir and reports a version that takes mm_hashes", async () => {
    expect(w.media.contract).toEqual(contract);
    expect(w.media.contract.acceptsMmHashes).toBe(true);
    const info = (await (await fetch(`${w.url}/server_info`)).json()) as Json;
    expect(info.version).toBe("0.5.19-sim");
    expect(info.mm_process_config).toBe(null);
  });

  it("an image request's prompt is the layout's expansion; a repeat hits the cache over the image", async () => {
    const text = imagePrompt("t1");
    const exp = expected(contract, text, [{ kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgA!) }]);
    const m1 = await generate(w, { text, image_data: [media.url("/a.png")] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    expect(m1.image_tokens).toBe(300); // 640x480 → 480x640 at factor 32 → 15·20
    expect(m1.video_tokens).toBeUndefined();
    expect(m1.cached_tokens).toBe(0);
    const m2 = await generate(w, { text, image_data: media.url("/a.png") }); // a bare item is a one-item list
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
    expect(m2.cached_tokens).toBeGreaterThan(exp.spans[0]!.end - PAGE);
    await expectPublished(w, exp.tokens);
  });

  it("same bytes + same mm_hashes under two URLs share blocks; pad = 1e6 + int(hash,16) mod 2^30 in the KV events", async () => {
    const text = imagePrompt("t2");
    const hash = "deadbeefcafef00d";
    const pad = padFromHex(hash);
    expect(pad).toBe(1_000_000 + (0xcafef00d % 2 ** 30));
    const exp = expected(contract, text, [{ kind: "image", w: 640, h: 480, pad }]);
    const m1 = await generate(w, { text, image_data: [media.url("/a.png")], mm_hashes: [hash] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    const m2 = await generate(w, { text, image_data: [media.url("/a-copy.png")], mm_hashes: [hash] });
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
    // Python int(s, 16) spellings of the same number give the same pad value.
    const m3 = await generate(w, { text, image_data: [media.url("/a.png")], mm_hashes: [" 0xDEAD_BEEF_CAFE_F00D\n"] });
    expect(m3.cached_tokens).toBe(fullHit(exp.tokens.length));
    // Another hash for the same bytes: the image's pages miss.
    const m4 = await generate(w, { text, image_data: [media.url("/a.png")], mm_hashes: ["1234"] });
    expect(m4.cached_tokens).toBeLessThanOrEqual(exp.spans[0]!.start + 1);

    // Pad values at exactly the image's pad positions of the published pages.
    await expectPublished(w, exp.tokens);
    const blocks = await publishedBlocks(w.replayEndpoint!);
    const { hashes } = engineBlockHashes(exp.tokens.slice(0, Math.floor(exp.tokens.length / PAGE) * PAGE), PAGE);
    const published = hashes.flatMap((h) => blocks.get(h)!);
    const padPositions = published.flatMap((t, i) => (t === pad ? [i] : []));
    const { start, end } = exp.spans[0]!;
    expect(padPositions.length).toBe(300);
    expect(padPositions[0]).toBe(start + 1); // after <|vision_start|>
    expect(padPositions.at(-1)).toBe(end - 2); // before <|vision_end|>
    expect(published[start]).toBe(contract.tokenIds.visionStart);
    expect(published[end - 1]).toBe(contract.tokenIds.visionEnd);
  });

  it("without mm_hashes pad values come from the content: two URLs with the same bytes hit, changed bytes miss", async () => {
    const text = imagePrompt("t3");
    const exp = expected(contract, text, [{ kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgA!) }]);
    expect(padFromBytes(files.imgA!)).toBe(1_000_000 + Number(contentHash(files.imgA!) % MOD));
    const m1 = await generate(w, { text, image_data: [media.url("/mutable.png")] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    const m2 = await generate(w, { text, image_data: [media.url("/a-copy.png")] });
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
    media.routes.set("/mutable.png", files.imgB!); // same URL, same size, other bytes
    const m3 = await generate(w, { text, image_data: [media.url("/mutable.png")] });
    expect(m3.prompt_tokens).toBe(exp.tokens.length);
    expect(m3.cached_tokens).toBeLessThanOrEqual(exp.spans[0]!.start + 1);
    const expB = expected(contract, text, [{ kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgB!) }]);
    await expectPublished(w, expB.tokens);
  });

  it("a wrong mm_hashes count is ignored as a whole; a malformed entry only for its item", async () => {
    const text = imagePrompt("t4", 2);
    const byContent = expected(contract, text, [
      { kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgA!) },
      { kind: "image", w: 300, h: 200, pad: padFromBytes(files.img2!) },
    ]);
    const images = [media.url("/a.png"), media.url("/c.png")];
    const m1 = await generate(w, { text, image_data: images, mm_hashes: ["aa", "bb", "cc"] });
    expect(m1.prompt_tokens).toBe(byContent.tokens.length);
    const m2 = await generate(w, { text, image_data: images }); // no hashes: same pad values
    expect(m2.cached_tokens).toBe(fullHit(byContent.tokens.length));
    await expectPublished(w, byContent.tokens);

    const mixed = expected(contract, text, [
      { kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgA!) },
      { kind: "image", w: 300, h: 200, pad: padFromHex("abc") },
    ]);
    const m3 = await generate(w, { text, image_data: images, mm_hashes: ["xyz", "abc"] });
    expect(m3.cached_tokens).toBeGreaterThanOrEqual(byContent.spans[0]!.end - PAGE); // the first image still hits
    expect(m3.cached_tokens).toBeLessThanOrEqual(byContent.spans[1]!.start + 1);
    await expectPublished(w, mixed.tokens);
  });

  it("a 10-frame video: torchcodec metadata, timestamped groups, content pad values, cache hit across URLs", async () => {
    const text = videoPrompt("t5");
    const probe = { totalFrames: 10, avgFps: 10, width: 320, height: 240 };
    const exp = expected(contract, text, [{ kind: "video", probe, pad: padFromBytes(files.vid10!) }]);
    const m1 = await generate(w, { text, video_data: [media.url("/v10.mp4")] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    const lay = layoutVideoItem(contract, probe);
    if (!lay.ok) throw new Error(lay.detail);
    expect(m1.video_tokens).toBe(lay.geometry.padCount);
    expect(lay.geometry.numGroups).toBe(2); // 10 frames @10 fps → 4 sampled frames → 2 groups
    expect(lay.geometry.timestampStrings).toEqual(["<0.1 seconds>", "<0.8 seconds>"]);
    const m2 = await generate(w, { text, video_data: [media.url("/v10-copy.mp4")] });
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
    expect(m2.cached_tokens).toBeGreaterThanOrEqual(128);
    await expectPublished(w, exp.tokens);
  });

  it("a 2-frame clip gives one temporal group; mm_hashes pads every video token", async () => {
    const text = videoPrompt("t6");
    const probe = { totalFrames: 2, avgFps: 10, width: 320, height: 240 };
    const exp = expected(contract, text, [{ kind: "video", probe, pad: padFromHex("0123456789abcdef") }]);
    const m1 = await generate(w, { text, video_data: [media.url("/v2.mp4")], mm_hashes: ["0123456789abcdef"] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    const lay = layoutVideoItem(contract, probe);
    if (!lay.ok) throw new Error(lay.detail);
    expect(lay.geometry.numGroups).toBe(1);
    await expectPublished(w, exp.tokens);
    const m2 = await generate(w, { text, video_data: [media.url("/v2.mp4")], mm_hashes: ["0123456789abcdef"] });
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
  });

  it("image + video in one request: mm_hashes are images first, then videos", async () => {
    const text = `<|im_start|>user\nt7 <|vision_start|><|video_pad|><|vision_end|> and <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n`;
    const ex: ExpandItem[] = [];
    const v = layoutVideoItem(contract, { totalFrames: 2, avgFps: 10, width: 320, height: 240 });
    const i = layoutImageItem(contract, { width: 640, height: 480 });
    if (!v.ok || !i.ok) throw new Error("layout");
    ex.push({ modality: "video", pieces: v.pieces, padValue: padFromHex("bbbb") }, { modality: "image", pieces: i.pieces, padValue: padFromHex("aaaa") });
    const r = expandPrompt(encode(text), ex, contract.tokenIds, encode);
    if (!r.ok) throw new Error(r.detail);
    const m = await generate(w, { text, image_data: [media.url("/a.png")], video_data: [media.url("/v2.mp4")], mm_hashes: ["aaaa", "bbbb"] });
    expect(m.prompt_tokens).toBe(r.tokens.length);
    expect(m.image_tokens).toBe(300);
    expect(m.video_tokens).toBe(v.geometry.padCount);
    await expectPublished(w, Array.from(r.tokens));
  });

  it("/v1/chat/completions with image_url (data: URL) and video_url parts", async () => {
    const dataUrl = `data:image/png;base64,${files.imgA!.toString("base64")}`;
    const body = {
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "t8" },
            { type: "image_url", image_url: { url: dataUrl } },
            { type: "video_url", video_url: { url: media.url("/v10.mp4") } },
            { type: "text", text: "Compare." },
          ],
        },
      ],
      max_tokens: 2,
    };
    const r1 = await post(w, "/v1/chat/completions", body);
    expect(r1.status, JSON.stringify(r1.json)).toBe(200);
    const u1 = r1.json.usage as Json;
    const lay = layoutVideoItem(contract, { totalFrames: 10, avgFps: 10, width: 320, height: 240 });
    if (!lay.ok) throw new Error(lay.detail);
    expect(u1.prompt_tokens_details).toEqual({ cached_tokens: 0, image_tokens: 300, video_tokens: lay.geometry.padCount });
    const r2 = await post(w, "/v1/chat/completions", body);
    const u2 = r2.json.usage as Json;
    expect(u2.prompt_tokens).toBe(u1.prompt_tokens);
    expect(u2.prompt_tokens_details.cached_tokens).toBe(fullHit(u1.prompt_tokens as number));
  });

  it("SGLang-style errors: unreachable media, 1-frame video, placeholder mismatch, bad base64", async () => {
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, "127.0.0.1", r));
    const port = (dead.address() as AddressInfo).port;
    await new Promise((r) => dead.close(r));
    const cases: [Json, RegExp][] = [
      [{ text: imagePrompt("e1"), image_data: [`http://127.0.0.1:${port}/x.png`] }, /Failed to load image/],
      [{ text: imagePrompt("e2"), image_data: [media.url("/missing.png")] }, /Failed to load image: .*404/],
      [{ text: videoPrompt("e3"), video_data: [media.url("/v1.mp4")] }, /^nframes should in interval \[2, 1\], but got 0\.$/],
      [{ text: imagePrompt("e4", 2), image_data: [media.url("/a.png")] }, /Mismatch: more media placeholders than media items/],
      [{ text: imagePrompt("e5"), image_data: ["data:image/png;base64,AAA"] }, /Failed to load image/],
      [{ text: imagePrompt("e6"), image_data: ["/etc/passwd"] }, /does not read media from its own disk/],
      [{ text: imagePrompt("e7"), image_data: [media.url("/v2.mp4")] }, /Failed to load image/],
    ];
    for (const [body, re] of cases) {
      const r = await post(w, "/generate", { sampling_params: { max_new_tokens: 1 }, ...body });
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(r.json.error.message).toMatch(re);
    }
    // mm_hashes without media: zero items, so the list is ignored.
    const ok = await post(w, "/generate", { text: "hello", mm_hashes: ["abcd"], sampling_params: { max_new_tokens: 1 } });
    expect(ok.status).toBe(200);
  });
});

describe("a worker that ignores caller mm_hashes (acceptsMmHashes: false)", () => {
  let w: SimulatedWorker;
  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", pageSize: PAGE, acceptsMmHashes: false, family: "qwen2_5_vl", template: "qwen2vl" });
  });
  afterAll(() => w.close());

  it("reports an old version and pads with content hashes whatever mm_hashes say", async () => {
    const info = (await (await fetch(`${w.url}/server_info`)).json()) as Json;
    expect(info.version).toBe("0.5.10-sim");
    expect(w.media.contract.acceptsMmHashes).toBe(false);
    const contract = fixtureContract("qwen2_5_vl", { version: "0.5.10-sim" });
    expect(w.media.contract).toEqual(contract);
    const text = imagePrompt("q25");
    const exp = expected(contract, text, [{ kind: "image", w: 640, h: 480, pad: padFromBytes(files.imgA!) }]);
    const m1 = await generate(w, { text, image_data: [media.url("/a.png")], mm_hashes: ["deadbeef"] });
    expect(m1.prompt_tokens).toBe(exp.tokens.length);
    expect(m1.image_tokens).toBe(17 * 23); // 480x640 at factor 28 → 476x644
    await expectPublished(w, exp.tokens);
    const m2 = await generate(w, { text, image_data: [media.url("/a-copy.png")], mm_hashes: ["01"] });
    expect(m2.cached_tokens).toBe(fullHit(exp.tokens.length));
  });

  it("refuses a version that contradicts acceptsMmHashes", async () => {
    await expect(startSimulatedWorker({ acceptsMmHashes: false, version: "0.5.19" })).rejects.toThrow(/acceptsMmHashes/);
    await expect(startSimulatedWorker({ acceptsMmHashes: true, version: "0.5.12" })).rejects.toThrow(/acceptsMmHashes/);
  });
});
