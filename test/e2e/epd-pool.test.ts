/**
 * An encode/prefill/decode pool end to end (scripts/local-fleet.ts shape "pd" with one encoder per prefill):
 * w1 runs `--disaggregation-mode prefill --language-only --encoder-urls <e1>
 * --encoder-transfer-backend zmq_to_tokenizer`, w2 `decode`, e1 `--encoder-only
 * --enable-prefix-mm-cache` with no relay. The edge routes on the prefill side exactly as for any
 * prefill; the prefill posts the video to its encoder itself (the router never talks to encoders).
 * The encoder caches the embedding by the video's own hash, and the caller's mm_hashes (the edge's)
 * pad the prefill's radix cache, so the repeat hits both.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat, makeMediaDir, makeVideo, text, userWith, video } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "clip.mp4", { seconds: 2, fps: 10 });
  fleet = await startFleet({ workers: 2, shape: "pd", encoders: 1, mediaDir: dir, log: logs });
});
afterAll(async () => {
  await fleet?.stop();
});

const encoderStats = async () => (await (await fetch(`${fleet.encoderUrls["w1"]![0]}/sim/encoder`)).json()) as { hits: number; misses: number };

describe("an EPD pool", () => {
  it("lists the prefill (encoder-backed) and the decode, never the encoder, as workers", async () => {
    const r = await fetch(`${fleet.edgeUrl}/admin/workers`, { headers: { authorization: `Bearer ${fleet.adminToken}` } });
    const rows = ((await r.json()) as { workers: { workerId: string; contract: unknown; languageOnly?: boolean; disaggregationMode: string }[] }).workers;
    expect(rows.map((w) => w.workerId).sort()).toEqual(["w1", "w2"]);
    // The prefill's relay says it is encoder-backed (/server_info language_only) and publishes its
    // contract (zmq_to_tokenizer applies the edge's mm_hashes); the decode encodes nothing.
    const w1 = rows.find((w) => w.workerId === "w1")!;
    expect(w1).toMatchObject({ disaggregationMode: "prefill", languageOnly: true });
    expect(w1.contract).not.toBeNull();
    expect(rows.find((w) => w.workerId === "w2")!.languageOnly).toBeUndefined();
  });

  it("a repeated video hits the encoder's cache and the prefill's KV (cached ≥ 0.95)", async () => {
    const body = userWith([text("Describe the clip."), video(`${fleet.mediaUrl}/clip.mp4`)]);
    const before = await encoderStats();
    const first = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
    expect(first.status).toBe(200);
    expect(first.routing).toBe("exact");
    expect(first.worker).toBe("w1");
    const mid = await encoderStats();
    expect(mid.misses - before.misses).toBe(1);
    expect(mid.hits).toBe(before.hits);

    const again = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
    expect(again.status).toBe(200);
    expect(again.worker).toBe("w1");
    expect((await encoderStats()).hits - mid.hits).toBe(1);
    expect(again.cachedTokens / again.promptTokens).toBeGreaterThanOrEqual(0.95);
    // The index knew the video's blocks on the prefill before the repeat went there.
    expect(again.overlapBlocks).toBeGreaterThanOrEqual(Math.floor((again.promptTokens * 0.9) / 16));
  });
});
