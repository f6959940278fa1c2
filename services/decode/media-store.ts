/**
 * The regional media store's disk: files named by the SHA-256 of their bytes in one directory,
 * bounded by a per-item cap (enforced while spooling), a total of bytes and a count of items.
 * Each item is charged to the client label that stored it (the edge's `x-kvedge-client`); a label
 * holds at most `clientMaxBytes`, beyond which its own least recently used items go. When the
 * whole store is over a cap, the items go from the owner holding the most (bytes, or items for the
 * count cap), least recently used first: a client filling the store pays for it before anyone
 * else, so one client cannot evict the media of tenants holding less than it. Unlabelled items
 * (the edge knew no client) are one owner, not capped by `clientMaxBytes`.
 * Content addressing makes a put idempotent: the same bytes from two URLs are stored once (charged
 * to whoever stored them first). The owner is part of the file name (`<digest>@<label>`), so a
 * restarted service re-indexes the directory with each item's owner, oldest first by mtime, and
 * the caps hold again before it serves. Files are unlinked on eviction; a read already streaming
 * keeps its open descriptor, so eviction never cuts a transfer.
 *
 * A lease (`lease`, granted by `POST /v1/store` and `POST /v1/store/held`) is a promise not to evict an item before a
 * time: the edge then forwards signed URLs to it without asking again (src/edge/media.ts). Leased
 * items are bounded (`leases.maxBytes` and `maxItems` in all, `clientMaxBytes` and `clientMaxItems`
 * per owner, the unlabelled one included); past a bound a new lease is refused (0), never an old
 * one broken, and eviction passes over leased items,
 * so the store's bytes exceed `maxBytes` only while an item just put does not fit beside the leased
 * ones (at most the leased bytes over). Leases live in memory: a restarted store has none (when a
 * worker then fails to fetch a leased item, the edge asks the store about the request's leased
 * items, stores the lost ones again and sends the request once more).
 */
import { mkdir, readdir, rename, stat, unlink } from "node:fs/promises";
import path from "node:path";
import { MediaTooLargeError } from "../../src/media/errors.ts";

export interface MediaStoreStats {
  items: number;
  bytes: number;
  maxBytes: number;
  maxItems: number;
  /** Owners (client labels) holding items. */
  owners: number;
  puts: number;
  dedups: number;
  evictions: number;
  /** Items found on disk at start and kept (re-indexed within the caps). */
  restored: number;
  /** Items under lease, their bytes, and leases refused at a bound. */
  leased: number;
  leasedBytes: number;
  leasesRefused: number;
}

export interface MediaStoreLimits {
  maxBytes: number;
  maxItems: number;
  /** Most bytes one labelled client holds. */
  clientMaxBytes: number;
  /** Leases granted by `lease` (all 0, or leaseMs 0: none). */
  leases?: LeaseLimits;
  /** Clock of the leases (ms; tests). Default: performance.now. */
  now?: () => number;
}

export interface LeaseLimits {
  /** How long a lease lasts from its grant (or renewal); 0: no leases. */
  leaseMs: number;
  /** Most bytes, and items, under lease at once. */
  maxBytes: number;
  maxItems: number;
  /** Most leased bytes, and items, of those one owner holds (the unlabelled owner like any client). */
  clientMaxBytes: number;
  clientMaxItems: number;
}

const NO_LEASES: LeaseLimits = { leaseMs: 0, maxBytes: 0, maxItems: 0, clientMaxBytes: 0, clientMaxItems: 0 };

interface Lease {
  until: number;
  size: number;
  owner: string;
}

/** The owner of items stored without a client label. */
const UNLABELLED = "";
const FILE_NAME = /^([0-9a-f]{64})(?:@([A-Za-z0-9:._-]{1,80}))?$/;

interface Owner {
  bytes: number;
  /** digest → size, least recently used first. */
  items: Map<string, number>;
}

