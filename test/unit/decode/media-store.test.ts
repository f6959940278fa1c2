/**
 * The regional media store over real HTTP on 127.0.0.1: content addressing (SHA-256 of exactly
 * the bytes fetched), dedup of the same bytes under two URLs, signed short-lived worker URLs
 * (tampered, expired, over-long, unsigned, other digest: all refused with one answer), the LRU
 * by bytes and the per-item cap, and the decode service's download bounds: at most
 * `maxDownloads` downloads at once, a bounded queue answering 503, cancellation when callers go,
 * each client's share of the slots (fair-slots.ts), idle and request timeouts.
 */
import { createHash } from "node:crypto";
import { mkdtempSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { importMediaUrlKey, signMediaPath, workerMediaCredential } from "../../../src/media/signed-url.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { makePng } from "../../helpers/png.ts";

const TOKEN = "store-test-token-0123456789abcde";
const KEY = "k".repeat(40);
const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

const imgA = makePng(64, 48, { seed: 1 });
const imgB = makePng(32, 16, { seed: 2 });
const big = makePng(16, 16, { padBytes: 300_000 });
let media: http.Server;
let port = 0;
const hits: Record<string, number> = {};
/** Open requests to /hold/*, the most ever open at once, and how many ended early (client gone). */
const hold = { open: 0, peak: 0, closedEarly: 0, release: [] as (() => void)[] };
let svc: DecodeService;

function listen(s: http.Server): Promise<number> {
  return new Promise((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));
}

beforeAll(async () => {
  media = http.createServer((req, res) => {
    const p = new URL(req.url!, "http://x").pathname;
    hits[p] = (hits[p] ?? 0) + 1;
    const send = (b: Uint8Array): void => {
      res.writeHead(200, { "content-type": "image/png", "content-length": b.length });
      res.end(b);
    };
    if (p === "/a.png" || p === "/copy-of-a.png") send(imgA);
    else if (p === "/b.png") send(imgB);
    else if (p === "/big.png") send(big);
    else if (p.startsWith("/hold/")) {
      hold.open++;
      hold.peak = Math.max(hold.peak, hold.open);
      let done = false;
      res.on("close", () => {
        hold.open--;
        if (!done) hold.closedEarly++;
      });
      hold.release.push(() => {
        done = true;
        send(imgB);
      });
    } else if (p === "/stall.png") {
      res.writeHead(200, { "content-type": "image/png" });
      res.write(imgA.subarray(0, 100)); // then nothing
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  port = await listen(media);
  svc = await startDecodeService({
    token: TOKEN,
    concurrency: 1,
    maxDownloads: 2,
    maxDownloadQueue: 2,
    idleTimeoutMs: 400,
    fetch: { allowlist: [`127.0.0.1:${port}`], maxBytes: 200_000 },
    store: { urlKey: KEY, maxTotalBytes: imgA.length + imgB.length + 10 },
  });
}, 60_000);

afterAll(async () => {
  for (const r of hold.release.splice(0)) r();
  await svc?.close();
  media.closeAllConnections();
  await new Promise((r) => media.close(r));
});

const client = () => new DecodeClient({ url: svc.url, token: TOKEN });
/** The store's statistics are for the edge's token only. */
const admin = { headers: { authorization: `Bearer ${TOKEN}` } };
const u = (p: string) => `http://127.0.0.1:${port}${p}`;
/** A fetch as worker `id` (its media credential as Basic auth, as python-requests sends a .netrc entry). */
async function asWorker(id: string, key?: CryptoKey): Promise<RequestInit> {
  const cred = await workerMediaCredential(key ?? (await importMediaUrlKey(KEY)), id);
  return { headers: { authorization: `Basic ${btoa(`${id}:${cred}`)}` } };
}

describe("media store", () => {
  it("stores a URL's bytes under their SHA-256 and serves exactly them under a signed URL", async () => {
    const out = await client().store(u("/a.png"), "image");
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    expect(out.result).toMatchObject({ digest: sha(imgA), byteLength: imgA.length, kind: "image", image: { width: 64, height: 48, format: "png" } });
    const key = await importMediaUrlKey(KEY);
    const path = await signMediaPath(key, out.result.digest, Math.floor(Date.now() / 1000) + 60, "gpu-1");
    const r = await fetch(svc.url + path, await asWorker("gpu-1")); // no bearer token: workers hold none
    expect(r.status).toBe(200);
    expect(sha(new Uint8Array(await r.arrayBuffer()))).toBe(sha(imgA));
  });

  it("leases the item it stores, as a held call does: leaseMs, 0 past a lease bound", async () => {
    // This store's lease bounds (a quarter of its ~11 kB, an owner's share of that) leave no room for either image.
    const refused = await client().store(u("/b.png"), "image");
    expect(refused.ok && refused.result.leaseMs).toBe(0);
    const roomy = await startDecodeService({ token: TOKEN, fetch: { allowlist: [`127.0.0.1:${port}`] }, store: { urlKey: KEY, dir: mkdtempSync(join(tmpdir(), "kvedge-store-lease-")), leaseSec: 120 } });
    try {
      const c = new DecodeClient({ url: roomy.url, token: TOKEN });
      const out = await c.store(u("/a.png"), "image");
      expect(out.ok && out.result.leaseMs).toBe(120_000);
      expect(roomy.store()).toMatchObject({ items: 1, leased: 1, leasedBytes: imgA.length });
      // Storing it again renews the one lease.
      const again = await c.store(u("/copy-of-a.png"), "image");
      expect(again.ok && again.result.leaseMs).toBe(120_000);
      expect(roomy.store()).toMatchObject({ items: 1, leased: 1 });
    } finally {
      await roomy.close();
    }
  });

  it("the same bytes under two URLs are stored once", async () => {
    const before = svc.store();
    const out = await client().store(u("/copy-of-a.png"), "image");
    expect(out.ok && out.result.digest).toBe(sha(imgA));
    expect(svc.store().items).toBe(before.items);
    expect(svc.store().dedups).toBe(before.dedups + 1);
  });

  it("refuses every URL that is not signed for this digest, time and worker, with one answer", async () => {
    const key = await importMediaUrlKey(KEY);
    const other = await importMediaUrlKey("o".repeat(40));
    const now = Math.floor(Date.now() / 1000);
    const d = sha(imgA);
    const good = await signMediaPath(key, d, now + 60, "w:1");
    const w1 = await asWorker("w:1");
    expect((await fetch(svc.url + good, w1)).status).toBe(200);
    const bad: [string, RequestInit][] = [
      [`/v1/media/${d}`, w1],
      [good.replace(/sig=(.)/, (_m, c: string) => `sig=${c === "0" ? "1" : "0"}`), w1],
      [await signMediaPath(other, d, now + 60, "w:1"), w1],
      [await signMediaPath(key, d, now - 1, "w:1"), w1], // expired
      [await signMediaPath(key, d, now + 24 * 3600, "w:1"), w1], // longer than the store allows
      [good.replace(d, sha(imgB)), w1], // signature of another digest
      [good.replace(/exp=\d+/, `exp=${now + 61}`), w1],
      [good.replace("w=w:1", "w=w:2"), await asWorker("w:2")], // the URL re-addressed to another worker
      [good, {}], // the URL alone: no worker's credential
      [good, await asWorker("w:2")], // another worker's credential
      [good, await asWorker("w:1", other)], // a credential not derived from the store's key
      [good, { headers: { authorization: `Basic ${btoa("w:1:" + "0".repeat(64))}` } }],
      [good, { headers: { authorization: `Bearer ${TOKEN}` } }], // the edge's token is not a worker's
    ];
    for (const [p, init] of bad) {
      const r = await fetch(svc.url + p, init);
      expect(r.status, `${p} ${JSON.stringify(init)}`).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("media_url_refused");
    }
    expect((await fetch(svc.url + good, { method: "POST", ...w1 })).status).toBe(405);
  });

  it("evicts least recently used items by bytes; a per-item cap refuses big media", async () => {
    const key = await importMediaUrlKey(KEY);
    const okB = await client().store(u("/b.png"), "image");
    expect(okB.ok).toBe(true);
    // a + b fill the store; a third item evicts the least recently used (a was used last by the dedup above, b now)
    const third = makePng(8, 8, { seed: 3 });
    expect(svc.store().bytes).toBeLessThanOrEqual(imgA.length + imgB.length + 10);
    const tooBig = await client().store(u("/big.png"), "image");
    expect(tooBig).toMatchObject({ ok: false, status: 413 });
    expect(third.length).toBeGreaterThan(0);
    const stats = svc.store();
    expect(stats.bytes).toBeLessThanOrEqual(stats.maxBytes);
    const path = await signMediaPath(key, sha(imgB), Math.floor(Date.now() / 1000) + 60, "gpu-1");
    expect((await fetch(svc.url + path, await asWorker("gpu-1"))).status).toBe(200);
  });
});

describe("decode service download bounds", () => {
  it("holds at most its download bound, queues a bounded number, refuses the rest with 503, and cancels work whose callers left", async () => {
    hold.peak = 0;
    hold.closedEarly = 0;
    const ctrls = Array.from({ length: 6 }, () => new AbortController());
    const calls = ctrls.map((c, i) =>
      fetch(`${svc.url}/v1/store`, {
        method: "POST",
        // Six clients: the bounds across clients (one client's share is the next test).
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": `c-${i}` },
        body: JSON.stringify({ url: u(`/hold/${i}.png`), kind: "image" }),
        signal: c.signal,
      }).then(
        (r) => r.status,
        () => "aborted" as const,
      ),
    );
    // 2 run, 2 wait, 2 are refused at once.
    await waitFor(() => hold.open === 2);
    const h = (await (await fetch(`${svc.url}/healthz`, admin)).json()) as { downloads: { inUse: number; waiting: number; limit: number } };
    expect(h.downloads).toMatchObject({ limit: 2, inUse: 2 });
    const refused = (await Promise.race([Promise.all([calls[4], calls[5]]), sleep(2000).then(() => null)])) ?? [];
    expect(refused.filter((s) => s === 503).length + h.downloads.waiting).toBeGreaterThanOrEqual(2);
    // Every caller leaves: running downloads are cancelled (the origin sees its connections closed)
    // and queued ones never start.
    for (const c of ctrls) c.abort();
    await Promise.all(calls);
    await waitFor(() => hold.open === 0);
    await sleep(300);
    expect(hold.peak).toBe(2);
    expect(hold.closedEarly).toBe(2);
    expect(svc.stats.downloadsPeak).toBeLessThanOrEqual(2);
    const after = (await (await fetch(`${svc.url}/healthz`, admin)).json()) as { downloads: { inUse: number; waiting: number } };
    expect(after.downloads).toMatchObject({ inUse: 0, waiting: 0 });
    hold.release.splice(0);
  });

  it("one client holds at most its share of the downloads and of the queue: another client's download starts at once", async () => {
    hold.peak = 0;
    hold.closedEarly = 0;
    const store = (client: string, path: string, signal?: AbortSignal) =>
      fetch(`${svc.url}/v1/store`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": client },
        body: JSON.stringify({ url: u(path), kind: "image" }),
        ...(signal ? { signal } : {}),
      }).then(
        async (r) => ({ status: r.status, body: (await r.json()) as { error?: { code?: string }; digest?: string } }),
        () => ({ status: 0, body: {} as { error?: { code?: string } } }),
      );
    // maxDownloads 2, queue 2, share 0.5: one client runs one download and queues one. The first
    // two go through the edge's client, which labels them (x-kvedge-client).
    const ctrl = new AbortController();
    const hogCalls = [0, 1].map((i) => client().store(u(`/hold/hog-${i}.png`), "image", { client: "c-hog", signal: ctrl.signal }));
    await waitFor(() => hold.open === 1);
    // Both of its calls in: one running, one waiting in its line.
    for (let i = 0; i < 200; i++) {
      const q = (await (await fetch(`${svc.url}/healthz`, admin)).json()) as { downloads: { waiting: number } };
      if (q.downloads.waiting === 1) break;
      await sleep(10);
    }
    const refused = await Promise.all([2, 3].map((i) => store("c-hog", `/hold/hog-${i}.png`)));
    expect(refused.map((r) => r.status)).toEqual([503, 503]);
    expect(refused[0]!.body.error?.code).toBe("no_worker_available");
    // Another client is not behind the first: its download starts while the hog's wait.
    const other = store("c-other", "/hold/other.png");
    await waitFor(() => hold.open === 2);
    const h = (await (await fetch(`${svc.url}/healthz`, admin)).json()) as { perClient: { downloads: number }; downloads: { inUse: number; waiting: number; clients: number } };
    expect(h.perClient.downloads).toBe(1);
    expect(h.downloads).toMatchObject({ inUse: 2, waiting: 1, clients: 2 });
    // A bad label is refused before any work.
    const bad = await fetch(`${svc.url}/v1/store`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": "a b" }, body: JSON.stringify({ url: u("/a.png"), kind: "image" }) });
    expect(bad.status).toBe(400);
    await bad.arrayBuffer();
    // The second client's download completes; the hog leaves.
    hold.release[hold.release.length - 1]!();
    expect((await other).status).toBe(200);
    ctrl.abort();
    expect((await Promise.all(hogCalls)).map((o) => (o.ok ? "ok" : o.reason))).toEqual(["decode_cancelled", "decode_cancelled"]);
    await waitFor(() => hold.open === 0);
    expect(hold.peak).toBe(2);
    hold.release.splice(0);
  });

  it("a URL another client has queued is downloaded for the second client in its own share, not behind the first client's queue", async () => {
    hold.peak = 0;
    const call = (client: string, path: string, signal: AbortSignal) => new DecodeClient({ url: svc.url, token: TOKEN }).store(u(path), "image", { client, signal });
    const ctrl = new AbortController();
    // The hog runs its one download (its share of 2) and queues the shared URL behind it.
    const hogHeld = call("c-hog", "/hold/hog-held.png", ctrl.signal);
    await waitFor(() => hold.open === 1);
    const hogShared = call("c-hog", "/hold/shared.png", ctrl.signal);
    await sleep(100);
    expect(hold.open).toBe(1);
    // Flights are per client label (no timing tells one client what another asked for), so the
    // other client's call of the same URL is its own download: it starts at once, in its own
    // share, while the hog's stays queued.
    const other = call("c-other", "/hold/shared.png", ctrl.signal);
    await waitFor(() => hold.open === 2);
    const h = (await (await fetch(`${svc.url}/healthz`, admin)).json()) as { downloads: { inUse: number; waiting: number } };
    expect(h.downloads).toMatchObject({ inUse: 2, waiting: 1 });
    ctrl.abort();
    await Promise.all([hogHeld, hogShared, other]);
    await waitFor(() => hold.open === 0);
    hold.release.splice(0);
  });

  it("a stalled download is cut at the idle timeout", async () => {
    const t = Date.now();
    const out = await client().store(u("/stall.png"), "image");
    expect(out).toMatchObject({ ok: false, status: 400, code: "media_timeout" });
    expect(Date.now() - t).toBeLessThan(5_000);
  });

  it("the wasm decoder's memory cap: media above wasmMaxMediaBytes are not probed by it, refused and not stored", async () => {
    const s = await startDecodeService({ token: TOKEN, decoder: "wasm", concurrency: 1, wasmMaxMediaBytes: 1000, fetch: { allowlist: [`127.0.0.1:${port}`] }, store: { urlKey: KEY } });
    try {
      const out = await new DecodeClient({ url: s.url, token: TOKEN }).store(u("/b.png"), "video");
      expect(out).toMatchObject({ ok: false, status: 400, code: "media_unprobeable_media" });
      if (out.ok) return;
      expect(out.detail).toMatch(/memory cap/);
      expect(s.stats.probes).toBe(0);
      expect(s.store().items).toBe(0);
    } finally {
      await s.close();
    }
  });

  it("the whole request is cut at the request deadline (504)", async () => {
    const s = await startDecodeService({ token: TOKEN, concurrency: 1, requestTimeoutMs: 300, idleTimeoutMs: 10_000, fetch: { allowlist: [`127.0.0.1:${port}`] }, store: { urlKey: KEY } });
    try {
      const out = await new DecodeClient({ url: s.url, token: TOKEN }).store(u("/stall.png"), "image");
      expect(out).toMatchObject({ ok: false, reason: "decode_timeout", status: 504 });
    } finally {
      await s.close();
    }
  });
});

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
async function waitFor(cond: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not reached");
    await sleep(20);
  }
}
