/**
 * Media items the edge has verified, kept per isolate so a conversation's later turns do media
 * work only for their new items (src/edge/media.ts decides when an entry may be used).
 *
 * An entry maps (scope, kind, URL) to the verified item: for a `data:` URL its digest, metadata
 * and forward form (a pure function of the URL's text, so always valid); for an http(s) URL the
 * digest and metadata the media store answered for it (valid while the store still holds those
 * bytes, which the edge asks it in one batched call per request). The scope is the client label
 * and the cache namespace: no entry is ever used across clients or tenants. URLs are compared as
 * whole strings (Map keys; V8 hashes a long string by its length, so a data: URL costs one
 * compare at memory speed, not a hash of its text). Bounded by estimated bytes, LRU.
 *
 * An entry also says whether its URL has passed this isolate's media policy (SSRF rules, data: URLs
 * allowed): the memo lives as long as the config whose policy decided its items (media-deps.ts), so
 * an entry stored after verification has, and a URL found by the whole string is that URL; a seed
 * (verified in another isolate, under the policy it ran then) has not, until its first use checks it.
 */
import { ByteLru } from "../util/byte-lru.ts";
import type { VerifiedMedia } from "./media.ts";

/** Estimated bytes of all entries: a few data: URLs of history (one of up to 2 M characters, a 1.5 MB image), or thousands of http(s) items. */
export const DEFAULT_MEDIA_MEMO_BYTES = 8 * 1024 * 1024;

export interface MediaMemoStats {
  hits: number;
  misses: number;
  stores: number;
  drops: number;
  evictions: number;
  entries: number;
  bytes: number;
  maxBytes: number;
}

/**
 * A remembered item; `policyChecked`: its URL passed this isolate's policy (the caller sets it once
 * it has checked a seed's); `leaseUntil`: until when (Date.now ms) the media store promised to keep
 * its bytes (0: no promise; set from the store's answer to `POST /v1/store` or `/v1/store/held`
 * in media.ts, dropLeases clears it); `freshUntil`: until when (Date.now ms) the store said it would
 * answer this client's call for the URL with these bytes without asking the origin (the origin's
 * HTTP freshness; 0: it would ask; dropLeases clears it too), so a new message naming the URL may
 * take the entry until then.
 */
export interface Remembered {
  readonly media: VerifiedMedia;
  policyChecked: boolean;
  leaseUntil: number;
  freshUntil: number;
}

/** The same verified item: what the worker receives and what identifies it. */
function sameItem(a: VerifiedMedia, b: VerifiedMedia): boolean {
  if (a.kind !== b.kind || a.stored !== b.stored || a.forward !== b.forward || a.digest !== b.digest) return false;
  const x = a.metadata;
  const y = b.metadata;
  if (x === null || y === null) return x === y;
  if (x.modality === "image" || y.modality === "image") return x.modality === y.modality && x.width === y.width && x.height === y.height;
  return x.modality === y.modality && x.width === y.width && x.height === y.height && x.totalFrames === y.totalFrames && x.avgFps === y.avgFps;
}

/** Where an entry sits in byScope, so an eviction can take it out there too. */
interface Entry {
  outer: string;
  url: string;
}

/** V8 keeps a string of Latin-1 characters at one byte each (a base64 data: URL), any other at two. */
function stringBytes(s: string): number {
  return /[^\u0000-\u00ff]/.test(s) ? 2 * s.length : s.length;
}

/**
 * The key and a forward form that is not the key itself, plus the entry around them (792 B: the
 * item, its digest and metadata, the entry with its lease and freshness, its index and LRU slots).
 * Measured in Node 22 by what a full GC frees when a 4 MiB memo of http(s) items (stored, leased,
 * ~100-character URLs) is dropped: 679–779 B an item beyond the key and URL strings.
 */
function entryBytes(outer: string, url: string, media: VerifiedMedia): number {
  return 2 * outer.length + stringBytes(url) + (media.forward !== null && media.forward !== url ? stringBytes(media.forward) : 0) + 792;
}

export class MediaMemo {
  readonly maxBytes: number;
  /** `scope \0 kind` → URL → entry. */
  private readonly byScope = new Map<string, Map<string, Entry>>();
  /** Every entry of byScope and its item, least recently used first. */
  private readonly lru: ByteLru<Entry, Remembered>;
  private s = { hits: 0, misses: 0, stores: 0, drops: 0 };
  /** The last scope's `scope \0 kind` keys: a request looks up all its items under one scope, and a key string used again keeps its hash. */
  private lastScope: string | null = null;
  private lastOuter: Record<VerifiedMedia["kind"], string> = { image: "", video: "", audio: "" };

