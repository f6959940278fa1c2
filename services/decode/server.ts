/**
 * The regional decode service: `POST /v1/probe` with `{url}` (JSON) or the raw media bytes
 * (application/octet-stream) → content hash + torchcodec-exact frame count and fps + size, codec.
 * Media bytes are spooled to a temp file while hashed; results are cached by content hash, and
 * URLs by their validators (ETag / Last-Modified, revalidated with a conditional GET). Concurrent
 * requests for one URL, or for one content hash, share one fetch/probe. Probes run at most
 * `concurrency` at once. `GET /healthz` reports the decoder and load.
 */
import http from "node:http";
import { mkdtemp, rm, unlink } from "node:fs/promises";
import path from "node:path";
import {
  AuthenticationError,
  InternalError,
  InvalidRequestError,
  KvedgeError,
  MethodNotAllowedError,
  NotFoundError,
  NoWorkerAvailableError,
  UpstreamTimeoutError,
  errorBody,
  httpStatusOf,
} from "../../src/api/errors.ts";
import { timingSafeEqualString } from "../../src/edge/auth.ts";
import { MediaTooLargeError } from "../../src/media/errors.ts";
import { ProbeRequestSchema, type ProbeResult } from "../../src/media/probe-result.ts";
import { SafeFetcher, type FetchLike, type Resolver } from "../../src/media/safe-fetch.ts";
import { initHashing } from "../../src/util/hash.ts";
import { LruCache, Semaphore, SingleFlight } from "./concurrency.ts";
import type { ScanResult } from "./ffprobe-scan.ts";
import { spoolToFile } from "./media-file.ts";
import { DecodeServiceOptionsSchema, type DecodeServiceOptions, type DecodeServiceOptionsInput } from "./options.ts";
import { nodeResolver, pinnedFetch } from "./pinned-fetch.ts";
import { ProbeTimeoutError, selectProber, type DecoderKind, type Prober } from "./probers.ts";

export type CacheOutcome = "miss" | "hit" | "revalidated" | "shared";

export interface DecodeServiceDeps {
  /** DNS for URL media (default: node:dns); tests map names to loopback here. */
  resolve?: Resolver;
  fetch?: FetchLike;
}

export interface DecodeServiceStats {
  probes: number;
  fetches: number;
  cacheHits: number;
  revalidated: number;
  shared: number;
}

export interface DecodeService {
  url: string;
  decoder: DecoderKind;
  stats: DecodeServiceStats;
  close(): Promise<void>;
}

interface UrlEntry {
  etag: string | null;
  lastModified: string | null;
  contentHash: string;
}

const MAX_JSON_BODY = 1 << 20;

