/**
 * The origin side of the media store under generated misbehaviour: a raw TCP server
 * answers each fetch of the real decode service (its own process, unsupervised, so a crash is an
 * exit) with a generated status line (every code 0-999, other versions, garbage), headers
 * (missing, conflicting or negative lengths, chunked framing errors, 20 kB and 2,000 headers,
 * control characters, obs-fold, bare LF, gzip bombs under content-encoding, redirect loops),
 * bodies (images, junk, truncated, past the byte cap) and timings (stalls before and after the
 * headers, a byte at a time, resets at any point). Every answer must be a clean JSON status
 * (200, 400, 413, 503, 504), the process must stay up with no exception or rejection escaping a
 * handler, and its resident memory must stay bounded (figures printed). Seed: KVEDGE_FUZZ_SEED;
 * cases: KVEDGE_FUZZ_RUNS.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import net, { type AddressInfo } from "node:net";
import path from "node:path";
import { createInterface } from "node:readline";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makePng } from "../../helpers/png.ts";

const TOKEN = "fuzz-origin-token-0123456789abcd";
const SEED = Number(process.env.KVEDGE_FUZZ_SEED ?? 20261206);
const RUNS = Number(process.env.KVEDGE_FUZZ_RUNS ?? 600);
const CONCURRENCY = 12;
const MAX_FETCH_BYTES = 1 << 20;
const OK_STATUSES = new Set([200, 400, 413, 503, 504]);

const png = Buffer.from(makePng(64, 48, { seed: 3 }));
/** 16 MiB of zeros in about 16 kB: only a client that inflates it pays. */
const gzipBomb = gzipSync(Buffer.alloc(16 << 20));

