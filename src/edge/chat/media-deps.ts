/**
 * The media pipeline's parts (SSRF-safe fetcher, decode-service client, store URL signer), built once
 * per config in each isolate: the signing key's import and the clients are not per-request work.
 */
import type { EdgeConfig } from "../../config/config.ts";
import { DecodeClient } from "../../media/decode-client.ts";
import { SafeFetcher } from "../../media/safe-fetch.ts";
import { importMediaUrlKey } from "../../media/signed-url.ts";
import { storeSigner, type MediaDeps } from "../media.ts";
import { DEFAULT_MEDIA_MEMO_BYTES, MediaMemo, type MediaMemoStats } from "../media-memo.ts";

/** Outbound HTTP as the Worker makes it (injected: functions/ passes the global fetch). */
export type EdgeFetch = (input: string, init: RequestInit) => Promise<Response>;

let built: { config: EdgeConfig; deps: MediaDeps; memo: MediaMemo } | null = null;

export function mediaDeps(deps: { config: EdgeConfig; fetch: EdgeFetch }): MediaDeps {
  return builtFor(deps).deps;
}

/** The media items verified in this isolate under this config (a new config starts a new memo: its policy decided them). */
export function mediaMemo(deps: { config: EdgeConfig; fetch: EdgeFetch }): MediaMemo {
  return builtFor(deps).memo;
}

/** What the current config's memo holds (an empty one before the first media request). */
export function mediaMemoStats(): MediaMemoStats {
  return built?.memo.stats() ?? { hits: 0, misses: 0, stores: 0, drops: 0, evictions: 0, entries: 0, bytes: 0, maxBytes: DEFAULT_MEDIA_MEMO_BYTES };
}

function builtFor(deps: { config: EdgeConfig; fetch: EdgeFetch }): NonNullable<typeof built> {
  if (built?.config !== deps.config) {
    const store = deps.config.mediaStore;
    const decode = new DecodeClient(deps.config.decode, (u, i) => deps.fetch(u, i));
    const key = decode.configured && store.urlKey && store.publicUrl ? importMediaUrlKey(store.urlKey) : null;
    key?.catch(() => undefined);
    built = {
      config: deps.config,
      deps: {
        fetcher: new SafeFetcher(deps.config.media, { fetch: (url, init) => deps.fetch(url, init) }),
        decode,
        inlineMaxBytes: store.inlineMaxBytes,
        sign: key ? storeSigner(store.publicUrl!, key, store.urlTtlSec) : null,
        forwardClientUrls: store.forwardClientUrls,
        leaseMarginMs: store.urlTtlSec * 1000,
      },
      memo: new MediaMemo(),
    };
  }
  return built;
}
