/**
 * The regional media store's disk: files named by the SHA-256 of their bytes in one directory,
 * bounded by a per-item cap (enforced while spooling) and a total cap (least recently used items
 * are evicted first; a hit or a served read counts as a use). Content addressing makes a put
 * idempotent: the same bytes from two URLs are stored once. Files are unlinked on eviction; a read
 * already streaming keeps its open descriptor, so eviction never cuts a transfer.
 */
import { mkdir, readdir, rename, unlink } from "node:fs/promises";
import path from "node:path";

export interface MediaStoreStats {
  items: number;
  bytes: number;
  maxBytes: number;
  puts: number;
  dedups: number;
  evictions: number;
}

export class MediaStore {
  private readonly items = new Map<string, number>(); // digest → size, in LRU order (oldest first)
  private total = 0;
  private puts = 0;
  private dedups = 0;
  private evictions = 0;
  readonly dir: string;
  readonly maxBytes: number;

  private constructor(dir: string, maxBytes: number) {
    this.dir = dir;
    this.maxBytes = maxBytes;
  }

  /** Opens (creates) the directory. The index lives in memory: files left by an earlier run are removed, so the caps hold. */
  static async open(dir: string, maxBytes: number): Promise<MediaStore> {
    await mkdir(dir, { recursive: true });
    for (const name of await readdir(dir)) if (/^[0-9a-f]{64}$/.test(name)) await unlink(path.join(dir, name)).catch(() => {});
    return new MediaStore(dir, maxBytes);
  }

  private file(digest: string): string {
    if (!/^[0-9a-f]{64}$/.test(digest)) throw new TypeError("bad digest");
    return path.join(this.dir, digest);
  }

  /** The stored file of `digest` (marked used), or null when absent or evicted. */
  use(digest: string): { path: string; size: number } | null {
    const size = this.items.get(digest);
    if (size === undefined) return null;
    this.items.delete(digest);
    this.items.set(digest, size);
    return { path: this.file(digest), size };
  }

  has(digest: string): boolean {
    return this.items.has(digest);
  }

  /** Moves a spooled file into the store under its digest, then evicts down to the total cap. */
  async put(spooled: string, digest: string, size: number): Promise<void> {
    this.puts++;
    if (this.items.has(digest)) {
      this.dedups++;
      this.use(digest);
      await unlink(spooled).catch(() => {});
      return;
    }
    await rename(spooled, this.file(digest));
    this.items.set(digest, size);
    this.total += size;
    await this.evict(digest);
  }

  private async evict(keep: string): Promise<void> {
    for (const [d, size] of this.items) {
      if (this.total <= this.maxBytes) break;
      if (d === keep) continue;
      this.items.delete(d);
      this.total -= size;
      this.evictions++;
      await unlink(this.file(d)).catch(() => {});
    }
  }

  get stats(): MediaStoreStats {
    return { items: this.items.size, bytes: this.total, maxBytes: this.maxBytes, puts: this.puts, dedups: this.dedups, evictions: this.evictions };
  }
}
