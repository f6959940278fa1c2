/**
 * `GET /admin/workers/<id>/local-hashes` a page at a time: a worker's local hashes (16 lower-case
 * hex digits, so string order is numeric order) in ascending order after a cursor. Each shard
 * object answers its smallest `limit` above the cursor; the edge merges them and keeps the
 * smallest `limit`, which are then the pool's (every shard sent all of its own that could be).
 * The order is stable while the index changes: a block added or removed after the cursor shows or
 * not on a later page, nothing before it moves.
 */

/** Hashes per page at most, and by default. */
export const MAX_LOCAL_HASH_PAGE = 10_000;
export const DEFAULT_LOCAL_HASH_PAGE = 1_000;

export interface LocalHashPage {
  /** Ascending, at most the page's limit. */
  hashes: string[];
  /** More hashes above the last one. */
  more: boolean;
}

/** The `limit` smallest of `all` above `after` (null: from the start), in O(n log limit) and O(limit) memory. */
export function localHashPage(all: Iterable<string>, after: string | null, limit: number): LocalHashPage {
  const kept: string[] = [];
  let more = false;
  const trim = (): void => {
    kept.sort();
    if (kept.length > limit) {
      kept.length = limit;
      more = true;
    }
  };
  for (const h of all) {
    if (after !== null && h <= after) continue;
    kept.push(h);
    if (kept.length >= 2 * limit) trim();
  }
  trim();
  return { hashes: kept, more };
}

/** Shards' pages → the pool's page and the cursor of the next one (null: this was the last). */
export function mergeLocalHashPages(pages: readonly LocalHashPage[], limit: number): { localHashes: string[]; nextCursor: string | null } {
  const all = [...new Set(pages.flatMap((p) => p.hashes))].sort();
  const localHashes = all.slice(0, limit);
  const more = all.length > limit || pages.some((p) => p.more);
  return { localHashes, nextCursor: more && localHashes.length > 0 ? localHashes[localHashes.length - 1]! : null };
}
