/**
 * The regional decode service and media store.
 * - `POST /v1/store` `{url, kind}`: fetches a client's media URL once with the SSRF-safe fetcher
 *   (pinned DNS, every redirect re-checked), stores the bytes under their SHA-256 and answers what
 *   the layout needs, computed from the stored bytes (image header, or the video probe).
 * - `GET /v1/media/<digest>?exp&w&sig`: serves stored bytes to workers, only under a valid,
 *   unexpired HMAC signature from the edge (src/media/signed-url.ts) and only to the worker `w` it
 *   names (its media credential as Basic auth); no bearer token.
 * - `POST /v1/probe`: `{url}` (fetched and stored as above) or raw bytes (not stored) → probe.
 * Downloads run at most `maxDownloads` at once with a bounded queue (503 beyond it); a download is
 * cancelled when every caller waiting for it has gone, when it stalls (`idleTimeoutMs`) and at the
 * request deadline (`requestTimeoutMs`). Concurrent requests for one URL, or one digest, share one
 * download/probe. Probes run at most `concurrency` at once. `GET /healthz` reports load.
 */
import http from "node:http";
import { createReadStream } from "node:fs";
import { link, mkdtemp, open, rm, unlink } from "node:fs/promises";
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
import { timingSafeEqualString } from "../../src/util/constant-time.ts";
import { MediaError, MediaTooLargeError } from "../../src/media/errors.ts";
import { readImageHeader } from "../../src/media/image-header.ts";
import { ProbeRequestSchema, type ProbeResult } from "../../src/media/probe-result.ts";
import { SafeFetcher, type FetchLike, type Resolver } from "../../src/media/safe-fetch.ts";
import { importMediaUrlKey, presentsWorkerCredential, verifyMediaUrl } from "../../src/media/signed-url.ts";
import { StoreRequestSchema, type StoreResult } from "../../src/media/store-result.ts";
import { initHashing } from "../../src/util/hash.ts";
import { CancellableFlight, LruCache, QueueFullError } from "./concurrency.ts";
import { FairSlots, type SlotClaim } from "./fair-slots.ts";
import { inRequestScope } from "./last-resort.ts";
import type { ScanResult } from "./ffprobe-scan.ts";
import { spoolToFile } from "./media-file.ts";
import { MediaStore, type MediaStoreStats } from "./media-store.ts";
import { DecodeServiceOptionsSchema, type DecodeServiceOptions, type DecodeServiceOptionsInput } from "./options.ts";
import { fieldsAfter304, freshFor, freshnessFieldsOf, type FreshnessFields } from "./http-freshness.ts";
import { nodeResolver, pinnedFetch } from "./pinned-fetch.ts";
import { ProbeTimeoutError, selectProber, type DecoderKind, type Prober } from "./probers.ts";
import { stripTrailing } from "../../src/util/strip-trailing.ts";
import { parseTraceparent } from "../../src/util/trace-context.ts";

/** miss: fetched in full; hit: probe cached by digest; revalidated: the origin answered 304; fresh: reused
 * without contacting the origin (HTTP freshness, http-freshness.ts); shared: joined a concurrent request's. */
export type CacheOutcome = "miss" | "hit" | "revalidated" | "fresh" | "shared";

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
  /** URL requests answered from the store within the origin's freshness, without a request to it. */
  fresh: number;
  shared: number;
  /** Most downloads that ever ran at once (never above maxDownloads). */
  downloadsPeak: number;
  downloadsCancelled: number;
  mediaServed: number;
  mediaRefused: number;
  /** Probe requests answered with a recent failure of the same bytes, without probing again. */
  failuresReused: number;
}

/** How long a failed probe's answer is reused for the same bytes. */
export const FAILED_PROBE_TTL_MS = 10 * 60_000;

export interface DecodeService {
  url: string;
  decoder: DecoderKind;
  stats: DecodeServiceStats;
  store: () => MediaStoreStats;
  close(): Promise<void>;
}

