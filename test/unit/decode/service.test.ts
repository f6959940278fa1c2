/**
 * The decode service over real HTTP on 127.0.0.1: auth, caps, probe by bytes and by URL, caches
 * (content hash; URL + ETag revalidation; reuse within the origin's Cache-Control freshness),
 * single-flight, SSRF refusals, and the edge's client
 * turning every failure into a fallback reason.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { MAX_URL_FRESH_SEC } from "../../../src/media/store-result.ts";
import { createHash } from "node:crypto";
import { initHashing } from "../../../src/util/hash.ts";
import { nativeAvailable } from "../../../services/decode/probers.ts";

const sha256Hex = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { sampleBombMp4 } from "../../helpers/sample-bomb.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

const TOKEN = "decode-test-token-0123456789abcd";
// The service as it starts here: native ffprobe when installed, else the embedded wasm build.
const DECODER = (await nativeAvailable()) ? "native" : "wasm";
let clipA: Uint8Array = new Uint8Array(0); // 45 frames @ 30000/1001
let clipB: Uint8Array = new Uint8Array(0); // 20 frames @ 25
let media: http.Server;
let mediaPort = 0;
const hits: Record<string, number> = {};
const conditionalSeen: string[] = [];
let changingVersion = 1;
let svc: DecodeService;

function listen(s: http.Server): Promise<number> {
  return new Promise((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));
}

beforeAll(async () => {
  await initHashing();
  const dir = mkdtempSync(path.join(tmpdir(), "kvedge-svc-"));
  const gen = async (name: string, rate: string, frames: number): Promise<Uint8Array> =>
    new Uint8Array(await ffmpegToFile(["-f", "lavfi", "-i", `testsrc=size=96x64:rate=${rate}`, "-frames:v", String(frames), "-c:v", "libx264", "-preset", "veryfast"], path.join(dir, name)));
  clipA = await gen("a.mp4", "30000/1001", 45);
  clipB = await gen("b.mp4", "25", 20);
  rmSync(dir, { recursive: true, force: true });

  media = http.createServer((req, res) => {
    const p = new URL(req.url!, "http://x").pathname;
    hits[p] = (hits[p] ?? 0) + 1;
    if (req.headers["if-none-match"]) conditionalSeen.push(`${p} ${req.headers["if-none-match"]}`);
    const serve = (body: Uint8Array, etag: string | null, delayMs = 0, extra: Record<string, string> = {}, extra304 = extra): void => {
      if (etag && req.headers["if-none-match"] === etag) {
        res.writeHead(304, { etag, ...extra304 });
        res.end();
        return;
      }
      setTimeout(() => {
        res.writeHead(200, { "content-type": "video/mp4", ...(etag ? { etag } : {}), ...extra });
        res.end(body);
      }, delayMs);
    };
    if (p === "/a.mp4" || p === "/same-as-a.mp4") serve(clipA, '"a1"');
    else if (p === "/changing.mp4") serve(changingVersion === 1 ? clipA : clipB, `"v${changingVersion}"`);
    else if (p === "/slow.mp4") serve(clipB, null, 300);
    else if (p === "/fresh.mp4") serve(clipB, '"f1"', 0, { "cache-control": "max-age=60" });
    else if (p === "/fresh-year.mp4") serve(clipB, null, 0, { "cache-control": "max-age=31536000" });
    else if (p === "/fresh-no-validators.mp4") serve(clipB, null, 0, { "cache-control": "public, max-age=60" });
    else if (p === "/no-cache.mp4") serve(clipB, '"n1"', 0, { "cache-control": "no-cache, max-age=60" });
    // Fresh for one second; the 304 that revalidates it grants a minute.
    else if (p === "/short.mp4") serve(clipB, '"s1"', 0, { "cache-control": "max-age=1" }, { "cache-control": "max-age=60" });
    else if (p === "/slow-body.mp4") {
      // Fresh for three seconds from its headers; the body takes 2.5 of them to arrive.
      res.writeHead(200, { "content-type": "video/mp4", "content-length": clipB.length, "cache-control": "max-age=3" });
      res.write(clipB.subarray(0, 64));
      setTimeout(() => res.end(clipB.subarray(64)), 2_500);
    } else if (p === "/latest.mp4") {
      // A "latest" link: the redirect itself says nothing about freshness; its target does.
      res.writeHead(302, { location: "/fresh.mp4" });
      res.end();
    } else if (p === "/to-metadata") {
      res.writeHead(302, { location: "http://169.254.169.254/latest/meta-data/" });
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  mediaPort = await listen(media);
  svc = await startDecodeService({
    token: TOKEN,
    decoder: DECODER,
    concurrency: 2,
    maxBodyBytes: 200_000,
    fetch: { allowlist: [`127.0.0.1:${mediaPort}`] },
  });
}, 60_000);

afterAll(async () => {
  await svc?.close();
  media.closeAllConnections();
  await new Promise((r) => media.close(r));
});

async function post(body: BodyInit, type: string, token: string | null = TOKEN): Promise<Response> {
  const headers: Record<string, string> = { "content-type": type };
  if (token) headers.authorization = `Bearer ${token}`;
  return fetch(`${svc.url}/v1/probe`, { method: "POST", headers, body });
}
const probeUrl = (url: string): Promise<Response> => post(JSON.stringify({ url }), "application/json");

describe("decode service", () => {
  it("probes raw bytes: content hash + torchcodec metadata, then serves the cache", async () => {
    const r = await post(clipA, "application/octet-stream");
    expect(r.status).toBe(200);
    expect(r.headers.get("x-cache")).toBe("miss");
    const j = (await r.json()) as Record<string, unknown>;
    expect(j).toMatchObject({
      contentDigest: sha256Hex(clipA),
      byteLength: clipA.length,
      totalFrames: 45,
      width: 96,
      height: 64,
      codec: "h264",
      decoder: DECODER,
    });
    expect(j.avgFps).toBe(45 / ((45 * 1001) / 30000));
    const probes = svc.stats.probes;
    const again = await post(clipA, "application/octet-stream");
    expect(again.headers.get("x-cache")).toBe("hit");
    expect(await again.json()).toEqual(j);
    expect(svc.stats.probes).toBe(probes);
  });

  it.runIf(DECODER === "native")("a few KB of container declaring 86 M samples is refused at once under the memory cap, and the same bytes are not probed again", async () => {
    const bomb = sampleBombMp4(86_000_000);
    expect(bomb.length).toBeLessThan(5_000);
    const probes = svc.stats.probes;
    const r = await post(bomb, "application/octet-stream");
    // Uncapped, ffprobe built a 2 GB index over 5-60 s; at 512 MiB of data segment it gives up at once.
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/could not be probed/);
    const again = await post(bomb, "application/octet-stream");
    expect(again.status).toBe(400);
    await again.text();
    expect(svc.stats.probes).toBe(probes + 1);
    expect(svc.stats.failuresReused).toBeGreaterThanOrEqual(1);
  });

  it("requires the bearer token", async () => {
    expect((await post(clipA, "application/octet-stream", null)).status).toBe(401);
    const wrong = await post(clipA, "application/octet-stream", "not-the-token");
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
  });

  it("caps the body (413), declared or streamed", async () => {
    const big = new Uint8Array(300_000);
    expect((await post(big, "application/octet-stream")).status).toBe(413);
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 30; i++) c.enqueue(new Uint8Array(10_000));
        c.close();
      },
    });
    const r = await fetch(`${svc.url}/v1/probe`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream", authorization: `Bearer ${TOKEN}` },
      body: stream,
      duplex: "half",
    } as RequestInit);
    expect(r.status).toBe(413);
  });

  it("probes by URL; the same bytes under another URL hit the content-hash cache", async () => {
    const r = await probeUrl(`http://127.0.0.1:${mediaPort}/a.mp4`);
    expect(r.status).toBe(200);
    const j = (await r.json()) as { contentDigest: string };
    expect(j.contentDigest).toBe(sha256Hex(clipA));
    expect(r.headers.get("x-cache")).toBe("hit"); // bytes probed in the first test
    const other = await probeUrl(`http://127.0.0.1:${mediaPort}/same-as-a.mp4`);
    expect(((await other.json()) as { contentDigest: string }).contentDigest).toBe(j.contentDigest);
  });

  it("revalidates a known URL with its ETag instead of downloading it again", async () => {
    const url = `http://127.0.0.1:${mediaPort}/a.mp4`;
    const before = conditionalSeen.length;
    const r = await probeUrl(url);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-cache")).toBe("revalidated");
    expect(conditionalSeen.slice(before)).toEqual(['/a.mp4 "a1"']);
  });

  it("reuses a URL's bytes without asking the origin while its Cache-Control says they are fresh", async () => {
    const ask = async (p: string): Promise<string | null> => {
      const r = await probeUrl(`http://127.0.0.1:${mediaPort}${p}`);
      expect(r.status, p).toBe(200);
      expect(((await r.json()) as { contentDigest: string }).contentDigest).toBe(sha256Hex(clipB));
      return r.headers.get("x-cache");
    };
    for (const p of ["/fresh.mp4", "/fresh-no-validators.mp4", "/no-cache.mp4"]) {
      hits[p] = 0;
      await ask(p);
    }
    const fresh = svc.stats.fresh;
    expect([await ask("/fresh.mp4"), await ask("/fresh-no-validators.mp4"), await ask("/no-cache.mp4")]).toEqual(["fresh", "fresh", "revalidated"]);
    expect([hits["/fresh.mp4"], hits["/fresh-no-validators.mp4"], hits["/no-cache.mp4"]]).toEqual([1, 1, 2]);
    expect(svc.stats.fresh).toBe(fresh + 2);
  });

  it("a redirect's target being fresh does not make the redirecting URL fresh", async () => {
    const url = `http://127.0.0.1:${mediaPort}/latest.mp4`;
    hits["/latest.mp4"] = 0;
    await probeUrl(url);
    expect((await probeUrl(url)).headers.get("x-cache")).not.toBe("fresh");
    expect(hits["/latest.mp4"]).toBe(2);
  });

  it("POST /v1/store answers how long it would answer the URL from its copy (freshMs): none without freshness or after a redirect; each client label learns its own", async () => {
    const store = async (p: string, client = "client-a"): Promise<number | undefined> => {
      const r = await fetch(`${svc.url}/v1/store`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": client },
        body: JSON.stringify({ url: `http://127.0.0.1:${mediaPort}${p}`, kind: "video" }),
      });
      expect(r.status, p).toBe(200);
      return ((await r.json()) as { freshMs?: number }).freshMs;
    };
    const fresh = await store("/fresh.mp4");
    expect(fresh).toBeGreaterThan(0);
    expect(fresh).toBeLessThanOrEqual(60_000);
    // Answered from its copy, the same promise (less the time gone by).
    expect(await store("/fresh.mp4")).toBeLessThanOrEqual(fresh!);
    expect([await store("/a.mp4"), await store("/no-cache.mp4"), await store("/latest.mp4")]).toEqual([0, 0, 0]);
    // What one client's calls learnt is not another's: a first call of client-b fetched, and learnt its own freshness.
    const hits0 = hits["/fresh.mp4"] ?? 0;
    expect(await store("/fresh.mp4", "client-b")).toBeGreaterThan(0);
    expect(hits["/fresh.mp4"]).toBe(hits0 + 1);
  });

  it("counts freshMs from the response's arrival: a slow body uses up the origin's freshness (RFC 9111 §4.2.3)", async () => {
    const r = await fetch(`${svc.url}/v1/store`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": "client-slow" },
      body: JSON.stringify({ url: `http://127.0.0.1:${mediaPort}/slow-body.mp4`, kind: "video" }),
    });
    expect(r.status).toBe(200);
    // max-age=3 less the 2.5 s body: at most 0.5 s left, whole seconds rounded down (from the body's end: 2 s).
    expect(((await r.json()) as { freshMs?: number }).freshMs).toBeLessThanOrEqual(500);
  }, 10_000);

  it("asks the origin again once the freshness has run out, and takes a 304's new lifetime", async () => {
    const p = "/short.mp4";
    hits[p] = 0;
    await probeUrl(`http://127.0.0.1:${mediaPort}${p}`);
    expect((await probeUrl(`http://127.0.0.1:${mediaPort}${p}`)).headers.get("x-cache")).toBe("fresh");
    await new Promise((r) => setTimeout(r, 1_100));
    expect((await probeUrl(`http://127.0.0.1:${mediaPort}${p}`)).headers.get("x-cache")).toBe("revalidated");
    expect((await probeUrl(`http://127.0.0.1:${mediaPort}${p}`)).headers.get("x-cache")).toBe("fresh");
    expect(hits[p]).toBe(2);
  });

  it("with maxUrlFreshSec 0 every use is a conditional request", async () => {
    const strict = await startDecodeService({ token: TOKEN, decoder: DECODER, concurrency: 1, maxUrlFreshSec: 0, fetch: { allowlist: [`127.0.0.1:${mediaPort}`] } });
    try {
      const ask = async (): Promise<string | null> =>
        (
          await fetch(`${strict.url}/v1/probe`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
            body: JSON.stringify({ url: `http://127.0.0.1:${mediaPort}/fresh.mp4` }),
          })
        ).headers.get("x-cache");
      await ask();
      expect(await ask()).toBe("revalidated");
      expect(strict.stats.fresh).toBe(0);
    } finally {
      await strict.close();
    }
  });

  it("a URL whose content changes gets the new identity", async () => {
    const url = `http://127.0.0.1:${mediaPort}/changing.mp4`;
    changingVersion = 1;
    const one = (await (await probeUrl(url)).json()) as { contentDigest: string; totalFrames: number };
    changingVersion = 2;
    const two = (await (await probeUrl(url)).json()) as { contentDigest: string; totalFrames: number; avgFps: number };
    expect(one.contentDigest).toBe(sha256Hex(clipA));
    expect(two.contentDigest).toBe(sha256Hex(clipB));
    expect([one.totalFrames, two.totalFrames]).toEqual([45, 20]);
    expect(two.avgFps).toBe(25);
  });

  it("concurrent requests for one URL share one fetch and one probe", async () => {
    const url = `http://127.0.0.1:${mediaPort}/slow.mp4`;
    hits["/slow.mp4"] = 0;
    const rs = await Promise.all(Array.from({ length: 5 }, () => probeUrl(url)));
    const bodies = await Promise.all(rs.map((r) => r.json()));
    expect(hits["/slow.mp4"]).toBe(1);
    for (const b of bodies) expect(b).toEqual(bodies[0]);
    expect(rs.map((r) => r.headers.get("x-cache")).sort()).toEqual(["hit", "shared", "shared", "shared", "shared"]);
  });

  it("refuses private destinations and redirects to them (SSRF)", async () => {
    for (const url of ["http://127.0.0.1:1/x", "http://169.254.169.254/latest/meta-data/", `http://127.0.0.1:${mediaPort}/to-metadata`, "file:///etc/passwd"]) {
      const r = await probeUrl(url);
      expect(r.status, url).toBe(400);
      const code = ((await r.json()) as { error: { code: string } }).error.code;
      expect(["media_blocked_address", "media_bad_scheme"]).toContain(code);
    }
  });

  it("answers 400 for media it cannot probe, and for bad requests", async () => {
    const r = await post(new TextEncoder().encode("definitely not a video"), "application/octet-stream");
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("media_unprobeable_media");
    expect((await post("x", "text/plain")).status).toBe(400);
    expect((await post("{", "application/json")).status).toBe(400);
    expect((await post(JSON.stringify({ url: 1 }), "application/json")).status).toBe(400);
    const get = await fetch(`${svc.url}/v1/probe`);
    expect([get.status, get.headers.get("allow")]).toEqual([405, "POST"]);
    expect((await fetch(`${svc.url}/nope`)).status).toBe(404);
    const h = (await (await fetch(`${svc.url}/healthz`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { decoder: string; concurrency: number };
    expect(h).toMatchObject({ ok: true, decoder: DECODER, concurrency: 2 });
    // Without the edge's token: liveness only, nothing about load or what is stored.
    expect(await (await fetch(`${svc.url}/healthz`)).json()).toEqual({ ok: true, decoder: DECODER });
  });

  it("keeps at most cacheEntries probe results, the least recently used going first", async () => {
    const small = await startDecodeService({ token: TOKEN, decoder: DECODER, concurrency: 1, cacheEntries: 1 });
    try {
      const cacheOf = async (body: Uint8Array): Promise<string | null> =>
        (await fetch(`${small.url}/v1/probe`, { method: "POST", headers: { "content-type": "application/octet-stream", authorization: `Bearer ${TOKEN}` }, body })).headers.get("x-cache");
      expect(await cacheOf(clipA)).toBe("miss");
      expect(await cacheOf(clipA)).toBe("hit");
      expect(await cacheOf(clipB)).toBe("miss");
      expect(await cacheOf(clipA)).toBe("miss");
      expect(small.stats.probes).toBe(3);
    } finally {
      await small.close();
    }
  });

  it(`the wasm decoder gives the same answer as the service's (${DECODER})`, async () => {
    const w = await startDecodeService({ token: TOKEN, decoder: "wasm", concurrency: 1 });
    try {
      const r = await fetch(`${w.url}/v1/probe`, {
        method: "POST",
        headers: { "content-type": "application/octet-stream", authorization: `Bearer ${TOKEN}` },
        body: clipB,
      });
      const j = (await r.json()) as Record<string, unknown>;
      const n = (await (await post(clipB, "application/octet-stream")).json()) as Record<string, unknown>;
      expect(j.decoder).toBe("wasm");
      expect({ ...j, decoder: DECODER }).toEqual(n);
    } finally {
      await w.close();
    }
  });
});

describe("DecodeClient (edge side): failures become fallback reasons", () => {
  it("takes the answer of a store at its longest freshness (maxUrlFreshSec MAX_URL_FRESH_SEC, an origin's max-age of a year)", async () => {
    const longest = await startDecodeService({ token: TOKEN, decoder: DECODER, concurrency: 1, maxUrlFreshSec: MAX_URL_FRESH_SEC, fetch: { allowlist: [`127.0.0.1:${mediaPort}`] } });
    try {
      const out = await new DecodeClient({ url: longest.url, token: TOKEN }).store(`http://127.0.0.1:${mediaPort}/fresh-year.mp4`, "video");
      if (!out.ok) throw new Error(`${out.reason}: ${out.detail}`);
      expect(out.result.freshMs).toBeGreaterThanOrEqual((MAX_URL_FRESH_SEC - 60) * 1000);
    } finally {
      await longest.close();
    }
  });

  it("returns the probe on success, by bytes and by URL", async () => {
    const c = new DecodeClient({ url: svc.url, token: TOKEN });
    const a = await c.probe({ bytes: clipB });
    expect(a.ok && a.probe.totalFrames).toBe(20);
    const b = await c.probe({ url: `http://127.0.0.1:${mediaPort}/a.mp4` });
    expect(b.ok && b.probe.contentDigest).toBe(sha256Hex(clipA));
  });

  it("names every failure instead of throwing", async () => {
    expect(await new DecodeClient({}).probe({ bytes: clipB })).toMatchObject({ ok: false, reason: "decode_not_configured" });
    expect(await new DecodeClient({ url: svc.url, token: "wrong-token" }).probe({ bytes: clipB })).toMatchObject({ ok: false, reason: "decode_auth", status: 401 });
    expect(await new DecodeClient({ url: svc.url, token: TOKEN }).probe({ bytes: new Uint8Array(10) })).toMatchObject({
      ok: false,
      reason: "decode_media_rejected",
    });
    expect(await new DecodeClient({ url: svc.url, token: TOKEN }).probe({ url: "http://10.0.0.1/v.mp4" })).toMatchObject({
      ok: false,
      reason: "decode_media_rejected",
    });

    // A closed port: unreachable.
    const closed = http.createServer();
    const cp = await listen(closed);
    await new Promise((r) => closed.close(r));
    expect(await new DecodeClient({ url: `http://127.0.0.1:${cp}`, token: TOKEN }).probe({ bytes: clipB })).toMatchObject({
      ok: false,
      reason: "decode_unreachable",
    });

    // A service that accepts and never answers: timeout within the budget.
    const hang = http.createServer(() => {});
    const hp = await listen(hang);
    const t = await new DecodeClient({ url: `http://127.0.0.1:${hp}`, token: TOKEN, timeoutMs: 200 }).probe({ bytes: clipB });
    expect(t).toMatchObject({ ok: false, reason: "decode_timeout" });

    // A service answering 200 with the wrong shape.
    const junk = http.createServer((_q, s) => {
      s.writeHead(200, { "content-type": "application/json" });
      s.end(JSON.stringify({ totalFrames: "many" }));
    });
    const jp = await listen(junk);
    expect(await new DecodeClient({ url: `http://127.0.0.1:${jp}`, token: TOKEN }).probe({ bytes: clipB })).toMatchObject({
      ok: false,
      reason: "decode_bad_response",
    });
    for (const s of [hang, junk]) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });
});
