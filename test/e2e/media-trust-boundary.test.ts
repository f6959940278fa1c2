/**
 * The media trust boundary end to end on the local fleet: media crosses the network from the client's URL exactly
 * once, into the regional media store, and workers (locked down: store URLs and data: only) use
 * exactly the bytes the edge verified.
 *
 * The development allowlist is off for every address in the corpus. One origin is allowlisted by
 * exact host:port (edge and store): it stands in for a public web server and serves the redirects
 * and the changing media; no corpus address shares its port. Names that resolve to loopback come
 * from the store's static host map (`--host-map`, checked like DNS answers).
 *
 * - SSRF corpus: ≥ 40 loopback / private / metadata spellings (decimal, octal, hex, IPv4-mapped
 *   IPv6, trailing dots, names resolving to loopback, redirects to all of these), each as
 *   image_url and video_url, with and without uuid: every request is refused with a 4xx in the
 *   OpenAI error shape, and a listener on the trap port (all local addresses) sees 0 connections.
 * - An origin serving different bytes on every request: the worker processed exactly the bytes the
 *   edge hashed (the store fetched once), images and videos, on the exact path and the text-prefix
 *   fallback paths.
 * - Two URLs with the same bytes share blocks.
 */
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makePng } from "../helpers/png.ts";
import { chat, image, makeMediaDir, makeVideo, text, userWith, video } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

let fleet: Fleet;
let trap: http.Server;
let trapPort = 0;
let trapConnections = 0;
let origin: http.Server;
let originPort = 0;
let baseVideo: Uint8Array;
/** Every body the origin served, by path, in order (digest of each response). */
const served: Record<string, string[]> = {};

/** An MP4 with a trailing top-level `free` box: other bytes, the same video for every decoder. */
function withFreeBox(mp4: Uint8Array, payload: string): Uint8Array {
  const p = Buffer.from(payload);
  const box = Buffer.alloc(8 + p.length);
  box.writeUInt32BE(box.length, 0);
  box.write("free", 4, "latin1");
  p.copy(box, 8);
  return new Uint8Array(Buffer.concat([mp4, box]));
}

