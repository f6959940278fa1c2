/**
 * The media store's caches answer a client label only from its own calls (services/decode/
 * cache-partition.ts), over real HTTP on 127.0.0.1 with a real prober: a URL another label made
 * fresh is fetched again, bytes another label probed are probed again, and the answer a label gets
 * for bytes the store already holds (stored by another label) is the answer of a first store.
 */
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { nativeAvailable } from "../../../services/decode/probers.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { makePng } from "../../helpers/png.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

const TOKEN = "partition-test-token-0123456789a";
const DECODER = (await nativeAvailable()) ? "native" : "wasm";
const IMAGE = makePng(40, 24, { seed: 7 });
let clip: Uint8Array = new Uint8Array(0);
let origin: http.Server;
let base = "";
const hits: Record<string, number> = {};
let svc: DecodeService;
let client: DecodeClient;

beforeAll(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "kvedge-partition-"));
  clip = new Uint8Array(await ffmpegToFile(["-f", "lavfi", "-i", "testsrc=size=64x48:rate=25", "-frames:v", "12", "-c:v", "libx264", "-preset", "veryfast"], path.join(dir, "c.mp4")));
  rmSync(dir, { recursive: true, force: true });
  origin = http.createServer((req, res) => {
    const p = new URL(req.url!, "http://x").pathname;
    hits[p] = (hits[p] ?? 0) + 1;
    // Fresh for a minute: without partitions any label's next call would reuse it unasked.
    const fresh = { "cache-control": "max-age=60", etag: '"v1"' };
    if (p === "/clip.mp4") res.writeHead(200, { "content-type": "video/mp4", ...fresh }).end(clip);
    else if (p === "/a.png" || p === "/b.png") res.writeHead(200, { "content-type": "image/png", ...fresh }).end(IMAGE);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => origin.listen(0, "127.0.0.1", r));
  const port = (origin.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
  svc = await startDecodeService({ token: TOKEN, decoder: DECODER, concurrency: 2, maxBodyBytes: 400_000, fetch: { allowlist: [`127.0.0.1:${port}`] } });
  client = new DecodeClient({ url: svc.url, token: TOKEN });
}, 60_000);

afterAll(async () => {
  await svc?.close();
  origin.closeAllConnections();
  await new Promise((r) => origin.close(r));
});

describe("the media store's caches are per client label", () => {
  it("a URL another label made fresh is fetched and probed again, with the same answer", async () => {
    const url = `${base}/clip.mp4`;
    const first = await client.probe({ url }, { client: "c-alice" });
    expect(first).toMatchObject({ ok: true, cache: "miss" });
    const again = await client.probe({ url }, { client: "c-alice" });
    expect(again).toMatchObject({ ok: true, cache: "fresh" });
    expect(hits["/clip.mp4"]).toBe(1);
    const probes = svc.stats.probes;

    const other = await client.probe({ url }, { client: "c-mallory" });
    expect(other).toMatchObject({ ok: true, cache: "miss" });
    expect(hits["/clip.mp4"]).toBe(2);
    expect(svc.stats.probes).toBe(probes + 1);
    // The bytes stay stored once: the second label's copy is a dedup, answered as a first store is.
    if (first.ok && other.ok) expect(other.probe).toEqual(first.probe);
    expect(svc.store().dedups).toBe(1);
  });

  it("bytes another label probed are probed again", async () => {
    const bytes = clip.slice();
    const probes = svc.stats.probes;
    expect(await client.probe({ bytes }, { client: "c-bob" })).toMatchObject({ ok: true, cache: "miss" });
    expect(await client.probe({ bytes }, { client: "c-bob" })).toMatchObject({ ok: true, cache: "hit" });
    expect(svc.stats.probes).toBe(probes + 1);
    expect(await client.probe({ bytes }, { client: "c-carol" })).toMatchObject({ ok: true, cache: "miss" });
    expect(svc.stats.probes).toBe(probes + 2);
  });

  it("storing bytes another label stored answers as a first store does", async () => {
    const dedups = svc.store().dedups;
    const first = await client.store(`${base}/a.png`, "image", { client: "c-alice" });
    const other = await client.store(`${base}/b.png`, "image", { client: "c-mallory" });
    expect(first).toMatchObject({ ok: true, cache: "miss" });
    // freshMs is each label's own download's freshness, counted to its answer (whole seconds within the origin's max-age).
    const freshMs = (r: typeof first): number => (r.ok ? r.result.freshMs! : -1);
    for (const r of [first, other]) expect(freshMs(r) % 1000 === 0 && freshMs(r) > 0 && freshMs(r) <= 60_000).toBe(true);
    const without = (r: typeof first) => (r.ok ? { ...r, result: { ...r.result, freshMs: 0 } } : r);
    expect(without(other)).toEqual(without(first));
    expect(svc.store().dedups).toBe(dedups + 1);
    expect([hits["/a.png"], hits["/b.png"]]).toEqual([1, 1]);
  });
});
