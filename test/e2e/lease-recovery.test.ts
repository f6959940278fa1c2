/**
 * The media store restarted empty under a conversation's leases, through the local fleet (the edge
 * in workerd, the decode service as the media store, a locked-down simulated worker): the earlier
 * items the edge forwards on their leases are gone, the worker cannot load them, and the edge
 * stores them again by URL and sends the request once more: the client's request succeeds, on its
 * second attempt. The origin says `no-store`, so its count is the store's downloads.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makePng } from "../helpers/png.ts";
import { startMediaOrigin, type MediaOrigin } from "../helpers/media-origin.ts";
import { image, text } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;
let origin: MediaOrigin;
let base = "";
const files = new Map<string, Uint8Array>();

beforeAll(async () => {
  for (let i = 0; i < 3; i++) files.set(`/img-${i}.png`, makePng(256 + 64 * i, 192, { seed: 40 + i }));
  origin = await startMediaOrigin(files);
  const host = origin.host;
  base = origin.url;
  fleet = await startFleet({ workers: 1, decode: true, decodeArgs: ["--allow", host], vars: { KVEDGE_MEDIA: JSON.stringify({ allowlist: [host] }), KVEDGE_DEBUG_HEADERS: "on" }, log: logs });
}, 180_000);
afterAll(async () => {
  await fleet?.stop();
  await origin?.close();
});

async function send(messages: unknown[]): Promise<{ status: number; attempts: string | null; body: string }> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "cf-connecting-ip": "198.51.100.21" },
    body: JSON.stringify({ model: fleet.model, messages, max_tokens: 4 }),
  });
  return { status: r.status, attempts: r.headers.get("x-kvedge-attempts"), body: await r.text() };
}

describe("a media store restarted empty under leases", () => {
  it("the client's request succeeds: the edge stores the leased items again and sends it once more", async () => {
    const messages: unknown[] = [];
    const ask = async (parts: unknown[]) => {
      if (messages.length > 0) messages.push({ role: "assistant", content: "Shapes and colours." });
      messages.push({ role: "user", content: [text(`Question ${messages.length}: what is here?`), ...parts] });
      const before = origin.hits();
      const r = await send(messages);
      return { ...r, downloads: origin.hits() - before };
    };
    // img-0 and img-1 are leased by the store as it stores them (turns 1 and 2): turn 3 asks nothing.
    expect(await ask([image(`${base}/img-0.png`)])).toMatchObject({ status: 200, attempts: "1", downloads: 1 });
    expect(await ask([image(`${base}/img-1.png`)])).toMatchObject({ status: 200, attempts: "1", downloads: 1 });
    expect(await ask([text("Anything else?")])).toMatchObject({ status: 200, attempts: "1", downloads: 0 });
    await fleet.restartDecode();
    // Both earlier items are forwarded on their leases; the store has neither. The worker's first
    // attempt fails to load them; the edge stores both again (2 downloads, with img-2's 1) and the
    // second attempt answers.
    const r = await ask([image(`${base}/img-2.png`)]);
    expect(r.status, r.body).toBe(200);
    expect(r).toMatchObject({ attempts: "2", downloads: 3 });
    // The conversation goes on: nothing downloaded again.
    expect(await ask([text("And now?")])).toMatchObject({ status: 200, attempts: "1", downloads: 0 });
  }, 180_000);
});
