/**
 * Exact media routing end to end for a Qwen2.5-VL pool (block size 16): repeated videos, images,
 * image+video and a 2-frame clip hit the worker's cache, as for Qwen3-VL (whose layout differs:
 * no timestamps, 28-pixel factor).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { expectExactRepeats as expectExact, repeat3 as send3, image, makeImage, makeMediaDir, makeVideo, text, userWith, video, type ChatResult } from "./helpers/media.ts";

let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "clip10.mp4", { seconds: 5 });
  makeVideo(dir, "clip2.mp4", { frames: 2, source: "testsrc2" });
  for (const [i, src] of ["testsrc", "testsrc2", "smptebars", "rgbtestsrc"].entries()) makeImage(dir, `img${i}.png`, { source: src });
  fleet = await startFleet({
    workers: 2,
    mediaDir: dir,
    model: "Qwen/Qwen2.5-VL-7B-Instruct",
    family: "qwen2_5_vl",
    template: "qwen2vl",
    log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined,
  });
});
afterAll(async () => {
  await fleet?.stop();
});

const repeat3 = (parts: unknown[]) => send3(fleet.edgeUrl, { model: fleet.model, ...userWith(parts) });
const expectExactRepeats = (rs: ChatResult[], minCached: number) => expectExact(rs, minCached, expect);

describe("Qwen2.5-VL exact media routing", () => {
  it("10-frame video, 4 images, image+video and a 2-frame clip", async () => {
    const v = await repeat3([text("Describe this video in detail."), video(`${fleet.mediaUrl}/clip10.mp4`)]);
    expectExactRepeats(v, 128);
    expect(v[0]!.totalBlocks).toBeGreaterThanOrEqual(10);
    expectExactRepeats(await repeat3([text("Compare these."), ...[0, 1, 2, 3].map((i) => image(`${fleet.mediaUrl}/img${i}.png`))]), 128);
    expectExactRepeats(await repeat3([image(`${fleet.mediaUrl}/img2.png`), text("then"), video(`${fleet.mediaUrl}/clip10.mp4`)]), 128);
    expectExactRepeats(await repeat3([text("Short:"), video(`${fleet.mediaUrl}/clip2.mp4`)]), 16);
    console.log(`e2e qwen2.5 video: total blocks ${v[0]!.totalBlocks}, repeats cached ${v.slice(1).map((r) => r.cachedTokens).join(",")} of ${v[0]!.promptTokens}`);
  });
});
