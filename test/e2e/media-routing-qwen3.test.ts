/**
 * Exact media routing end to end, Qwen3-VL contract, block size 16: the edge predicts the worker's
 * pad-valued token sequence for images and videos, so repeats of the same media hit the worker's
 * KV cache; with exact media routing off the same workload only matches its text prefix.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat, expectExactRepeats as expectExact, repeat3 as send3, copyMedia, image, makeImage, makeMediaDir, makeVideo, sentToWorker, text, userWith, video, type ChatResult } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;
let dir: string;
const hitRate = (r: ChatResult) => r.overlapBlocks / Math.max(1, Math.floor(r.promptTokens / 16));

beforeAll(async () => {
  dir = makeMediaDir();
  makeVideo(dir, "clip10.mp4", { seconds: 5 });
  makeVideo(dir, "clip2.mp4", { frames: 2, source: "testsrc2" });
  makeVideo(dir, "clip10b.mp4", { seconds: 5, source: "smptebars" });
  for (const [i, src] of ["testsrc", "testsrc2", "smptebars", "rgbtestsrc"].entries()) makeImage(dir, `img${i}.png`, { source: src });
  copyMedia(dir, "img0.png", "img0-copy.png");
  makeImage(dir, "mutable.png", { source: "testsrc" });
  fleet = await startFleet({ workers: 2, mediaDir: dir, log: logs });
});
afterAll(async () => {
  await fleet?.stop();
});

const repeat3 = (body: Record<string, unknown>) => send3(fleet.edgeUrl, { model: fleet.model, ...body });
const expectExactRepeats = (rs: ChatResult[], minCached: number) => expectExact(rs, minCached, expect);

describe("Qwen3-VL exact media routing", () => {
  it("a 10-frame video repeated 3 times hits the cache; mm_hashes reach the worker", async () => {
    const rs = await repeat3(userWith([text("Describe this video in detail."), video(`${fleet.mediaUrl}/clip10.mp4`)]));
    expectExactRepeats(rs, 128);
    expect(rs[0]!.totalBlocks).toBeGreaterThanOrEqual(10);
    const w = fleet.workers.find((x) => x.id === rs[0]!.worker)!;
    const sent = await sentToWorker(w.url, rs[1]!.requestId!);
    expect(sent).toMatchObject({ videos: 1 });
    expect(Array.isArray(sent!.mmHashes) && (sent!.mmHashes as string[])[0]).toMatch(/^[0-9a-f]{16}$/);
    console.log(`e2e qwen3 video: total blocks ${rs[0]!.totalBlocks}, repeats cached ${rs.slice(1).map((r) => r.cachedTokens).join(",")} of ${rs[0]!.promptTokens}`);
  });

  it("4 images in one request, image+video mixed, and a 2-frame clip", async () => {
    const urls = [0, 1, 2, 3].map((i) => `${fleet.mediaUrl}/img${i}.png`);
    expectExactRepeats(await repeat3(userWith([text("Compare these."), ...urls.map(image)])), 128);
    expectExactRepeats(await repeat3(userWith([image(urls[1]!), text("and then"), video(`${fleet.mediaUrl}/clip10b.mp4`), text("What changed?")])), 128);
    const two = await repeat3(userWith([text("A very short clip:"), video(`${fleet.mediaUrl}/clip2.mp4`)]));
    expectExactRepeats(two, 16);
  });

  it("the same bytes under two URLs share blocks; the same URL with changed bytes does not", async () => {
    const a = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("Look at this image carefully, please."), image(`${fleet.mediaUrl}/img0.png`)]) });
    const b = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("Look at this image carefully, please."), image(`${fleet.mediaUrl}/img0-copy.png`)]) });
    expect(b.routing).toBe("exact");
    expect(b.worker).toBe(a.worker);
    expect(b.overlapBlocks / b.totalBlocks).toBeGreaterThanOrEqual(0.95);

    const first = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("What is in mutable?"), image(`${fleet.mediaUrl}/mutable.png`)]) });
    expect(first.routing).toBe("exact");
    const again = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("What is in mutable?"), image(`${fleet.mediaUrl}/mutable.png`)]) });
    expect(again.overlapBlocks / again.totalBlocks).toBeGreaterThanOrEqual(0.95);
    writeFileSync(join(dir, "mutable.png"), readFileSync(join(dir, "img3.png")));
    const changed = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("What is in mutable?"), image(`${fleet.mediaUrl}/mutable.png`)]) });
    expect(changed.status).toBe(200);
    expect(changed.routing).toBe("exact");
    // Only the text before the image can match: the image's pad values changed with its bytes.
    expect(changed.overlapBlocks / changed.totalBlocks).toBeLessThan(0.5);
  });
});

describe("control: exact media routing disabled", () => {
  it("the same video workload only matches its text prefix (hit rate < 0.5)", async () => {
    const control = await startFleet({ workers: 2, mediaDir: dir, exactMedia: false, log: logs });
    try {
      const rs: ChatResult[] = [];
      for (let i = 0; i < 3; i++) rs.push(await chat(control.edgeUrl, { model: control.model, ...userWith([text("Describe this video in detail."), video(`${control.mediaUrl}/clip10.mp4`)]) }));
      for (const r of rs) {
        expect(r.status).toBe(200);
        expect(r.routing).toBe("text_prefix");
        expect(r.fallbackReason).toBe("exact_media_disabled");
      }
      const mean = rs.slice(1).reduce((a, r) => a + hitRate(r), 0) / 2;
      console.log(`e2e control (exact media off): mean router hit rate over repeats ${mean.toFixed(3)}`);
      expect(mean).toBeLessThan(0.5);
    } finally {
      await control.stop();
    }
  });
});
