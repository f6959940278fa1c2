/**
 * The media pipeline's parts (SSRF-safe fetcher, decode-service client, store URL signer), built once
 * per config in each isolate: the signing key's import and the clients are not per-request work.
 */
import { BAND_COUNT, bandWaitMs } from "../../admission/bands.ts";
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

/**
 * How long after its media are verified a request's first pick may still wait in the pool's
 * admission queue (its band's maxWaitMs), before its store URLs are signed: a lease relied on must
 * outlive that wait and the URL's lifetime.
 */
function longestAdmissionWaitMs(config: EdgeConfig): number {
  const admission = config.routing.admission;
  if (!admission.enabled) return 0;
  let longest = 0;
  for (let band = 0; band < BAND_COUNT; band++) longest = Math.max(longest, bandWaitMs(admission.maxWaitMs, band));
  return longest;
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
        leaseMarginMs: store.urlTtlSec * 1000 + longestAdmissionWaitMs(deps.config),
      },
      memo: new MediaMemo(),
    };
  }
  return built;
}
