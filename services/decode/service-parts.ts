/**
 * The parts of a decode service built from its options: the prober, the SSRF-safe fetcher, the
 * media store, the probe and download slots shared fairly by clients, and the caches over them.
 * Everything here outlives requests; server.ts serves them and closes them.
 */
import { mkdtemp } from "node:fs/promises";
import path from "node:path";
import { SafeFetcher, type FetchLike, type Resolver } from "../../src/media/safe-fetch.ts";
import { importMediaUrlKey } from "../../src/media/signed-url.ts";
import { stripTrailing } from "../../src/util/strip-trailing.ts";
import { FairSlots } from "./fair-slots.ts";
import { JoinableSlots } from "./joinable-slots.ts";
import { MediaStore } from "./media-store.ts";
import type { DecodeServiceOptions } from "./options.ts";
import { nodeResolver, pinnedFetch } from "./pinned-fetch.ts";
import { ProbeCache } from "./probe-cache.ts";
import { selectProber, type Prober } from "./probers.ts";
import { emptyStats, type DecodeServiceStats } from "./stats.ts";
import { UrlDownloads } from "./url-download.ts";
import { UrlIntake } from "./url-intake.ts";

export interface DecodeServiceDeps {
  /** DNS for URL media (default: node:dns); tests map names to loopback here. */
  resolve?: Resolver;
  fetch?: FetchLike;
}

/** Waiting ffprobe processes by default at most (memory: ~10 MiB each). */
const DEFAULT_MAX_WARM_PROBES = 16;

export interface ServiceParts {
  opts: DecodeServiceOptions;
  prober: Prober;
  store: MediaStore;
  /** The service's temp directory (spooled downloads and bodies, probe links), removed on close. */
  tmp: string;
  /** The signed-URL key shared with the edge (null: no worker URL is served). */
  urlKey: CryptoKey | null;
  probeSlots: FairSlots;
  downloadSlots: FairSlots;
  probes: ProbeCache;
  intake: UrlIntake;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export async function assembleParts(opts: DecodeServiceOptions, deps: DecodeServiceDeps): Promise<ServiceParts> {
  const log = (msg: string): void => {
    if (opts.verbose) process.stderr.write(`decode: ${msg}\n`);
  };
  const prober = await selectProber(opts.decoder, {
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
    leases: {
      leaseMs: opts.store.leaseSec * 1000,
      maxBytes: Math.floor(opts.store.maxTotalBytes * opts.store.leaseShare),
      maxItems: Math.floor(opts.store.maxItems * opts.store.leaseShare),
      clientMaxBytes: Math.floor(opts.store.maxTotalBytes * opts.store.clientShare * opts.store.leaseShare),
      // At least one: a small store's share must not round every client's leases away.
      clientMaxItems: Math.max(1, Math.floor(opts.store.maxItems * opts.store.clientShare * opts.store.leaseShare)),
    },
  });
  const urlKey = opts.store.urlKey ? await importMediaUrlKey(opts.store.urlKey) : null;
  // Shared by clients (fair-slots.ts): no client holds more than its share of either.
  const probeSlots = new FairSlots({ limit: opts.concurrency, maxQueue: opts.maxQueue, share: opts.clientShare });
  const downloadSlots = new FairSlots({ limit: opts.maxDownloads, maxQueue: opts.maxDownloadQueue, share: opts.clientShare });
  const stats = emptyStats();
  let seq = 0;
  const tempPath = (): string => path.join(tmp, `m${++seq}`);
  const probes = new ProbeCache({
    prober,
    slots: new JoinableSlots(probeSlots),
    stats,
    tempPath,
    cacheEntries: opts.cacheEntries,
    wasmMaxMediaBytes: opts.wasmMaxMediaBytes,
    maxBodyBytes: opts.maxBodyBytes,
    idleTimeoutMs: opts.idleTimeoutMs,
  });
  const downloads = new UrlDownloads({
    fetcher,
    store,
    slots: new JoinableSlots(downloadSlots),
    stats,
    tempPath,
    cacheEntries: opts.cacheEntries,
    maxUrlFreshSec: opts.maxUrlFreshSec,
    maxBytes: opts.fetch.maxBytes,
    idleTimeoutMs: opts.idleTimeoutMs,
  });
  const intake = new UrlIntake({ downloads, probes, store, stats, tempPath });
  return { opts, prober, store, tmp, urlKey, probeSlots, downloadSlots, probes, intake, stats, log };
}
