/**
 * A multi-turn vision chat through the local fleet (the edge in workerd, the decode service as the
 * media store, a locked-down simulated worker): each turn sends the media store only its new
 * items. The origin says `no-store`, so the store downloads a URL on every store call it gets:
 * the origin's count per turn is the edge's store calls per turn. Each turn is routed exactly
 * (mm_hashes for every item reach the worker) and finds the previous turn's prefix in the
 * worker's cache, and a second client sending the same conversation shares no media entry.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makePng } from "../helpers/png.ts";
import { startMediaOrigin, type MediaOrigin } from "../helpers/media-origin.ts";
import { image, makeMediaDir, makeVideo, sentToWorker, text, video } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;
let origin: MediaOrigin;
let base = "";
const files = new Map<string, Uint8Array>();

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "clip.mp4", { seconds: 2 });
  files.set("/clip.mp4", new Uint8Array(readFileSync(join(dir, "clip.mp4"))));
  for (let i = 0; i < 6; i++) files.set(`/img-${i}.png`, makePng(320 + 64 * i, 240, { seed: i + 1 }));
  origin = await startMediaOrigin(files, "application/octet-stream");
  const host = origin.host;
  base = origin.url;
  // Each client network its own cache namespace (as in production); routing headers for every caller.
  fleet = await startFleet({ workers: 1, decode: true, decodeArgs: ["--allow", host], vars: { KVEDGE_MEDIA: JSON.stringify({ allowlist: [host] }), KVEDGE_KV_SHARING: "per_tenant", KVEDGE_DEBUG_HEADERS: "on" }, log: logs });
}, 180_000);
afterAll(async () => {
  await fleet?.stop();
  await origin?.close();
});

async function send(messages: unknown[], clientIp: string): Promise<{ status: number; routing: string | null; requestId: string | null; worker: string | null; promptTokens: number; cachedTokens: number }> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "cf-connecting-ip": clientIp },
    body: JSON.stringify({ model: fleet.model, messages, max_tokens: 4 }),
  });
  const j = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return {
    status: r.status,
    routing: r.headers.get("x-kvedge-routing"),
    requestId: r.headers.get("x-request-id"),
    worker: r.headers.get("x-kvedge-worker"),
    promptTokens: j.usage?.prompt_tokens ?? 0,
    cachedTokens: j.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

describe("vision turns through the edge", () => {
  it("each turn stores only its new items, is routed exactly and reuses the previous turn's prefix", async () => {
    const messages: unknown[] = [{ role: "system", content: "You look at pictures and videos." }];
    const parts = [[image(`${base}/img-0.png`)], [image(`${base}/img-1.png`), image(`${base}/img-2.png`)], [video(`${base}/clip.mp4`)], [image(`${base}/img-3.png`)], [image(`${base}/img-4.png`)], [text("No new picture this time.")]];
    let items = 0;
    let previous = 0;
    for (const [t, p] of parts.entries()) {
      if (t > 0) messages.push({ role: "assistant", content: `Turn ${t}: I see shapes, colours and a test pattern, described at some length so the turn fills blocks.` });
      messages.push({ role: "user", content: [text(`Turn ${t + 1}: what is new here?`), ...p] });
      const fresh = p.filter((x) => x.type !== "text").length;
      items += fresh;
      const before = origin.hits();
      const r = await send(messages, "198.51.100.7");
      expect(r.status, `turn ${t + 1}`).toBe(200);
      expect(r.routing, `turn ${t + 1}`).toBe("exact");
      // The origin served exactly the new items (the store downloads each URL it is asked for).
      expect(origin.hits() - before, `turn ${t + 1}: origin requests`).toBe(fresh);
      const w = fleet.workers.find((x) => x.id === r.worker)!;
      const sent = await sentToWorker(w.url, r.requestId!);
      expect((sent!.mmHashes as string[]).length, `turn ${t + 1}: an mm_hash per item`).toBe(items);
      // The earlier turns' prefix (media included) is in the worker's cache: the layouts agree turn to turn.
      if (t > 0) expect(r.cachedTokens, `turn ${t + 1}: cached of ${previous} earlier tokens`).toBeGreaterThanOrEqual(previous - 64);
      previous = r.promptTokens;
    }
    // A client of another network with the same conversation: every one of its items is stored for it.
    const before = origin.hits();
    const other = await send(messages, "203.0.113.9");
    expect(other.status).toBe(200);
    expect(origin.hits() - before).toBe(items);
  }, 180_000);
});