beforeAll(async () => {
  // The trap: one dual-stack listener on every local address of one port.
  trap = http.createServer((_q, s) => s.end("trap"));
  trap.on("connection", () => trapConnections++);
  await new Promise<void>((r) => trap.listen(0, "::", r));
  trapPort = (trap.address() as AddressInfo).port;

  const dir = makeMediaDir();
  makeVideo(dir, "base.mp4", { frames: 20, size: "160x120" });
  baseVideo = new Uint8Array(readFileSync(join(dir, "base.mp4")));
  const same = makePng(96, 64, { seed: 7 });
  let n = 0;
  origin = http.createServer((req, res) => {
    const url = new URL(req.url!, "http://origin");
    const p = url.pathname;
    const send = (b: Uint8Array, type: string): void => {
      (served[p] ??= []).push(sha(b));
      res.writeHead(200, { "content-type": type, "content-length": b.length, "cache-control": "no-store" });
      res.end(b);
    };
    if (p === "/redirect") {
      res.writeHead(302, { location: url.searchParams.get("to")! });
      res.end();
    } else if (p.startsWith("/changing") && p.endsWith(".png")) send(makePng(96, 64, { seed: 7, text: `version ${++n}` }), "image/png");
    else if (p.startsWith("/changing") && p.endsWith(".mp4")) send(withFreeBox(baseVideo, `version ${++n}`), "video/mp4");
    else if (p === "/same-a.png" || p === "/same-b.png") send(same, "image/png");
    else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => origin.listen(0, "127.0.0.1", r));
  originPort = (origin.address() as AddressInfo).port;
  const originHost = `127.0.0.1:${originPort}`;
  fleet = await startFleet({
    workers: 2,
    decode: true,
    decodeArgs: [
      "--allow", originHost,
      "--host-map", "trap.kvedge.test=127.0.0.1",
      "--host-map", "trap6.kvedge.test=::1",
      // A rebinding answer: one public and one loopback address.
      "--host-map", "mixed.kvedge.test=93.184.216.34", "--host-map", "mixed.kvedge.test=127.0.0.1",
    ],
    vars: { KVEDGE_MEDIA: JSON.stringify({ allowlist: [originHost] }) },
    log: logs,
  });
}, 180_000);

afterAll(async () => {
  await fleet?.stop();
  for (const s of [trap, origin]) {
    s?.closeAllConnections();
    await new Promise((r) => s?.close(r));
  }
});

function corpus(): string[] {
  const P = trapPort;
  const hosts = [
    "127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.1", "0x7f.0x0.0x0.0x1", "0177.0.0.1", "0177.1",
    "017700000001", "127.000.000.001", "127.0.0.1.", "127.0.0.1..", "127.0.0.1...", "2130706433..", "127.2.3.4",
    "[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
    "[2002:7f00:1::1]", "[::ffff:0:7f00:1]", "localhost", "localhost.", "LOCALHOST..", "media.localhost", "0.0.0.0", "0", "[::]",
    "10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "169.254.169.254", "0xa9fea9fe", "2852039166",
    "[::ffff:169.254.169.254]", "[fd00:ec2::254]", "metadata.google.internal", "168.63.129.16",
    "trap.kvedge.test", "trap.kvedge.test.", "trap6.kvedge.test", "mixed.kvedge.test",
  ];
  const direct = hosts.map((h) => `http://${h}:${P}/x`);
  const via = (to: string) => `http://127.0.0.1:${originPort}/redirect?to=${encodeURIComponent(to)}`;
  const redirects = [
    `http://127.0.0.1:${P}/x`, `http://[::1]:${P}/x`, `http://0x7f.1:${P}/x`, `http://127.0.0.1..:${P}/x`,
    `http://trap.kvedge.test:${P}/x`, "http://169.254.169.254/latest/meta-data/", `http://[::ffff:127.0.0.1]:${P}/x`,
    via(`http://127.0.0.1:${P}/x`), // a redirect chain ending on loopback
  ].map(via);
  return [...direct, ...redirects];
}

describe("media trust boundary", () => {
  it("refuses every loopback/private/metadata spelling, as image and video, with and without uuid; the trap sees 0 connections", async () => {
    const urls = corpus();
    expect(urls.length).toBeGreaterThanOrEqual(40);
    const before = await Promise.all(fleet.workers.map(async (w) => ((await (await fetch(`${w.url}/debug/requests`)).json()) as { requests: unknown[] }).requests.length));
    let n = 0;
    const codes: Record<string, number> = {};
    for (const url of urls)
      for (const kind of ["image", "video"] as const)
        for (const uuid of [false, true]) {
          const part = { ...(kind === "image" ? image(url) : video(url)), ...(uuid ? { uuid: `client-${n}` } : {}) };
          const r = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("what is this?"), part]) });
          const where = `${kind}${uuid ? "+uuid" : ""} ${url} → ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
          expect(r.status >= 400 && r.status < 500, where).toBe(true);
          const err = (r.body as { error?: Record<string, unknown> }).error ?? {};
          expect(Object.keys(err).sort(), where).toEqual(["code", "message", "param", "type"]);
          codes[String(err.code)] = (codes[String(err.code)] ?? 0) + 1;
          n++;
        }
    await new Promise((r) => setTimeout(r, 200));
    expect(trapConnections).toBe(0);
    // Control: the trap does count a connection to it.
    await (await fetch(`http://127.0.0.1:${trapPort}/`)).text();
    expect(trapConnections).toBe(1);
    trapConnections = 0;
    // Nothing reached a worker.
    const after = await Promise.all(fleet.workers.map(async (w) => ((await (await fetch(`${w.url}/debug/requests`)).json()) as { requests: unknown[] }).requests.length));
    expect(after).toEqual(before);
    console.log(`e2e SSRF corpus: ${urls.length} URLs × image/video × uuid = ${n} requests refused, trap connections ${trapConnections}, codes ${JSON.stringify(codes)}`);
  });

  it("an origin serving other bytes on every request: the worker processes exactly the bytes the edge hashed, on every path", async () => {
    const cases: { name: string; part: (u: string) => Record<string, unknown>; ext: string; extra?: Record<string, unknown>; routing: string }[] = [
      { name: "image, exact", part: image, ext: "png", routing: "exact" },
      { name: "video, exact", part: video, ext: "mp4", routing: "exact" },
      { name: "image, uuid (text-prefix)", part: (u) => ({ ...image(u), uuid: "client-image" }), ext: "png", routing: "text_prefix" },
      { name: "video, uuid (text-prefix)", part: (u) => ({ ...video(u), uuid: "client-video" }), ext: "mp4", routing: "text_prefix" },
      { name: "image, mm_processor_kwargs (text-prefix)", part: image, ext: "png", extra: { mm_processor_kwargs: { max_pixels: 100_000 } }, routing: "text_prefix" },
    ];
    for (const [i, c] of cases.entries()) {
      const path = `/changing-${i}.${c.ext}`;
      const r = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text(`Describe ${c.name}.`), c.part(`http://127.0.0.1:${originPort}${path}`)]), ...c.extra });
      expect(r.status, `${c.name}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.routing, c.name).toBe(c.routing);
      // The client's URL was fetched once (by the store), never by a worker.
      expect(served[path], c.name).toHaveLength(1);
      const w = fleet.workers.find((x) => x.id === r.worker)!;
      const m = ((await (await fetch(`${w.url}/debug/media`)).json()) as { media: { digest: string; via: string; kind: string }[] }).media;
      const last = m[m.length - 1]!;
      expect(last, c.name).toMatchObject({ digest: served[path]![0], via: "store", kind: c.ext === "png" ? "image" : "video" });
      // A second request gets other bytes from the origin, and the worker those other bytes.
      const again = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text(`Describe ${c.name}.`), c.part(`http://127.0.0.1:${originPort}${path}`)]), ...c.extra });
      expect(again.status).toBe(200);
      expect(served[path]).toHaveLength(2);
      expect(served[path]![1]).not.toBe(served[path]![0]);
      const m2 = ((await (await fetch(`${fleet.workers.find((x) => x.id === again.worker)!.url}/debug/media`)).json()) as { media: { digest: string }[] }).media;
      expect(m2[m2.length - 1]!.digest, c.name).toBe(served[path]![1]);
    }
  });

  it("client data: URLs reach the worker as the bytes the edge hashed", async () => {
    const png = makePng(80, 40, { seed: 11 });
    const r = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("inline"), image(`data:image/png;base64,${Buffer.from(png).toString("base64")}`)]) });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.routing).toBe("exact");
    const m = ((await (await fetch(`${fleet.workers.find((x) => x.id === r.worker)!.url}/debug/media`)).json()) as { media: { digest: string; via: string }[] }).media;
    expect(m[m.length - 1]).toMatchObject({ digest: sha(png), via: "data" });
  });

  it("two URLs with the same bytes share blocks", async () => {
    const body = (p: string) => ({ model: fleet.model, ...userWith([text("Look at this image carefully, please, and describe it."), image(`http://127.0.0.1:${originPort}${p}`)]) });
    const a = await chat(fleet.edgeUrl, body("/same-a.png"));
    const b = await chat(fleet.edgeUrl, body("/same-b.png"));
    expect(a.status).toBe(200);
    expect(b.routing).toBe("exact");
    expect(b.worker).toBe(a.worker);
    expect(b.overlapBlocks / b.totalBlocks).toBeGreaterThanOrEqual(0.95);
    expect(b.cachedTokens).toBeGreaterThanOrEqual(16);
  });

  it("a worker refuses client URLs itself (locked down), even when handed one directly", async () => {
    const w = fleet.workers[0]!;
    const r = await fetch(`${w.url}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${w.apiKey}` },
      body: JSON.stringify({ text: "<|vision_start|><|image_pad|><|vision_end|>hi", image_data: [`http://127.0.0.1:${trapPort}/x.png`], sampling_params: { max_new_tokens: 1 } }),
    });
    expect(r.status).toBe(400);
    expect(await r.text()).toMatch(/only from its media store/);
    expect(trapConnections).toBe(0);
  });
});