/** xorshift32: one stream per case, so a failing case replays from its number. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

type Script = { parts: (Buffer | { waitMs: number } | "reset")[]; end: "end" | "hang" };

/** What the origin does for case `n` (deterministic from the seed). */
function scriptFor(n: number, self: string): Script {
  const r = rng(SEED ^ Math.imul(n + 1, 0x9e3779b1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const int = (lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));
  const status = pick([
    () => `HTTP/1.1 ${int(0, 999)} X`,
    () => `HTTP/1.1 ${pick([100, 101, 102, 103, 200, 204, 206, 301, 302, 304, 307, 404, 500, 600, 999])} Reason`,
    () => "HTTP/1.1 200 OK",
    () => "HTTP/1.0 200 OK",
    () => "HTTP/1.1 200",
    () => pick(["HTTP/2.0 200 OK", "HTTP/1.1 2000 OK", "HTTP/1.1 -1 X", "HTTP/1.1 abc X", "ICY 200 OK", "HTTP/1.1  200 OK", "HTTP/1.1 200 O\u0000K", "", "\u0000\u0001\u0002", "HTTP/9.9 200 OK"]),
  ])();
  const body = pick([
    () => png,
    () => png.subarray(0, int(0, png.length - 1)),
    () => Buffer.alloc(int(0, 4096), int(0, 255)),
    () => Buffer.alloc(0),
    () => Buffer.alloc(MAX_FETCH_BYTES + int(1, 4096), 7),
    () => gzipBomb,
  ])();
  const headers: string[] = [];
  const framing = pick(["length", "short", "long", "none", "chunked", "bad-chunked", "both", "negative", "huge", "dup"]);
  if (framing === "length") headers.push(`Content-Length: ${body.length}`);
  if (framing === "short") headers.push(`Content-Length: ${Math.max(0, body.length - int(1, 100))}`);
  if (framing === "long") headers.push(`Content-Length: ${body.length + int(1, 100_000)}`);
  if (framing === "negative") headers.push("Content-Length: -5");
  if (framing === "huge") headers.push("Content-Length: 99999999999999999999999");
  if (framing === "dup") headers.push(`Content-Length: ${body.length}`, `Content-Length: ${body.length + 1}`);
  if (framing === "both") headers.push(`Content-Length: ${body.length}`, "Transfer-Encoding: chunked");
  if (framing === "chunked" || framing === "bad-chunked") headers.push("Transfer-Encoding: chunked");
  const extra = pick(["none", "none", "type", "gzip", "big", "many", "ctl", "fold", "lf", "redirect-self", "redirect-blocked", "badname"]);
  if (extra === "type") headers.push(`Content-Type: ${pick(["image/png", "video/mp4", "text/html", "\u00ff\u00fe"])}`);
  if (extra === "gzip") headers.push("Content-Encoding: gzip");
  if (extra === "big") headers.push(`X-Big: ${"a".repeat(int(8_000, 40_000))}`);
  if (extra === "many") for (let i = 0; i < 2000; i++) headers.push(`X-H${i}: v`);
  if (extra === "ctl") headers.push("X-Ctl: a\u0001b\u007fc");
  if (extra === "fold") headers.push("X-Fold: a", " continued");
  if (extra === "redirect-self") headers.push(`Location: ${self}`);
  if (extra === "redirect-blocked") headers.push("Location: http://169.254.169.254/latest/meta-data/");
  if (extra === "badname") headers.push("Bad Name: x", "(): y");
  const eol = extra === "lf" ? "\n" : "\r\n";
  const head = Buffer.from(status + eol + headers.map((h) => h + eol).join("") + eol, "latin1");
  let payload = body;
  if (framing === "chunked") payload = Buffer.concat([Buffer.from(body.length.toString(16) + "\r\n"), body, Buffer.from("\r\n0\r\n\r\n")]);
  if (framing === "bad-chunked") payload = Buffer.concat([Buffer.from(pick(["zz\r\n", "-1\r\n", "ffffffffffffffff\r\n", "5\r\n"])), body.subarray(0, 64), Buffer.from(pick(["", "\r\n", "0\r\n"]))]);
  const timing = pick(["now", "now", "now", "stall-before", "stall-after-head", "drip", "reset-before", "reset-after-head", "reset-mid", "slow-head"]);
  const parts: Script["parts"] = [];
  let end: Script["end"] = "end";
  if (timing === "stall-before") return { parts: [], end: "hang" };
  if (timing === "reset-before") return { parts: ["reset"], end: "end" };
  if (timing === "slow-head") parts.push({ waitMs: int(100, 900) });
  parts.push(head);
  if (timing === "stall-after-head") end = "hang";
  else if (timing === "reset-after-head") parts.push("reset");
  else if (timing === "reset-mid") parts.push(payload.subarray(0, Math.floor(payload.length / 2)), "reset");
  else if (timing === "drip") for (let i = 0; i < Math.min(payload.length, 24); i++) parts.push(payload.subarray(i, i + 1), { waitMs: 40 });
  else parts.push(payload);
  return { parts, end };
}

let origin: net.Server;
let originPort = 0;
const sockets = new Set<net.Socket>();
let proc: ChildProcess;
let svcUrl = "";
const stderrLines: string[] = [];

function vmRssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

beforeAll(async () => {
  origin = net.createServer((sock) => {
    sockets.add(sock);
    sock.on("close", () => sockets.delete(sock));
    sock.on("error", () => {});
    sock.once("data", async (d) => {
      const m = /^GET (\/case\/(\d+))/.exec(d.toString("latin1"));
      if (!m) return void sock.destroy();
      const script = scriptFor(Number(m[2]), `http://127.0.0.1:${originPort}${m[1]}`);
      for (const p of script.parts) {
        if (sock.destroyed) return;
        if (p === "reset") return void sock.resetAndDestroy();
        if (Buffer.isBuffer(p)) sock.write(p);
        else await new Promise((r) => setTimeout(r, p.waitMs));
      }
      if (script.end === "end") sock.end();
    });
  });
  originPort = await new Promise<number>((r) => origin.listen(0, "127.0.0.1", () => r((origin.address() as AddressInfo).port)));
  proc = spawn(
    process.execPath,
    [
      path.resolve("services/decode/main.ts"),
      "--no-supervise",
      "--allow", `127.0.0.1:${originPort}`,
      "--concurrency", "2",
      "--max-downloads", "16",
      "--max-download-queue", "64",
      "--client-share", "1",
      "--max-fetch-bytes", String(MAX_FETCH_BYTES),
      "--fetch-timeout-ms", "1500",
      "--idle-timeout-ms", "500",
      "--request-timeout-ms", "5000",
      "--probe-timeout-ms", "5000",
      "--store-max-bytes", String(8 << 20),
    ],
    { env: { ...process.env, KVEDGE_DECODE_TOKEN: TOKEN, KVEDGE_MEDIA_URL_KEY: "f".repeat(40) }, stdio: ["ignore", "pipe", "pipe"] },
  );
  createInterface({ input: proc.stderr! }).on("line", (l) => stderrLines.push(l));
  svcUrl = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", (l) => resolve((JSON.parse(l) as { url: string }).url));
    proc.once("exit", (c) => reject(new Error(`decode service exited ${c}: ${stderrLines.join("\n")}`)));
  });
}, 60_000);

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => origin?.close(r));
  if (proc && proc.exitCode === null) {
    proc.kill("SIGTERM");
    await new Promise((r) => proc.once("exit", r));
  }
});

