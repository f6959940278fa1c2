/**
 * Every fail-closed rule of exact media routing, end to end: the request still succeeds, routes on
 * its text prefix, sends no mm_hashes to the worker, and the reason is recorded (response header
 * and the metrics). Also the cohort rule: a worker joining with a different (or no) contract
 * switches exact media routing off for the pool, and it comes back when that worker leaves.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat, image, makeImage, makeMediaDir, makeVideo, sentToWorker, text, userWith, video, type ChatResult } from "./helpers/media.ts";
import { makePng } from "../helpers/png.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "a.mp4", { seconds: 2 });
  makeVideo(dir, "b.mp4", { seconds: 2, source: "testsrc2" });
  makeImage(dir, "img.png");
  // profileTtlMs 0: the edge re-reads the pool's cohort on every media request.
  fleet = await startFleet({ workers: 2, mediaDir: dir, log: logs, vars: { KVEDGE_ROUTING: JSON.stringify({ profileTtlMs: 0 }) } });
});
afterAll(async () => {
  await fleet?.stop();
});

const img = () => image(`${fleet.mediaUrl}/img.png`);
const vid = (n = "a") => video(`${fleet.mediaUrl}/${n}.mp4`);

async function expectFallback(body: Record<string, unknown>, reason: string): Promise<ChatResult> {
  const r = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.routing).toBe("text_prefix");
  expect(r.fallbackReason).toBe(reason);
  const w = fleet.workers.find((x) => x.id === r.worker)!;
  const sent = await sentToWorker(w.url, r.requestId!);
  expect(sent, "the worker got the request").toBeDefined();
  expect(sent!.mmHashes).toBeNull();
  return r;
}

async function expectExact(body: Record<string, unknown>): Promise<void> {
  const r = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.routing, r.fallbackReason ?? "").toBe("exact");
}

describe("fail-closed media routing", () => {
  it("request-shape rules: mm_processor_kwargs, media uuids, audio, adjacent videos", async () => {
    await expectExact(userWith([text("baseline"), img()]));
    await expectFallback({ ...userWith([text("kwargs"), img()]), mm_processor_kwargs: { max_pixels: 100_000 } }, "mm_processor_kwargs");
    await expectFallback(userWith([text("uuid"), { ...img(), uuid: "client-id-1" }]), "media_uuids");
    await expectFallback(userWith([text("audio"), img(), { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } }]), "audio");
    await expectFallback(userWith([text("two videos"), vid("a"), vid("b")]), "adjacent_videos");
  });

  it("an image in an assistant message (the Qwen3-VL templates print none): served, routed on the text prefix", async () => {
    // SGLang's base processor does not load media items beyond the prompt's placeholders (a warning).
    await expectFallback(
      {
        messages: [
          { role: "user", content: [text("what is this?"), img()] },
          { role: "assistant", content: [text("a test card, like this one:"), img()] },
          { role: "user", content: "and?" },
        ],
      },
      "placeholder_mismatch",
    );
  });

  it("an image the pool's processor raises on is the client's 400 naming the part, never forwarded", async () => {
    // transformers' Qwen2-VL smart_resize: "absolute aspect ratio must be smaller than 200".
    const thin = `data:image/png;base64,${Buffer.from(makePng(1, 300)).toString("base64")}`;
    const r = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("thin"), img(), image(thin)]) });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    const e = (r.body as { error: { code: string; param: string; message: string } }).error;
    expect(e).toMatchObject({ code: "media_unprocessable", param: "messages[0].content[2]" });
    expect(e.message).toContain("ValueError: absolute aspect ratio must be smaller than 200, got 300.0."); // Python float text, as the worker words it
  });

  it("a worker joining with no contract, or a different one, turns exact routing off until it leaves", async () => {
    await expectExact(userWith([text("cohort"), img()]));
    const noContract = await fleet.addWorker(["--no-mm-hashes"]);
    await expectFallback(userWith([text("cohort"), img()]), "no_contract");
    await fleet.killWorker(fleet.workers.indexOf(noContract));
    await waitExact(userWith([text("cohort"), img()]));

    const other = await fleet.addWorker(["--model-dir", join(process.cwd(), "test/fixtures/models/qwen2_5_vl"), "--family", "qwen2_5_vl", "--template", "qwen2vl"]);
    await expectFallback(userWith([text("cohort"), img()]), "contract_disagreement");
    await fleet.killWorker(fleet.workers.indexOf(other));
    await waitExact(userWith([text("cohort"), img()]));
  });

  it("decode service (media store) down: video URLs are refused at once with the reason, never forwarded", async () => {
    await expectExact(userWith([text("video ok"), vid("a")]));
    await fleet.stopDecode();
    const started = Date.now();
    const r = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("video, decode down"), vid("b")]) });
    expect(r.status, JSON.stringify(r.body)).toBe(503);
    expect((r.body as { error: { code: string; message: string } }).error).toMatchObject({ code: "media_store_unavailable", message: expect.stringContaining("decode_unreachable") });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("fallback reasons are exported as metrics", async () => {
    const res = await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: `Bearer ${fleet.adminToken}` } });
    expect(res.status).toBe(200);
    const body = await res.text();
    for (const reason of ["mm_processor_kwargs", "media_uuids", "audio", "adjacent_videos", "no_contract", "contract_disagreement"])
      expect(body, reason).toMatch(new RegExp(`reason="${reason}"`));
  });
});

/** The relay reports a killed worker down within about a second; until then the cohort still counts it. */
async function waitExact(body: Record<string, unknown>): Promise<void> {
  const deadline = Date.now() + 10_000;
  let last: ChatResult | null = null;
  while (Date.now() < deadline) {
    last = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
    if (last.status === 200 && last.routing === "exact") return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`exact routing did not come back: ${JSON.stringify(last && { ...last, body: undefined })}`);
}