export class MediaStore {
  private readonly owners = new Map<string, Owner>();
  /** digest → owner label. */
  private readonly ownerOf = new Map<string, string>();
  private total = 0;
  private puts = 0;
  private dedups = 0;
  private evictions = 0;
  private restored = 0;
  /** digest → lease, in order of expiry (a renewal moves it to the end: every lease is leaseMs long). */
  private readonly leases = new Map<string, Lease>();
  private leasedBytes = 0;
  /** owner → its leased bytes and items. */
  private readonly leasedByOwner = new Map<string, { bytes: number; items: number }>();
  private leasesRefused = 0;
  private readonly leaseLimits: LeaseLimits;
  private readonly now: () => number;
  readonly dir: string;
  readonly limits: MediaStoreLimits;

  private constructor(dir: string, limits: MediaStoreLimits) {
    this.dir = dir;
    this.limits = limits;
    this.leaseLimits = limits.leases ?? NO_LEASES;
    this.now = limits.now ?? (() => performance.now());
  }

  /** Opens (creates) the directory and re-indexes the items an earlier run stored there, within the caps. */
  static async open(dir: string, limits: MediaStoreLimits): Promise<MediaStore> {
    await mkdir(dir, { recursive: true });
    const store = new MediaStore(dir, limits);
    const found = new Map<string, { owner: string; size: number; mtimeMs: number }>();
    for (const name of await readdir(dir)) {
      const m = FILE_NAME.exec(name);
      if (!m) continue;
      const s = await stat(path.join(dir, name)).catch(() => null);
      if (!s?.isFile()) continue;
      // Two files of one digest (two owners): one is kept, the other is a duplicate.
      if (found.has(m[1]!)) await unlink(path.join(dir, name)).catch(() => {});
      else found.set(m[1]!, { owner: m[2] ?? UNLABELLED, size: s.size, mtimeMs: s.mtimeMs });
    }
    for (const [digest, f] of [...found].sort((a, b) => a[1].mtimeMs - b[1].mtimeMs)) store.add(digest, f.owner, f.size);
    for (const owner of [...store.owners.keys()]) await store.evictWithinQuota(owner, null);
    await store.evictToCaps(null);
    store.restored = store.ownerOf.size;
    return store;
  }

  private file(digest: string, owner: string): string {
    if (!/^[0-9a-f]{64}$/.test(digest)) throw new TypeError("bad digest");
    return path.join(this.dir, owner === UNLABELLED ? digest : `${digest}@${owner}`);
  }

  /** The stored file of `digest` (marked used), or null when absent or evicted. */
  use(digest: string): { path: string; size: number } | null {
    const owner = this.ownerOf.get(digest);
    if (owner === undefined) return null;
    const o = this.owners.get(owner)!;
    const size = o.items.get(digest)!;
    o.items.delete(digest);
    o.items.set(digest, size);
    return { path: this.file(digest, owner), size };
  }

  has(digest: string): boolean {
    return this.ownerOf.has(digest);
  }

  /**
   * Leases a held item (renews its lease): it is not evicted for the next `leaseMs`. Returns the
   * lease's remaining ms, or 0 when the item is not held or a bound leaves no room for it.
   */
  lease(digest: string): number {
    const owner = this.ownerOf.get(digest);
    const { leaseMs, maxBytes, maxItems, clientMaxBytes, clientMaxItems } = this.leaseLimits;
    if (owner === undefined || leaseMs <= 0) return 0;
    const now = this.now();
    this.expireLeases(now);
    const size = this.owners.get(owner)!.items.get(digest)!;
    if (this.leases.has(digest)) this.leases.delete(digest);
    else {
      const ownerLeased = this.leasedByOwner.get(owner) ?? { bytes: 0, items: 0 };
      if (this.leases.size >= maxItems || this.leasedBytes + size > maxBytes || ownerLeased.items >= clientMaxItems || ownerLeased.bytes + size > clientMaxBytes) {
        this.leasesRefused++;
        return 0;
      }
      this.leasedBytes += size;
      this.leasedByOwner.set(owner, { bytes: ownerLeased.bytes + size, items: ownerLeased.items + 1 });
    }
    this.leases.set(digest, { until: now + leaseMs, size, owner });
    return leaseMs;
  }