interface UrlEntry {
  etag: string | null;
  lastModified: string | null;
  /** The stored response's freshness fields (updated by each 304). */
  freshness: FreshnessFields;
  /** Until when the bytes may be reused without asking the origin (performance.now() ms; 0 or past = ask). */
  freshUntil: number;
  digest: string;
  byteLength: number;
}

interface Stored {
  digest: string;
  byteLength: number;
  cache: CacheOutcome;
  /** New bytes verified as a video here: how their probe went (null otherwise). */
  probed: CacheOutcome | null;
}

/** A download's outcome: the origin confirmed a stored item (304), or new bytes wait in a temp file to be verified. */
type Fetched = { stored: Stored } | { spooled: { file: string; entry: UrlEntry } };

const MAX_JSON_BODY = 1 << 20;
/** Image headers sit at the start (JPEG APPn segments can push them back a few MiB). */
const MAX_HEADER_BYTES = 4 << 20;

/** Waiting ffprobe processes by default at most (memory: ~10 MiB each). */
const DEFAULT_MAX_WARM_PROBES = 16;

/** The caller went away before the answer: its share of any work is dropped. */
class CallerGone extends Error {}

/** Who a call is for (the edge's client label, fair-slots.ts) and when it stops waiting. */
interface Caller {
  /** null: no label (not capped per client). */
  client: string | null;
  signal: AbortSignal;
}

/** `x-kvedge-client`: an opaque label the edge derives from its client. */
const CLIENT_LABEL = /^[A-Za-z0-9:._-]{1,80}$/;

