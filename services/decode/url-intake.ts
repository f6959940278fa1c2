/**
 * A client URL into the media store: downloaded once however many callers want it (one flight per
 * URL and kind), verified as the kind asked for, stored under its digest and the caller's label,
 * then described for the layout (an image's size, a video's probe).
 */
import { link, unlink } from "node:fs/promises";
import { NoWorkerAvailableError } from "../../src/api/errors.ts";
import { MediaError } from "../../src/media/errors.ts";
import type { StoreResult } from "../../src/media/store-result.ts";
import type { Caller } from "./caller.ts";
import { partitioned } from "./cache-partition.ts";
import { CancellableFlight } from "./concurrency.ts";
import { imageSizeOf } from "./image-size.ts";
import type { MediaStore } from "./media-store.ts";
import type { ProbeCache } from "./probe-cache.ts";
import type { CacheOutcome, DecodeServiceStats } from "./stats.ts";
import type { Stored, UrlDownloads } from "./url-download.ts";

export type MediaKind = "image" | "video";

export interface UrlIntakeDeps {
  downloads: UrlDownloads;
  probes: ProbeCache;
  store: MediaStore;
  stats: DecodeServiceStats;
  /** A fresh path in the service's temp directory. */
  tempPath: () => string;
}

export interface Described {
  result: StoreResult;
  /** The probe's cache outcome (miss for images). */
  cache: CacheOutcome;
}

export class UrlIntake {
  private readonly flight = new CancellableFlight<Stored>();

  private readonly deps: UrlIntakeDeps;

  constructor(deps: UrlIntakeDeps) {
    this.deps = deps;
  }

  /** The stored item of `url`, fetched and verified as `kind` unless the store holds it fresh. */
  async storeUrl(url: string, kind: MediaKind, caller: Caller): Promise<Stored> {
    const { downloads, store, stats } = this.deps;
    const fresh = downloads.reuseFresh(url, caller.client);
    if (fresh) return fresh;
    // One flight per client label, URL and kind: the bytes are verified as that kind before they are stored.
    const { promise, shared } = this.flight.do(partitioned(caller.client, `${kind} ${url}`), async (s) => {
      const got = await downloads.download(url, caller.client, s);
      if ("stored" in got) return got.stored;
      const { file, entry } = got.spooled;
      let probed: CacheOutcome | null;
      try {
        probed = await this.verifySpooled(file, entry.digest, entry.byteLength, kind, { client: caller.client, signal: s });
        await store.put(file, entry.digest, entry.byteLength, caller.client);
      } finally {
        await unlink(file).catch(() => {});
      }
      downloads.remember(url, caller.client, entry);
      return { digest: entry.digest, byteLength: entry.byteLength, cache: "miss", probed };
    }, caller.signal);
    if (shared) {
      stats.shared++;
      downloads.join(url, caller.client, caller.signal);
    }
    const r = await promise;
    return shared ? { ...r, cache: "shared" } : r;
  }

  /** How long the store would keep answering `url` with `digest` without asking the origin (UrlDownloads.freshMsLeft). */
  freshMsLeft(url: string, client: string | null, digest: string): number {
    return this.deps.downloads.freshMsLeft(url, client, digest);
  }

  /** What the layout needs from stored bytes. */
  async describe(stored: Stored, kind: MediaKind, caller: Caller): Promise<Described> {
    const { probes, store } = this.deps;
    const f = store.use(stored.digest);
    if (!f) throw new NoWorkerAvailableError("The media store evicted the item before it was described; retry.");
    const base = { digest: stored.digest, byteLength: stored.byteLength, kind };
    if (kind === "image") return { result: { ...base, image: await imageSizeOf(f.path, f.size), probe: null }, cache: "miss" };
    // A probe to run may wait for a slot while the store evicts the file: it reads a link of its own
    // (the stored path itself where a link cannot be made, e.g. a store on another file system).
    const own = this.deps.tempPath();
    const linked =
      !probes.has(stored.digest, caller.client) &&
      (await link(f.path, own).then(
        () => true,
        () => false,
      ));
    const p = await probes.probeFile(stored.digest, stored.byteLength, linked ? own : f.path, caller, linked);
    return { result: { ...base, image: null, probe: p.result }, cache: p.cache };
  }

  /**
   * Checks spooled bytes are the media they were sent as (an image's header; a video's probe,
   * whose result is then cached by digest) before anything is stored: junk refused with a 400
   * takes no room from anyone.
   */
  private async verifySpooled(file: string, digest: string, byteLength: number, kind: MediaKind, caller: Caller): Promise<CacheOutcome | null> {
    if (kind === "image") {
      await imageSizeOf(file, byteLength);
      return null;
    }
    if (byteLength === 0) throw new MediaError("truncated", "Video is empty.", "url");
    // The probe may outlive this caller (another may join it): it reads a link of its own.
    const own = this.deps.tempPath();
    await link(file, own);
    return (await this.deps.probes.probeFile(digest, byteLength, own, caller, true)).cache;
  }
}
