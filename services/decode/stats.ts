/** What the decode service counts, and how a probe or URL request was answered (X-Cache). */

/** miss: fetched in full; hit: probe cached by digest; revalidated: the origin answered 304; fresh: reused
 * without contacting the origin (HTTP freshness, http-freshness.ts); shared: joined a concurrent request's. */
export type CacheOutcome = "miss" | "hit" | "revalidated" | "fresh" | "shared";

export interface DecodeServiceStats {
  /** Edge calls answered, per route (`POST /v1/store`, `POST /v1/probe`, `POST /v1/store/held`), whatever the outcome. */
  storeCalls: number;
  probeCalls: number;
  heldChecks: number;
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

export function emptyStats(): DecodeServiceStats {
  return { storeCalls: 0, probeCalls: 0, heldChecks: 0, probes: 0, fetches: 0, cacheHits: 0, revalidated: 0, fresh: 0, shared: 0, downloadsPeak: 0, downloadsCancelled: 0, mediaServed: 0, mediaRefused: 0, failuresReused: 0 };
}