export async function startDecodeService(input: DecodeServiceOptionsInput = {}, deps: DecodeServiceDeps = {}): Promise<DecodeService> {
  const opts: DecodeServiceOptions = DecodeServiceOptionsSchema.parse(input);
  await initHashing();
  const prober: Prober = await selectProber(opts.decoder, { ffprobePath: opts.ffprobePath, threads: opts.concurrency, timeoutMs: opts.probeTimeoutMs });
  const fetcher = new SafeFetcher(opts.fetch, { fetch: deps.fetch ?? pinnedFetch, resolve: deps.resolve ?? nodeResolver });
  const tmp = await mkdtemp(path.join(opts.tmpDir, "kvedge-decode-"));
  const sem = new Semaphore(opts.concurrency);
  const byHash = new LruCache<ProbeResult>(opts.cacheEntries);
  const byUrl = new LruCache<UrlEntry>(opts.cacheEntries);
  const hashFlight = new SingleFlight<ProbeResult>();
  const urlFlight = new SingleFlight<{ result: ProbeResult; cache: CacheOutcome }>();
  const stats: DecodeServiceStats = { probes: 0, fetches: 0, cacheHits: 0, revalidated: 0, shared: 0 };
  let seq = 0;
  const tmpPath = (): string => path.join(tmp, `m${++seq}`);
  const log = (msg: string): void => {
    if (opts.verbose) process.stderr.write(`decode: ${msg}\n`);
  };

  function toResult(contentHash: string, byteLength: number, scan: ScanResult): ProbeResult {
    const { stream, meta } = scan;
    const fps = meta.averageFps;
    const decordFps = stream.avgFrameRate && stream.avgFrameRate.den !== 0 ? stream.avgFrameRate.num / stream.avgFrameRate.den : null;
    return {
      contentHash,
      byteLength,
      totalFrames: meta.numFrames,
      avgFps: fps !== null && Number.isFinite(fps) && fps > 0 ? fps : null,
      width: stream.width,
      height: stream.height,
      durationSec: Math.max(0, meta.durationSec),
      beginSec: meta.beginSec,
      codec: stream.codec,
      decoder: prober.kind,
      decord: { totalFrames: meta.allPackets, avgFps: decordFps },
    };
  }

  /** Probe of spooled bytes, deduplicated and cached by content hash. */
  async function probeSpooled(contentHash: string, byteLength: number, file: string): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const cached = byHash.get(contentHash);
    if (cached) {
      stats.cacheHits++;
      return { result: cached, cache: "hit" };
    }
    const { promise, shared } = hashFlight.do(contentHash, async () => {
      if (sem.inUse >= sem.limit && sem.waiting >= opts.maxQueue) throw new NoWorkerAvailableError("Decode service is at capacity.");
      const scan = await sem.run(() => {
        stats.probes++;
        return prober.probe(file);
      });
      const r = toResult(contentHash, byteLength, scan);
      byHash.set(contentHash, r);
      return r;
    });
    if (shared) stats.shared++;
    return { result: await promise, cache: shared ? "shared" : "miss" };
  }

  async function probeBytes(body: AsyncIterable<Uint8Array>): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const file = tmpPath();
    try {
      const s = await spoolToFile(body, file, opts.maxBodyBytes);
      return await probeSpooled(s.contentHash, s.byteLength, file);
    } finally {
      await unlink(file).catch(() => {});
    }
  }

  async function fetchAndProbe(url: string): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const known = byUrl.get(url);
    const headers: Record<string, string> = {};
    if (known?.etag) headers["if-none-match"] = known.etag;
    if (known?.lastModified) headers["if-modified-since"] = known.lastModified;
    stats.fetches++;
    let res = await fetcher.open(url, { headers, param: "url" });
    if (res.status === 304) {
      const r = known ? byHash.get(known.contentHash) : undefined;
      if (r) {
        stats.revalidated++;
        return { result: r, cache: "revalidated" };
      }
      stats.fetches++;
      res = await fetcher.open(url, { param: "url" }); // cached result evicted: fetch in full
    }
    const file = tmpPath();
    try {
      const s = await spoolToFile(res.body, file, opts.fetch.maxBytes);
      const etag = res.headers.get("etag");
      const lastModified = res.headers.get("last-modified");
      if (etag || lastModified) byUrl.set(url, { etag, lastModified, contentHash: s.contentHash });
      else byUrl.delete(url);
      return await probeSpooled(s.contentHash, s.byteLength, file);
    } finally {
      await unlink(file).catch(() => {});
    }
  }

  async function probeUrl(url: string): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const { promise, shared } = urlFlight.do(url, () => fetchAndProbe(url));
    if (shared) stats.shared++;
    const r = await promise;
    return shared ? { result: r.result, cache: "shared" } : r;
  }

  async function readJson(req: http.IncomingMessage): Promise<unknown> {
    const chunks: Buffer[] = [];
    let n = 0;
    for await (const c of req as AsyncIterable<Buffer>) {
      n += c.length;
      if (n > MAX_JSON_BODY) throw new InvalidRequestError("JSON body too large.");
      chunks.push(c);
    }
    try {
      return JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      throw new InvalidRequestError("Body is not valid JSON.");
    }
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://decode");
    if (url.pathname === "/healthz") {
      if (req.method !== "GET") throw new MethodNotAllowedError("Use GET.");
      send(res, 200, { ok: true, decoder: prober.kind, concurrency: sem.limit, inUse: sem.inUse, waiting: sem.waiting });
      return;
    }
    if (url.pathname !== "/v1/probe") throw new NotFoundError(`No route ${url.pathname}.`);
    if (req.method !== "POST") throw new MethodNotAllowedError("Use POST.");
    if (opts.token !== null) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
      if (!m || !timingSafeEqualString(m[1]!, opts.token)) throw new AuthenticationError("Decode service token required.");
    }
    const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    let out: { result: ProbeResult; cache: CacheOutcome };
    if (type === "application/json") {
      const parsed = ProbeRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError("Body must be {\"url\": string}.", "url");
      out = await probeUrl(parsed.data.url);
    } else if (type === "application/octet-stream") {
      const len = Number(req.headers["content-length"] ?? NaN);
      if (Number.isFinite(len) && len > opts.maxBodyBytes) {
        throw new MediaTooLargeError(opts.maxBodyBytes);
      }
      out = await probeBytes(req as AsyncIterable<Uint8Array>);
    } else {
      throw new InvalidRequestError("Content-Type must be application/json ({url}) or application/octet-stream (bytes).");
    }
    res.setHeader("x-cache", out.cache);
    send(res, 200, out.result);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      let err: KvedgeError;
      if (e instanceof KvedgeError) err = e;
      else if (e instanceof ProbeTimeoutError) err = new UpstreamTimeoutError("Probe timed out.");
      else {
        log(`internal error: ${(e as Error).stack ?? String(e)}`);
        err = new InternalError();
      }
      // An unread upload body (e.g. 413 or 401): answer, then drop the connection so the client
      // does not reuse a socket with half a request body still in it.
      if (!req.complete && !res.headersSent) {
        res.setHeader("connection", "close");
        res.on("finish", () => req.destroy());
      }
      send(res, httpStatusOf(err), errorBody(err));
    });
  });
  server.requestTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const addr = server.address() as { port: number; address: string; family: string };
  const host = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  log(`listening on http://${host}:${addr.port} (decoder ${prober.kind})`);
  return {
    url: `http://${host}:${addr.port}`,
    decoder: prober.kind,
    stats,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await prober.close();
      await rm(tmp, { recursive: true, force: true });
    },
  };
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", Buffer.byteLength(text));
  res.writeHead(status);
  res.end(text);
}