async function store(n: number): Promise<{ status: number; code: string | null }> {
  const res = await fetch(`${svcUrl}/v1/store`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-kvedge-client": `fuzz-${n % 3}` },
    body: JSON.stringify({ url: `http://127.0.0.1:${originPort}/case/${n}`, kind: n % 5 === 0 ? "video" : "image" }),
  });
  const j = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: j.error?.code ?? null };
}

describe("fuzz: a misbehaving origin against the real decode service", () => {
  it(`${RUNS} generated origin answers: clean statuses only, no crash, no escaped exception, bounded memory`, async () => {
    const pid = proc.pid!;
    const rss: number[] = [];
    const sampler = setInterval(() => rss.push(vmRssKiB(pid)), 100);
    const statuses = new Map<string, number>();
    const bad: string[] = [];
    let next = 0;
    let baseline = 0;
    let mid = 0;
    const lane = async (): Promise<void> => {
      while (next < RUNS) {
        const n = next++;
        if (n === 50) baseline = vmRssKiB(pid);
        if (n === Math.floor(RUNS / 2)) mid = vmRssKiB(pid);
        const out = await store(n).catch((e: unknown) => ({ status: -1, code: String(e) }));
        const key = `${out.status} ${out.code ?? "ok"}`;
        statuses.set(key, (statuses.get(key) ?? 0) + 1);
        if (!OK_STATUSES.has(out.status)) bad.push(`case ${n}: ${key}`);
      }
    };
    try {
      await Promise.all(Array.from({ length: CONCURRENCY }, lane));
    } finally {
      clearInterval(sampler);
    }
    const end = vmRssKiB(pid);
    const peak = Math.max(...rss, end);
    console.log(
      `fuzz-media-origin seed ${SEED}, ${RUNS} cases: RSS after 50 cases ${(baseline / 1024).toFixed(0)} MiB, half-way ${(mid / 1024).toFixed(0)} MiB, peak ${(peak / 1024).toFixed(0)} MiB, end ${(end / 1024).toFixed(0)} MiB; answers ${JSON.stringify(Object.fromEntries([...statuses].sort()))}`,
    );
    expect(bad).toEqual([]);
    expect(proc.exitCode).toBeNull();
    expect(stderrLines.filter((l) => /outside its handler|uncaught|unhandled rejection/i.test(l))).toEqual([]);
    // Bounded: the download and fetch caps, not the number of cases, set the footprint (the second
    // half of the cases adds little to what the first half reached, decoder threads warm by then).
    expect(peak).toBeLessThan(768 * 1024);
    expect(end - mid).toBeLessThan(96 * 1024);
    // Well-formed answers of an image were stored; nothing is left running.
    expect(statuses.get("200 ok") ?? 0).toBeGreaterThan(0);
    const h = (await (await fetch(`${svcUrl}/healthz`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { downloads: { inUse: number; waiting: number }; store: { bytes: number; maxBytes: number } };
    expect(h.downloads).toMatchObject({ inUse: 0, waiting: 0 });
    expect(h.store.bytes).toBeLessThanOrEqual(h.store.maxBytes);
  }, 300_000);
});
