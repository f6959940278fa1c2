/**
 * The media store against one hostile party at a time, over real HTTP on 127.0.0.1:
 * an origin answering every status 0-999 (a raw TCP server writes the status line) cannot take the
 * service down; a client flooding junk, or valid media past its quota, cannot evict another
 * tenant's stored media; the service restarted under its supervisor re-indexes its files, so a
 * signed URL issued before the restart still resolves; a re-index keeps the caps.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { importMediaUrlKey, signMediaPath, workerMediaCredential } from "../../../src/media/signed-url.ts";
import { MediaStore } from "../../../services/decode/media-store.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { makePng } from "../../helpers/png.ts";

const TOKEN = "trust-test-token-0123456789abcde";
const KEY = "t".repeat(40);
const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");
const tenantImage = makePng(48, 32, { seed: 11 });
/** Valid images of about 60 kB each (the flooding client's). */
const floodImage = (i: number): Uint8Array => makePng(16, 16, { seed: 100 + i, padBytes: 60_000 });
const JUNK = new Uint8Array(150_000).fill(0x5a);

let origin: http.Server;
let originPort = 0;
/** The raw origin: answers each request with the status line `HTTP/1.1 <code> X` and a 3-byte body. */
let raw: net.Server;
let rawPort = 0;

function listen(s: net.Server): Promise<number> {
  return new Promise((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));
}

beforeAll(async () => {
  origin = http.createServer((req, res) => {
    const p = new URL(req.url!, "http://x").pathname;
    const m = /^\/flood\/(\d+)\.png$/.exec(p);
    const body = p === "/tenant.png" ? tenantImage : p.startsWith("/junk/") ? JUNK : m ? floodImage(Number(m[1])) : null;
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": "image/png", "content-length": body.length });
    res.end(body);
  });
  originPort = await listen(origin);
  raw = net.createServer((sock) => {
    sock.on("error", () => {});
    sock.once("data", (d) => {
      const code = /^GET \/status\/(\d+)/.exec(d.toString("latin1"))?.[1] ?? "500";
      sock.end(`HTTP/1.1 ${code.padStart(3, "0")} X\r\ncontent-length: 3\r\n\r\nabc`);
    });
  });
  rawPort = await listen(raw);
});

afterAll(async () => {
  origin.closeAllConnections();
  await new Promise((r) => origin.close(r));
  await new Promise((r) => raw.close(r));
});

const signed = async (svcUrl: string, digest: string): Promise<string> => svcUrl + (await signMediaPath(await importMediaUrlKey(KEY), digest, Math.floor(Date.now() / 1000) + 120, WORKER));
/** The worker the URLs are for, presenting its media credential as Basic auth. */
const WORKER = "gpu-1";
const asWorker = async (): Promise<RequestInit> => ({ headers: { authorization: `Basic ${btoa(`${WORKER}:${await workerMediaCredential(await importMediaUrlKey(KEY), WORKER)}`)}` } });
const storeAs = (svcUrl: string, client: string, url: string) => new DecodeClient({ url: svcUrl, token: TOKEN }).store(url, "image", { client });

describe("an origin cannot take the media store down", () => {
  let svc: DecodeService;
  beforeAll(async () => {
    svc = await startDecodeService({
      token: TOKEN,
      concurrency: 2,
      maxDownloads: 16,
      maxDownloadQueue: 64,
      clientShare: 1,
      fetch: { allowlist: [`127.0.0.1:${originPort}`, `127.0.0.1:${rawPort}`], timeoutMs: 3_000 },
      idleTimeoutMs: 1_000,
      store: { urlKey: KEY },
    });
  });
  afterAll(async () => svc?.close());

  it("every status 0-999 is a clean 4xx media error; other tenants' media stay served", async () => {
    const tenant = await storeAs(svc.url, "tenant", `http://127.0.0.1:${originPort}/tenant.png`);
    expect(tenant.ok).toBe(true);
    const url = await signed(svc.url, sha(tenantImage));
    const seen = new Map<number, number>();
    for (let from = 0; from < 1000; from += 25) {
      const codes = Array.from({ length: 25 }, (_, i) => from + i);
      const outs = await Promise.all(codes.map((c) => storeAs(svc.url, "hostile", `http://127.0.0.1:${rawPort}/status/${c}`)));
      for (const [i, out] of outs.entries()) {
        // 200-299 answer 3 junk bytes (not an image), the rest are refused statuses or unparseable answers: all the client's 400.
        expect(out, `status ${codes[i]}`).toMatchObject({ ok: false, status: 400 });
        if (!out.ok) seen.set(out.status!, (seen.get(out.status!) ?? 0) + 1);
      }
    }
    expect(seen).toEqual(new Map([[400, 1000]]));
    const r = await fetch(url, await asWorker());
    expect(r.status).toBe(200);
    expect(sha(new Uint8Array(await r.arrayBuffer()))).toBe(sha(tenantImage));
    expect((await storeAs(svc.url, "tenant", `http://127.0.0.1:${originPort}/flood/1.png`)).ok).toBe(true);
    // Nothing from the hostile origin was kept.
    expect(svc.store().items).toBe(2);
  }, 60_000);
});