  constructor(maxBytes = DEFAULT_MEDIA_MEMO_BYTES) {
    this.maxBytes = maxBytes;
    this.lru = new ByteLru(maxBytes, (e) => this.unindex(e));
  }

  private outer(scope: string, kind: VerifiedMedia["kind"]): string {
    if (scope !== this.lastScope) {
      this.lastScope = scope;
      this.lastOuter = { image: `${scope}\u0000image`, video: `${scope}\u0000video`, audio: `${scope}\u0000audio` };
    }
    return this.lastOuter[kind];
  }

  get(scope: string, kind: VerifiedMedia["kind"], url: string): Remembered | null {
    const e = this.byScope.get(this.outer(scope, kind))?.get(url);
    const hit = e && this.lru.get(e);
    if (!hit) {
      this.s.misses++;
      return null;
    }
    this.s.hits++;
    return hit;
  }

  /**
   * The entry of a URL a new message names, only while the store would answer it from its copy
   * (`freshUntil` after `now`); a hit only then, nothing counted otherwise (the URL is stored as new).
   */
  getFresh(scope: string, kind: VerifiedMedia["kind"], url: string, now: number): Remembered | null {
    const e = this.byScope.get(this.outer(scope, kind))?.get(url);
    const found = e && this.lru.peek(e);
    if (!found || found.freshUntil <= now) return null;
    this.s.hits++;
    return this.lru.get(e)!;
  }

  /** Whether the URL's entry has passed this isolate's policy (a URL found by its whole text is that URL); nothing counted or touched. */
  policyChecked(scope: string, kind: VerifiedMedia["kind"], url: string): boolean {
    const e = this.byScope.get(this.outer(scope, kind))?.get(url);
    return (e && this.lru.peek(e)?.policyChecked) === true;
  }

  /**
   * Remembers an item verified here, its URL checked against this isolate's policy, leased by the
   * store until `leaseUntil` and fresh until `freshUntil` (Date.now ms; 0: no lease, not fresh).
   * Where the URL's entry holds the same item (bytes and metadata), that entry stays, with this
   * answer's lease and freshness: the store renews a live lease
   * on every answer, so a fresh one is never shorter than a valid older one, and a fresh 0 means
   * the older lease is gone (a restarted store): returns the item the entry holds.
   */
  set(scope: string, kind: VerifiedMedia["kind"], url: string, media: VerifiedMedia, leaseUntil = 0, freshUntil = 0): VerifiedMedia {
    const e = this.byScope.get(this.outer(scope, kind))?.get(url);
    const kept = e && this.lru.get(e);
    if (kept && sameItem(kept.media, media)) {
      kept.policyChecked = true;
      kept.leaseUntil = leaseUntil;
      kept.freshUntil = freshUntil;
      return kept.media;
    }
    this.put(scope, kind, url, { media, policyChecked: true, leaseUntil, freshUntil });
    return media;
  }

  /** Adds an item verified elsewhere (a stored response's) unless the scope holds the URL: an entry of the isolate's own stays as it is. Its URL is checked at its first use. */
  seed(scope: string, kind: VerifiedMedia["kind"], url: string, media: VerifiedMedia): void {
    if (this.byScope.get(this.outer(scope, kind))?.has(url)) return;
    this.put(scope, kind, url, { media, policyChecked: false, leaseUntil: 0, freshUntil: 0 });
  }

  private put(scope: string, kind: VerifiedMedia["kind"], url: string, value: Remembered): void {
    const media = value.media;
    const outer = this.outer(scope, kind);
    const bytes = entryBytes(outer, url, media);
    // One item larger than a quarter would flush the rest for itself.
    if (bytes > this.maxBytes / 4) return;
    this.remove(outer, url);
    let inner = this.byScope.get(outer);
    if (!inner) this.byScope.set(outer, (inner = new Map()));
    const e: Entry = { outer, url };
    inner.set(url, e);
    this.lru.set(e, value, bytes);
    this.s.stores++;
  }

  /** Forgets an entry found stale (the store no longer holds its bytes). */
  drop(scope: string, kind: VerifiedMedia["kind"], url: string): void {
    if (this.remove(this.outer(scope, kind), url)) this.s.drops++;
  }

  stats(): MediaMemoStats {
    return { ...this.s, evictions: this.lru.evictions, entries: this.lru.size, bytes: this.lru.bytes, maxBytes: this.maxBytes };
  }

  private remove(outer: string, url: string): boolean {
    const e = this.byScope.get(outer)?.get(url);
    if (!e) return false;
    this.unindex(e);
    this.lru.delete(e);
    return true;
  }

  private unindex(e: Entry): void {
    const inner = this.byScope.get(e.outer)!;
    inner.delete(e.url);
    if (inner.size === 0) this.byScope.delete(e.outer);
  }
}