export async function startDecodeService(input: DecodeServiceOptionsInput = {}, deps: DecodeServiceDeps = {}): Promise<DecodeService> {
  const opts: DecodeServiceOptions = DecodeServiceOptionsSchema.parse(input);
  await initHashing();
  const prober: Prober = await selectProber(opts.decoder, {
    ffprobePath: opts.ffprobePath,
    threads: opts.concurrency,
    // Native: pre-started ffprobe processes, so a probe does not wait for process start.
    warm: opts.warmProbes ?? Math.min(opts.concurrency, DEFAULT_MAX_WARM_PROBES),
    timeoutMs: opts.probeTimeoutMs,
    memoryBytes: opts.probeMemoryBytes,
    tmpDir: opts.tmpDir,
  });
  const baseResolve = deps.resolve ?? nodeResolver;
  const hostMap = new Map(Object.entries(opts.hostMap).map(([k, v]) => [stripTrailing(k.toLowerCase(), "."), v]));
  const resolve: Resolver = async (host) => hostMap.get(stripTrailing(host.toLowerCase(), ".")) ?? baseResolve(host);
  const fetcher = new SafeFetcher(opts.fetch, { fetch: deps.fetch ?? pinnedFetch, resolve });
  const tmp = await mkdtemp(path.join(opts.tmpDir, "kvedge-decode-"));
  const store = await MediaStore.open(opts.store.dir ?? path.join(tmp, "store"), {
    maxBytes: opts.store.maxTotalBytes,
    maxItems: opts.store.maxItems,
    clientMaxBytes: Math.floor(opts.store.maxTotalBytes * opts.store.clientShare),
  });
  const urlKey = opts.store.urlKey ? await importMediaUrlKey(opts.store.urlKey) : null;
  // Shared by clients (fair-slots.ts): no client holds more than its share of either.
  const probes = new FairSlots({ limit: opts.concurrency, maxQueue: opts.maxQueue, share: opts.clientShare });
  const downloads = new FairSlots({ limit: opts.maxDownloads, maxQueue: opts.maxDownloadQueue, share: opts.clientShare });
  /** Slot claims of flights still waiting for a slot, by flight key: a caller who joins the flight joins its claim too. */
  const waitingProbes = new Map<string, SlotClaim>();
  const waitingDownloads = new Map<string, SlotClaim>();

  /**
   * Runs `work` in a slot of `slots` claimed for `label`, joinable under `key` by other callers of
   * the same flight until it is granted (fair-slots.ts), and given back when the work ends.
   */
  async function inSlot<R>(slots: FairSlots, waiting: Map<string, SlotClaim>, key: string, label: string | null, signal: AbortSignal, work: () => Promise<R>): Promise<R> {
    const claim = slots.claim(label, signal);
    waiting.set(key, claim);
    let charged: string;
    try {
      charged = await claim.granted;
    } finally {
      if (waiting.get(key) === claim) waiting.delete(key);
    }
    try {
      // Everyone may have left between the grant and now: the slot goes back unused.
      signal.throwIfAborted();
      return await work();
    } finally {
      slots.release(charged);
    }
  }
  const byDigest = new LruCache<ProbeResult>(opts.cacheEntries);
  /**
   * Probes that failed on the media (unreadable, too many packets, no frames), by digest, for
   * FAILED_PROBE_TTL_MS: the same bytes sent again are refused at once instead of probed again (a
   * few KB of hostile container could otherwise buy a probe's whole time limit on every request).
   */
  const failedByDigest = new LruCache<{ error: Error; until: number }>(opts.cacheEntries);
  const byUrl = new LruCache<UrlEntry>(opts.cacheEntries);
  const probeFlight = new CancellableFlight<ProbeResult>();
  const urlFlight = new CancellableFlight<Stored>();
  const stats: DecodeServiceStats = { probes: 0, fetches: 0, cacheHits: 0, revalidated: 0, fresh: 0, shared: 0, downloadsPeak: 0, downloadsCancelled: 0, mediaServed: 0, mediaRefused: 0, failuresReused: 0 };
  let seq = 0;
  const tmpPath = (): string => path.join(tmp, `m${++seq}`);
  const log = (msg: string): void => {
    if (opts.verbose) process.stderr.write(`decode: ${msg}\n`);
  };

  function toResult(contentDigest: string, byteLength: number, scan: ScanResult): ProbeResult {
    const { stream, meta } = scan;
    const fps = meta.averageFps;
    const decordFps = stream.avgFrameRate && stream.avgFrameRate.den !== 0 ? stream.avgFrameRate.num / stream.avgFrameRate.den : null;
    return {
      contentDigest,
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

  /**
   * Probe of a file, deduplicated and cached by digest. A probe still waiting for a slot is dropped
   * when every caller of it has gone. `ownedFile`: a temporary file of this call, removed when the
   * probe that reads it ends (not when its caller leaves: another caller may share that probe).
   */
  async function probeFile(digest: string, byteLength: number, file: string, caller: Caller, ownedFile = false): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const drop = (): void => void (ownedFile && unlink(file).catch(() => {}));
    const cached = byDigest.get(digest);
    if (cached) {
      stats.cacheHits++;
      drop();
      return { result: cached, cache: "hit" };
    }
    const failed = failedByDigest.get(digest);
    if (failed && failed.until > Date.now()) {
      stats.failuresReused++;
      drop();
      throw failed.error;
    }
    if (prober.kind === "wasm" && byteLength > opts.wasmMaxMediaBytes) {
      drop();
      throw new MediaError("unprobeable_media", `Media above ${opts.wasmMaxMediaBytes} bytes is not probed by the wasm decoder (memory cap).`);
    }
    const { promise, shared } = probeFlight.do(digest, async (flightSignal, commit) => {
      const scan = await inSlot(probes, waitingProbes, digest, caller.client, flightSignal, () => {
        // A started probe runs to its end: later callers share it even if every caller leaves.
        commit();
        stats.probes++;
        return prober.probe(file);
      })
        .catch((e: unknown) => {
          // The media's own fault: remembered for its bytes. Not a timeout, which can be this
          // service's load as much as the media (a hostile container fails fast under the memory cap).
          if (e instanceof MediaError) failedByDigest.set(digest, { error: e, until: Date.now() + FAILED_PROBE_TTL_MS });
          throw e;
        })
        .finally(drop);
      const r = toResult(digest, byteLength, scan);
      byDigest.set(digest, r);
      return r;
    }, caller.signal);
    if (shared) {
      stats.shared++;
      // The probe reads the first caller's file, not this one; still waiting, it may start in this caller's share.
      drop();
      waitingProbes.get(digest)?.join(caller.client, caller.signal);
    }
    return { result: await promise, cache: shared ? "shared" : "miss" };
  }

  /** One download of a client URL (conditional when the URL's validators are known): the stored item it confirms, or a spooled file to verify. */
  async function download(url: string, client: string | null, signal: AbortSignal): Promise<Fetched> {
    return inSlot(downloads, waitingDownloads, url, client, signal, async () => {
      stats.downloadsPeak = Math.max(stats.downloadsPeak, downloads.inUse);
      const known = byUrl.get(url);
      const headers: Record<string, string> = {};
      if (known && store.has(known.digest)) {
        if (known.etag) headers["if-none-match"] = known.etag;
        if (known.lastModified) headers["if-modified-since"] = known.lastModified;
      }
      stats.fetches++;
      // Own controller: a stalled or refused body aborts the connection itself, not just the reader.
      const transfer = new AbortController();
      const onAbort = (): void => transfer.abort(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        return await transferInto(url, known, headers, transfer.signal);
      } catch (e) {
        transfer.abort(e);
        throw e;
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    });
  }

  /**
   * Until when (this process's monotonic clock, ms; 0 = never) the bytes may be reused without
   * asking the origin. Only for an answer of the URL itself: after a redirect, the freshness is the
   * target's, and the redirect (a "latest" link) may point elsewhere next time.
   */
  function reuseUntil(fields: FreshnessFields, redirects: number, sentAt: number, arrivedAt: number): number {
    if (redirects > 0) return 0;
    const left = freshFor(fields, sentAt, arrivedAt, opts.maxUrlFreshSec * 1000);
    return left > 0 ? performance.now() + left : 0;
  }

  async function transferInto(url: string, known: UrlEntry | undefined, headers: Record<string, string>, signal: AbortSignal): Promise<Fetched> {
    const sentAt = Date.now();
    const res = await fetcher.open(url, { headers, param: "url", signal });
    const arrivedAt = Date.now();
    if (res.status === 304) {
      if (known && store.has(known.digest)) {
        stats.revalidated++;
        store.use(known.digest);
        known.freshness = fieldsAfter304(known.freshness, freshnessFieldsOf(res.headers));
        known.freshUntil = reuseUntil(known.freshness, res.redirects, sentAt, arrivedAt);
        return { stored: { digest: known.digest, byteLength: known.byteLength, cache: "revalidated", probed: null } };
      }
      // Evicted while the conditional request was in flight: fetch in full.
      await res.body.cancel().catch(() => {});
      stats.fetches++;
      return transferInto(url, undefined, {}, signal);
    }
    const file = tmpPath();
    try {
      const s = await spoolToFile(res.body, file, opts.fetch.maxBytes, { idleMs: opts.idleTimeoutMs, signal });
      const freshness = freshnessFieldsOf(res.headers);
      const entry: UrlEntry = {
        etag: res.headers.get("etag"),
        lastModified: res.headers.get("last-modified"),
        freshness,
        freshUntil: reuseUntil(freshness, res.redirects, sentAt, arrivedAt),
        digest: s.contentDigest,
        byteLength: s.byteLength,
      };
      return { spooled: { file, entry } };
    } catch (e) {
      await unlink(file).catch(() => {});
      throw e;
    }
  }

  /**
   * Checks spooled bytes are the media they were sent as (an image's header; a video's probe,
   * whose result is then cached by digest) before anything is stored: junk refused with a 400
   * takes no room from anyone.
   */
  async function verifySpooled(file: string, digest: string, byteLength: number, kind: "image" | "video", caller: Caller): Promise<CacheOutcome | null> {
    if (kind === "image") {
      await imageOf(file, byteLength);
      return null;
    }
    if (byteLength === 0) throw new MediaError("truncated", "Video is empty.", "url");
    // The probe may outlive this caller (another may join it): it reads a link of its own.
    const own = tmpPath();
    await link(file, own);
    return (await probeFile(digest, byteLength, own, caller, true)).cache;
  }

  async function storeUrl(url: string, kind: "image" | "video", caller: Caller): Promise<Stored> {
    const known = byUrl.get(url);
    if (known && performance.now() < known.freshUntil && store.has(known.digest)) {
      stats.fresh++;
      store.use(known.digest);
      return { digest: known.digest, byteLength: known.byteLength, cache: "fresh", probed: null };
    }
    // One flight per URL and kind: the bytes are verified as that kind before they are stored.
    const { promise, shared } = urlFlight.do(`${kind} ${url}`, async (s) => {
      const got = await download(url, caller.client, s);
      if ("stored" in got) return got.stored;
      const { file, entry } = got.spooled;
      let probed: CacheOutcome | null;
      try {
        probed = await verifySpooled(file, entry.digest, entry.byteLength, kind, { client: caller.client, signal: s });
        await store.put(file, entry.digest, entry.byteLength, caller.client);
      } finally {
        await unlink(file).catch(() => {});
      }
      // Kept when the bytes can be reused as they are (fresh) or confirmed by a conditional request.
      if (entry.etag || entry.lastModified || entry.freshUntil > 0) byUrl.set(url, entry);
      else byUrl.delete(url);
      return { digest: entry.digest, byteLength: entry.byteLength, cache: "miss", probed };
    }, caller.signal);
    if (shared) {
      stats.shared++;
      // Still waiting for a slot: it may also start in this caller's share.
      waitingDownloads.get(url)?.join(caller.client, caller.signal);
    }
    const r = await promise;
    return shared ? { ...r, cache: "shared" } : r;
  }

  async function imageOf(file: string, size: number): Promise<NonNullable<StoreResult["image"]>> {
    const n = Math.min(size, MAX_HEADER_BYTES);
    const fh = await open(file, "r");
    try {
      const buf = new Uint8Array(n);
      await fh.read(buf, 0, n, 0);
      const h = readImageHeader(buf, true, { param: "url" });
      if (!h) throw new MediaError("corrupt", `No image size within the first ${n} bytes.`, "url");
      return { width: h.width, height: h.height, format: h.format };
    } finally {
      await fh.close();
    }
  }

  /** What the layout needs from stored bytes; `cache` = the probe's cache outcome (miss for images). */
  async function describe(stored: Stored, kind: "image" | "video", caller: Caller): Promise<{ result: StoreResult; cache: CacheOutcome }> {
    const f = store.use(stored.digest);
    if (!f) throw new NoWorkerAvailableError("The media store evicted the item before it was described; retry.");
    const base = { digest: stored.digest, byteLength: stored.byteLength, kind };
    if (kind === "image") return { result: { ...base, image: await imageOf(f.path, f.size), probe: null }, cache: "miss" };
    // A probe to run may wait for a slot while the store evicts the file: it reads a link of its own
    // (the stored path itself where a link cannot be made, e.g. a store on another file system).
    const own = tmpPath();
    const linked =
      byDigest.get(stored.digest) === undefined &&
      (await link(f.path, own).then(
        () => true,
        () => false,
      ));
    const p = await probeFile(stored.digest, stored.byteLength, linked ? own : f.path, caller, linked);
    return { result: { ...base, image: null, probe: p.result }, cache: p.cache };
  }

  async function probeBytes(body: AsyncIterable<Uint8Array>, caller: Caller): Promise<{ result: ProbeResult; cache: CacheOutcome }> {
    const file = tmpPath();
    let s;
    try {
      s = await spoolToFile(body, file, opts.maxBodyBytes, { idleMs: opts.idleTimeoutMs, signal: caller.signal });
    } catch (e) {
      await unlink(file).catch(() => {});
      throw e;
    }
    return probeFile(s.contentDigest, s.byteLength, file, caller, true);
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

  /** Does the request carry the edge's token (always true with allowNoAuth and no token)? */
  function hasToken(req: http.IncomingMessage): boolean {
    if (opts.token === null) return true;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
    return m !== null && timingSafeEqualString(m[1]!, opts.token);
  }

  function requireToken(req: http.IncomingMessage): void {
    if (!hasToken(req)) throw new AuthenticationError("Decode service token required.");
  }

  async function serveMedia(url: URL, authorization: string | undefined, res: http.ServerResponse): Promise<void> {
    const refuse = (why: string): never => {
      stats.mediaRefused++;
      log(`media refused: ${why}`);
      // One answer for every refusal: a worker (or anyone) learns nothing about what is stored.
      throw new KvedgeError("Media URL is not valid.", "invalid_request_error", "media_url_refused");
    };
    if (!urlKey) refuse("no URL key configured");
    const check = await verifyMediaUrl(urlKey!, url.pathname, url.searchParams, Math.floor(Date.now() / 1000), opts.store.maxUrlTtlSec);
    if (!check.ok) refuse(check.reason);
    // The URL names the worker it was issued for: only that worker's credential fetches it.
    if (check.ok && opts.store.requireWorkerCredential && !(await presentsWorkerCredential(urlKey!, authorization, check.workerId))) refuse(`not worker ${check.workerId}'s credential`);
    const f = check.ok ? store.use(check.digest) : null;
    if (!f) throw new NotFoundError("Media is no longer stored.");
    stats.mediaServed++;
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": f.size, "cache-control": "no-store", "x-content-type-options": "nosniff" });
    await new Promise<void>((resolve, reject) => {
      const s = createReadStream(f.path);
      s.on("error", reject);
      res.on("close", () => {
        s.destroy();
        resolve();
      });
      s.pipe(res);
    });
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
    const url = new URL(req.url ?? "/", "http://decode");
    if (url.pathname === "/healthz") {
      if (req.method !== "GET") throw new MethodNotAllowedError(["GET"]);
      // Liveness for anyone; load and the store's contents (whether bytes are stored) for the edge's token only.
      if (!hasToken(req)) return send(res, 200, { ok: true, decoder: prober.kind });
      send(res, 200, {
        ok: true,
        decoder: prober.kind,
        concurrency: probes.limit,
        inUse: probes.inUse,
        waiting: probes.waiting,
        perClient: { probes: probes.perClient, downloads: downloads.perClient },
        downloads: { limit: downloads.limit, inUse: downloads.inUse, waiting: downloads.waiting, peak: downloads.peakInUse, clients: downloads.clients },
        store: store.stats,
      });
      return;
    }
    if (url.pathname.startsWith("/v1/media/")) {
      if (req.method !== "GET") throw new MethodNotAllowedError(["GET"]);
      await serveMedia(url, req.headers.authorization, res);
      return;
    }
    if (url.pathname !== "/v1/probe" && url.pathname !== "/v1/store") throw new NotFoundError(`No route ${url.pathname}.`);
    if (req.method !== "POST") throw new MethodNotAllowedError(["POST"]);
    requireToken(req);
    // The edge's label of its client (authenticated with the edge's token): whose share a call spends.
    const label = req.headers["x-kvedge-client"];
    if (label !== undefined && (typeof label !== "string" || !CLIENT_LABEL.test(label))) throw new InvalidRequestError("x-kvedge-client must be 1-80 characters of [A-Za-z0-9:._-].");
    const caller: Caller = { client: label ?? null, signal };
    // The edge's W3C trace context: one line per call names the client request's trace (--verbose).
    const trace = parseTraceparent(req.headers.traceparent?.toString());
    if (trace) log(`${url.pathname} trace=${trace.traceId} parent=${trace.parentId}`);
    const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    if (url.pathname === "/v1/store") {
      if (type !== "application/json") throw new InvalidRequestError("Content-Type must be application/json ({url, kind}).");
      const parsed = StoreRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError('Body must be {"url": string, "kind": "image" | "video"}.', "url");
      const stored = await storeUrl(parsed.data.url, parsed.data.kind, caller);
      res.setHeader("x-cache", stored.cache);
      send(res, 200, (await describe(stored, parsed.data.kind, caller)).result);
      return;
    }
    let out: { result: ProbeResult; cache: CacheOutcome };
    if (type === "application/json") {
      const parsed = ProbeRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError("Body must be {\"url\": string}.", "url");
      const stored = await storeUrl(parsed.data.url, "video", caller);
      const d = await describe(stored, "video", caller);
      // A fresh download reports whether its probe (while verifying it) was cached; otherwise the download's own outcome.
      out = { result: d.result.probe!, cache: stored.cache === "miss" ? (stored.probed ?? d.cache) : stored.cache };
    } else if (type === "application/octet-stream") {
      const len = Number(req.headers["content-length"] ?? NaN);
      if (Number.isFinite(len) && len > opts.maxBodyBytes) {
        throw new MediaTooLargeError(opts.maxBodyBytes);
      }
      out = await probeBytes(req as AsyncIterable<Uint8Array>, caller);
    } else {
      throw new InvalidRequestError("Content-Type must be application/json ({url}) or application/octet-stream (bytes).");
    }
    res.setHeader("x-cache", out.cache);
    send(res, 200, out.result);
  }

  const server = http.createServer((req, res) =>
    inRequestScope(
      (e) => {
        log(`request failed outside its handler: ${(e as Error)?.stack ?? String(e)}`);
        if (res.headersSent) return void res.destroy();
        res.setHeader("connection", "close");
        res.on("finish", () => req.destroy());
        send(res, 500, errorBody(new InternalError()));
      },
      () => onRequest(req, res),
    ),
  );

  function onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    // One signal per request: the caller hanging up, or the request deadline.
    const ctrl = new AbortController();
    const deadline = setTimeout(() => ctrl.abort(new UpstreamTimeoutError(`The decode service gave up after ${opts.requestTimeoutMs} ms.`)), opts.requestTimeoutMs);
    res.on("close", () => {
      clearTimeout(deadline);
      if (!res.writableFinished && !ctrl.signal.aborted) ctrl.abort(new CallerGone("caller went away"));
    });
    handle(req, res, ctrl.signal).catch((e: unknown) => {
      let err: KvedgeError;
      if (e instanceof CallerGone || (ctrl.signal.reason instanceof CallerGone && !(e instanceof KvedgeError))) {
        stats.downloadsCancelled++;
        log("caller went away; its work was dropped");
        res.destroy();
        return;
      }
      if (e instanceof KvedgeError) err = e;
      else if (e instanceof QueueFullError) err = new NoWorkerAvailableError("Decode service is at capacity (its queue, or this client's share of it, is full).");
      else if (e instanceof ProbeTimeoutError) err = new UpstreamTimeoutError("Probe timed out.");
      else {
        log(`internal error: ${(e as Error).stack ?? String(e)}`);
        err = new InternalError();
      }
      // An unread upload body (e.g. 413 or 401): answer, then drop the connection so the client
      // does not reuse a socket with half a request body still in it.
      if (err instanceof MethodNotAllowedError && !res.headersSent) res.setHeader("allow", err.allow.join(", "));
      if (!req.complete && !res.headersSent) {
        res.setHeader("connection", "close");
        res.on("finish", () => req.destroy());
      }
      send(res, httpStatusOf(err), errorBody(err));
    });
  }
  server.requestTimeout = opts.requestTimeoutMs;
  server.headersTimeout = Math.min(opts.requestTimeoutMs, 30_000);
  server.keepAliveTimeout = 5_000;
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
    store: () => store.stats,
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