describe("one client cannot evict another tenant's media", () => {
  it("a junk flood is not stored; a valid flood past the client's quota evicts only that client's items", async () => {
    const flood = floodImage(0).length;
    // Room for the tenant's image and about five flood images; one client may hold at most about two.
    const maxTotalBytes = tenantImage.length + 5 * flood;
    const svc = await startDecodeService({
      token: TOKEN,
      concurrency: 1,
      fetch: { allowlist: [`127.0.0.1:${originPort}`], maxBytes: 1 << 20 },
      store: { urlKey: KEY, maxTotalBytes, clientShare: (2.5 * flood) / maxTotalBytes },
    });
    try {
      expect((await storeAs(svc.url, "tenant", `http://127.0.0.1:${originPort}/tenant.png`)).ok).toBe(true);
      const url = await signed(svc.url, sha(tenantImage));
      // Junk: each would fill a sixth of the store; refused as not an image, and not kept.
      for (let i = 0; i < 8; i++) expect(await storeAs(svc.url, "flooder", `http://127.0.0.1:${originPort}/junk/${i}`)).toMatchObject({ ok: false, status: 400, code: "media_unknown_format" });
      expect(svc.store()).toMatchObject({ items: 1, bytes: tenantImage.length });
      // Valid images, twice what the whole store holds: the flooder's own oldest go.
      for (let i = 0; i < 10; i++) expect((await storeAs(svc.url, "flooder", `http://127.0.0.1:${originPort}/flood/${i}.png`)).ok).toBe(true);
      expect((await fetch(url, await asWorker())).status).toBe(200);
      const stats = svc.store();
      expect(stats.bytes).toBeLessThanOrEqual(tenantImage.length + 2.5 * flood);
      expect(stats.evictions).toBe(8);
      // Two more flooding clients overfill the store: its byte cap takes from the largest holders, not the tenant.
      for (let i = 10; i < 20; i++) expect((await storeAs(svc.url, i < 15 ? "flooder-2" : "flooder-3", `http://127.0.0.1:${originPort}/flood/${i}.png`)).ok).toBe(true);
      expect(svc.store().evictions).toBeGreaterThan(8 + 3 + 3);
      expect(svc.store().bytes).toBeLessThanOrEqual(maxTotalBytes);
      expect((await fetch(url, await asWorker())).status).toBe(200);
    } finally {
      await svc.close();
    }
  });
});

describe("restarts", () => {
  it("the supervisor restarts a killed service on its port; its files are re-indexed and a signed URL still resolves", async () => {
    const proc = spawn(process.execPath, [path.resolve("services/decode/main.ts"), "--allow", `127.0.0.1:${originPort}`, "--concurrency", "1"], {
      env: { ...process.env, KVEDGE_DECODE_TOKEN: TOKEN, KVEDGE_MEDIA_URL_KEY: KEY },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const pids: number[] = [];
    let serving = 0;
    createInterface({ input: proc.stderr! }).on("line", (l) => {
      const m = /started the service, pid (\d+)/.exec(l);
      if (m) pids.push(Number(m[1]));
      if (/serving again/.test(l)) serving++;
    });
    try {
      const ready = await firstLine(proc);
      const svcUrl = (JSON.parse(ready) as { url: string }).url;
      expect((await storeAs(svcUrl, "tenant", `http://127.0.0.1:${originPort}/tenant.png`)).ok).toBe(true);
      const url = await signed(svcUrl, sha(tenantImage));
      expect((await fetch(url, await asWorker())).status).toBe(200);
      process.kill(pids[0]!, "SIGKILL");
      await until(() => serving === 1, 30_000);
      expect(pids.length).toBe(2);
      const r = await fetch(url, await asWorker());
      expect(r.status).toBe(200);
      expect(sha(new Uint8Array(await r.arrayBuffer()))).toBe(sha(tenantImage));
      const h = (await (await fetch(`${svcUrl}/healthz`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { store: { restored: number } };
      expect(h.store.restored).toBe(1);
    } finally {
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
    }
    // The child went with its supervisor.
    expect(() => process.kill(pids.at(-1)!, 0)).toThrow();
  }, 90_000);

  it("a re-index keeps the byte, item and per-client caps, oldest items going first", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "kvedge-reindex-"));
    try {
      const put = (name: string, bytes: number, ageSec: number): string => {
        const f = path.join(dir, name);
        writeFileSync(f, new Uint8Array(bytes));
        const t = Date.now() / 1000 - ageSec;
        utimesSync(f, t, t);
        return name;
      };
      const d = (i: number): string => createHash("sha256").update(String(i)).digest("hex");
      put(d(1), 100, 50); // unlabelled, oldest
      put(`${d(2)}@a`, 100, 40);
      put(`${d(3)}@a`, 100, 30);
      put(`${d(4)}@a`, 100, 20); // a holds 300 > its 250
      put(`${d(5)}@b`, 100, 10);
      put(`${d(6)}@b`, 100, 5);
      put("not-a-digest", 100, 1); // ignored
      const store = await MediaStore.open(dir, { maxBytes: 400, maxItems: 4, clientMaxBytes: 250 });
      expect(store.stats).toMatchObject({ items: 4, bytes: 400, restored: 4 });
      // a over its quota loses its oldest (2); then the byte cap takes from the largest holder (a and b tie at 200: a, met first).
      expect(store.has(d(2))).toBe(false);
      expect(store.has(d(3))).toBe(false);
      expect(store.has(d(1))).toBe(true);
      expect(store.has(d(6))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function firstLine(proc: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", resolve);
    proc.once("exit", (c) => reject(new Error(`exited ${c}`)));
  });
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not reached");
    await new Promise((r) => setTimeout(r, 50));
  }
}
