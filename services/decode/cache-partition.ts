/**
 * The store's caches of earlier work (a URL's last answer, a probe of some bytes, a download or
 * probe in flight) answer a call only from what calls of the same client label put there. A hit
 * answers faster than a miss, so a cache shared between labels would tell one client that another
 * sent the same URL or bytes recently. The label is the edge's (`x-kvedge-client`, read only after
 * the edge's token: edge-call.ts); unlabelled calls are one partition. Stored bytes stay shared by
 * content (media-store.ts): a caller of another label still waits for its own download and
 * verification, and gets the same answer whether the bytes were held or not.
 */

/** The cache key of `key` for calls of `client` (a label has no newline, so partitions never meet). */
export function partitioned(client: string | null, key: string): string {
  return `${client ?? ""}\n${key}`;
}