  private expireLeases(now: number): void {
    for (const [digest, l] of this.leases) {
      if (l.until > now) return;
      this.endLease(digest, l);
    }
  }

  private endLease(digest: string, l: Lease): void {
    this.leases.delete(digest);
    this.leasedBytes -= l.size;
    const held = this.leasedByOwner.get(l.owner)!;
    if (held.items > 1) this.leasedByOwner.set(l.owner, { bytes: held.bytes - l.size, items: held.items - 1 });
    else this.leasedByOwner.delete(l.owner);
  }

  /**
   * Moves a spooled (and verified) file into the store under its digest, charged to `client`, then
   * evicts down to that client's quota and to the store's caps. An item above either byte cap is refused.
   */
  async put(spooled: string, digest: string, size: number, client: string | null): Promise<void> {
    this.puts++;
    if (this.ownerOf.has(digest)) {
      this.dedups++;
      this.use(digest);
      await unlink(spooled).catch(() => {});
      return;
    }
    const owner = client ?? UNLABELLED;
    const cap = owner === UNLABELLED ? this.limits.maxBytes : Math.min(this.limits.maxBytes, this.limits.clientMaxBytes);
    if (size > cap) {
      await unlink(spooled).catch(() => {});
      throw new MediaTooLargeError(cap, "url");
    }
    await rename(spooled, this.file(digest, owner));
    this.add(digest, owner, size);
    await this.evictWithinQuota(owner, digest);
    await this.evictToCaps(digest);
  }

  private add(digest: string, owner: string, size: number): void {
    let o = this.owners.get(owner);
    if (!o) this.owners.set(owner, (o = { bytes: 0, items: new Map() }));
    o.items.set(digest, size);
    o.bytes += size;
    this.ownerOf.set(digest, owner);
    this.total += size;
  }

  private async remove(digest: string, owner: string): Promise<void> {
    const o = this.owners.get(owner)!;
    const size = o.items.get(digest)!;
    o.items.delete(digest);
    o.bytes -= size;
    if (o.items.size === 0) this.owners.delete(owner);
    this.ownerOf.delete(digest);
    this.total -= size;
    this.evictions++;
    await unlink(this.file(digest, owner)).catch(() => {});
  }

  /** Oldest item of `owner` other than `keep` and not leased, or null. */
  private oldest(owner: string, keep: string | null): string | null {
    for (const d of this.owners.get(owner)?.items.keys() ?? []) if (d !== keep && !this.leases.has(d)) return d;
    return null;
  }

  private async evictWithinQuota(owner: string, keep: string | null): Promise<void> {
    if (owner === UNLABELLED) return;
    this.expireLeases(this.now());
    for (;;) {
      const o = this.owners.get(owner);
      if (!o || o.bytes <= this.limits.clientMaxBytes) return;
      const d = this.oldest(owner, keep);
      if (d === null) return;
      await this.remove(d, owner);
    }
  }

  /** Over a cap: the owner holding the most (bytes, or items) gives up its least recently used item. */
  private async evictToCaps(keep: string | null): Promise<void> {
    this.expireLeases(this.now());
    for (;;) {
      const overBytes = this.total > this.limits.maxBytes;
      if (!overBytes && this.ownerOf.size <= this.limits.maxItems) return;
      let victim: string | null = null;
      let most = -1;
      for (const [label, o] of this.owners) {
        const held = overBytes ? o.bytes : o.items.size;
        if (held > most && this.oldest(label, keep) !== null) {
          most = held;
          victim = label;
        }
      }
      if (victim === null) return;
      await this.remove(this.oldest(victim, keep)!, victim);
    }
  }

  get stats(): MediaStoreStats {
    this.expireLeases(this.now());
    return {
      items: this.ownerOf.size,
      bytes: this.total,
      maxBytes: this.limits.maxBytes,
      maxItems: this.limits.maxItems,
      owners: this.owners.size,
      puts: this.puts,
      dedups: this.dedups,
      evictions: this.evictions,
      restored: this.restored,
      leased: this.leases.size,
      leasedBytes: this.leasedBytes,
      leasesRefused: this.leasesRefused,
    };
  }
}
