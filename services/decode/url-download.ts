/**
 * Downloads of client media URLs into temp files, in the download slots (joinable-slots.ts). The
 * validators and freshness of each URL's last answer are kept, so the next download of it is a
 * conditional request, or none at all while the origin said the bytes stay fresh
 * (http-freshness.ts). What is known of a URL is kept per client label (cache-partition.ts).
 */
import { unlink } from "node:fs/promises";
import type { SafeFetcher } from "../../src/media/safe-fetch.ts";
import { partitioned } from "./cache-partition.ts";
import { ByteLru } from "../../src/util/byte-lru.ts";
import { fieldsAfter304, freshFor, freshnessFieldsOf, type FreshnessFields } from "./http-freshness.ts";
import type { JoinableSlots } from "./joinable-slots.ts";
import { spoolToFile } from "./media-file.ts";
import type { MediaStore } from "./media-store.ts";
import type { CacheOutcome, DecodeServiceStats } from "./stats.ts";

/** What the service knows of a URL's last answer. */
export interface UrlEntry {
  etag: string | null;
  lastModified: string | null;
  /** The stored response's freshness fields (updated by each 304). */
  freshness: FreshnessFields;
  /** Until when the bytes may be reused without asking the origin (performance.now() ms; 0 or past = ask). */
  freshUntil: number;
  digest: string;
  byteLength: number;
}

/** An item of the media store, and how this request came by it. */
export interface Stored {
  digest: string;
  byteLength: number;
  cache: CacheOutcome;
  /** New bytes verified as a video here: how their probe went (null otherwise). */
  probed: CacheOutcome | null;
}

/** A download's outcome: the origin confirmed a stored item (304), or new bytes wait in a temp file to be verified. */
export type Fetched = { stored: Stored } | { spooled: { file: string; entry: UrlEntry } };

export interface UrlDownloadsDeps {
  fetcher: SafeFetcher;
  store: MediaStore;
  slots: JoinableSlots;
  stats: DecodeServiceStats;
  /** A fresh path in the service's temp directory. */
  tempPath: () => string;
  cacheEntries: number;
  /** Longest reuse on the origin's word alone (options.ts maxUrlFreshSec). */
  maxUrlFreshSec: number;
  /** Largest download, and how long it may deliver nothing. */
  maxBytes: number;
  idleTimeoutMs: number;
}

export class UrlDownloads {
  /** Bounded by count (`cacheEntries`): each entry weighs 1. */
  private readonly byUrl: ByteLru<string, UrlEntry>;

  private readonly deps: UrlDownloadsDeps;

  constructor(deps: UrlDownloadsDeps) {
    this.deps = deps;
    this.byUrl = new ByteLru(deps.cacheEntries);
  }

  /** The stored item of `url` while the origin's freshness lasts (no request to it), else null; only what `client`'s calls learnt counts. */
  reuseFresh(url: string, client: string | null): Stored | null {
    const { store, stats } = this.deps;
    const known = this.byUrl.get(partitioned(client, url));
    if (!known || performance.now() >= known.freshUntil || !store.has(known.digest)) return null;
    stats.fresh++;
    store.use(known.digest);
    return { digest: known.digest, byteLength: known.byteLength, cache: "fresh", probed: null };
  }

  /**
   * How long from now `client`'s next call for `url` would be answered with `digest` from the store
   * without asking the origin (reuseFresh), in ms rounded down to whole seconds (what it tells of
   * this call's own timing stays coarse); 0 when it would ask (no freshness, a redirect, other bytes
   * known, the bytes gone).
   */
  freshMsLeft(url: string, client: string | null, digest: string): number {
    const known = this.byUrl.peek(partitioned(client, url));
    if (!known || known.digest !== digest || !this.deps.store.has(digest)) return 0;
    return Math.max(0, Math.floor((known.freshUntil - performance.now()) / 1000) * 1000);
  }

  /** Keeps what was learnt of `url` once its bytes are stored: when they can be reused as they are (fresh) or confirmed by a conditional request. */
  remember(url: string, client: string | null, entry: UrlEntry): void {
    const key = partitioned(client, url);
    if (entry.etag || entry.lastModified || entry.freshUntil > 0) this.byUrl.set(key, entry, 1);
    else this.byUrl.delete(key);
  }

  /** Another caller of the same label shares the download of `url`: still waiting for a slot, it may also start in this caller's share. */
  join(url: string, client: string | null, signal: AbortSignal): void {
    this.deps.slots.join(partitioned(client, url), client, signal);
  }

  /** One download of a client URL (conditional when the URL's validators are known): the stored item it confirms, or a spooled file to verify. */
  async download(url: string, client: string | null, signal: AbortSignal): Promise<Fetched> {
    const { slots, store, stats } = this.deps;
    const key = partitioned(client, url);
    return slots.run(key, client, signal, async () => {
      stats.downloadsPeak = Math.max(stats.downloadsPeak, slots.slots.inUse);
      const known = this.byUrl.get(key);
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
        return await this.transferInto(url, known, headers, transfer.signal);
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
   * asking the origin: counted from the response's arrival (`arrivedMono`, its headers), as RFC 9111
   * §4.2.3 counts age, so a slow body uses up freshness rather than extending it. Only for an answer
   * of the URL itself: after a redirect, the freshness is the target's, and the redirect (a "latest"
   * link) may point elsewhere next time.
   */
  private reuseUntil(fields: FreshnessFields, redirects: number, sentAt: number, arrivedAt: number, arrivedMono: number): number {
    if (redirects > 0) return 0;
    const left = freshFor(fields, sentAt, arrivedAt, this.deps.maxUrlFreshSec * 1000);
    return left > 0 ? arrivedMono + left : 0;
  }

  private async transferInto(url: string, known: UrlEntry | undefined, headers: Record<string, string>, signal: AbortSignal): Promise<Fetched> {
    const { fetcher, store, stats } = this.deps;
    const sentAt = Date.now();
    const res = await fetcher.open(url, { headers, param: "url", signal });
    const arrivedAt = Date.now();
    const arrivedMono = performance.now();
    if (res.status === 304) {
      if (known && store.has(known.digest)) {
        stats.revalidated++;
        store.use(known.digest);
        known.freshness = fieldsAfter304(known.freshness, freshnessFieldsOf(res.headers));
        known.freshUntil = this.reuseUntil(known.freshness, res.redirects, sentAt, arrivedAt, arrivedMono);
        return { stored: { digest: known.digest, byteLength: known.byteLength, cache: "revalidated", probed: null } };
      }
      // Evicted while the conditional request was in flight: fetch in full.
      await res.body.cancel().catch(() => {});
      stats.fetches++;
      return this.transferInto(url, undefined, {}, signal);
    }
    const file = this.deps.tempPath();
    try {
      const s = await spoolToFile(res.body, file, this.deps.maxBytes, { idleMs: this.deps.idleTimeoutMs, signal });
      const freshness = freshnessFieldsOf(res.headers);
      const entry: UrlEntry = {
        etag: res.headers.get("etag"),
        lastModified: res.headers.get("last-modified"),
        freshness,
        freshUntil: this.reuseUntil(freshness, res.redirects, sentAt, arrivedAt, arrivedMono),
        digest: s.contentDigest,
        byteLength: s.byteLength,
      };
      return { spooled: { file, entry } };
    } catch (e) {
      await unlink(file).catch(() => {});
      throw e;
    }
  }
}
