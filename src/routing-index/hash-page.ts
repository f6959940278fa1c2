/**
 * `GET /admin/workers/<id>/local-hashes` a page at a time: a worker's local hashes (16 lower-case
 * hex digits, so string order is numeric order) in ascending order after a cursor. Each shard
 * object answers its smallest `limit` above the cursor; the edge merges them and keeps the
 * smallest `limit`, which are then the pool's (every shard sent all of its own that could be).
 * The order is stable while the index changes: a block added or removed after the cursor shows or
 * not on a later page, nothing before it moves. The hashes are a multiset (equal blocks in two
 * cache namespaces, or two shards, repeat): a page never ends inside a run of equal hashes, so it
 * can exceed `limit` by the copies of its last hash.
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
    const end = pageEnd(kept, limit);
    if (end < kept.length) {
      kept.length = end;
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
  const all = pages.flatMap((p) => p.hashes).sort();
  const localHashes = all.slice(0, pageEnd(all, limit));
  const more = all.length > localHashes.length || pages.some((p) => p.more);
  return { localHashes, nextCursor: more && localHashes.length > 0 ? localHashes[localHashes.length - 1]! : null };
}

/** Where a page of sorted hashes ends: after `limit`, and after every copy of its last hash. */
function pageEnd(sorted: readonly string[], limit: number): number {
  let end = Math.min(limit, sorted.length);
  while (end > 0 && end < sorted.length && sorted[end] === sorted[end - 1]) end++;
  return end;
}
