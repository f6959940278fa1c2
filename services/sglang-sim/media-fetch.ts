/**
 * Loads one media item's bytes the way SGLang's `load_image` / `load_video` accept them
 * (sgl-project/sglang python/sglang/srt/utils/common.py @9d147fd L1586-1747): http(s) URLs are fetched
 * (redirects followed, REQUEST_TIMEOUT: 3 s images, 10 s videos), `data:` URLs are base64-decoded
 * strictly after the first comma, and any other string is strict bare base64. Unlike SGLang the
 * simulator never reads its own disk (`file://`, paths): those are refused.
 *
 * The simulator is a trusted local component, but fetches still go through the SSRF-safe fetcher
 * with a byte cap and a deadline; loopback is allowlisted so tests and the local fleet can serve
 * media from 127.0.0.1. Locked down (`media.lockedDown`, the local fleet's default) it mirrors a
 * production worker that can reach only the media store: any other URL is refused. Fetches from
 * `media.storeUrl` carry the worker's media credential (Basic auth, as python-requests sends a ~/.netrc entry).
 * Every item loaded is recorded by the SHA-256 of its bytes (`/debug/media`), so tests can prove
 * the worker used exactly the bytes the edge verified.
 */
import { decodeBase64Strict } from "../../src/media/data-url.ts";
import { isMediaError } from "../../src/media/errors.ts";
import { SafeFetcher } from "../../src/media/safe-fetch.ts";
import { nodeResolver, pinnedFetch } from "../decode/pinned-fetch.ts";
import { sha256Of } from "./media-hash.ts";
import type { SimOptions } from "./options.ts";
import { SglangValueError } from "./sglang-errors.ts";

export type MediaKind = "image" | "video";

export interface MediaLoader {
  load(kind: MediaKind, item: string): Promise<Uint8Array>;
}

const LOCAL_PATH = /^(file:|\/|\.{1,2}\/|[A-Za-z]:[\\/])/;
const IMAGE_PATH_SUFFIX = /\.(png|jpe?g|webp|gif)$/i;

export interface LoadedMedia {
  seq: number;
  kind: MediaKind;
  /** SHA-256 of the bytes the worker processed. */
  digest: string;
  byteLength: number;
  via: "store" | "url" | "data" | "base64";
}

/** The last items loaded (debug only; bounded). */
const loaded: LoadedMedia[] = [];
let loadSeq = 0;
export function recentlyLoadedMedia(): readonly LoadedMedia[] {
  return loaded;
}

function record(kind: MediaKind, bytes: Uint8Array, via: LoadedMedia["via"]): Uint8Array {
  loaded.push({ seq: ++loadSeq, kind, digest: sha256Of(bytes).toString("hex"), byteLength: bytes.length, via });
  if (loaded.length > 1024) loaded.shift();
  return bytes;
}

export function createMediaLoader(media: SimOptions["media"]): MediaLoader {
  // A store URL alone only says where to prove who the worker is; --locked-down-media limits fetches to it.
  const locked = media.lockedDown;
  const store = media.storeUrl === null ? null : new URL(media.storeUrl);
  const storeAuth = media.storeCredential === null ? null : `Basic ${Buffer.from(media.storeCredential).toString("base64")}`;
  // Locked down: the only host:port the fetcher may reach is the store's.
  const allowlist = locked ? (store ? [store.host] : []) : media.allowlist;
  const policy = { maxBytes: media.maxBytes, allowlist, maxRedirects: locked ? 0 : 10, dataUrlBase64: "strict" as const };
  const fetchers: Record<MediaKind, SafeFetcher> = {
    image: new SafeFetcher({ ...policy, timeoutMs: media.imageTimeoutMs }, { fetch: pinnedFetch, resolve: nodeResolver }),
    video: new SafeFetcher({ ...policy, timeoutMs: media.videoTimeoutMs }, { fetch: pinnedFetch, resolve: nodeResolver }),
  };
  return {
    async load(kind, item) {
      const what = `Failed to load ${kind}`;
      if (/^(https?|data):/i.test(item)) {
        const isData = /^data:/i.test(item);
        if (locked && !isData && !(store && fromStore(item, store))) {
          throw new SglangValueError(`${what}: this worker fetches media only from its media store`);
        }
        // To the store, the worker proves who it is (the store serves a URL only to the worker it names).
        const headers = storeAuth && store && !isData && fromStore(item, store) ? { authorization: storeAuth } : undefined;
        try {
          return record(kind, (await fetchers[kind].fetchBytes(item, headers ? { headers } : {})).bytes, isData ? "data" : locked ? "store" : "url");
        } catch (e) {
          if (isMediaError(e)) throw new SglangValueError(`${what}: ${e.message}`);
          throw e;
        }
      }
      if (LOCAL_PATH.test(item) || (kind === "image" && IMAGE_PATH_SUFFIX.test(item))) {
        throw new SglangValueError(`${what}: the simulator does not read media from its own disk (${item.slice(0, 80)})`);
      }
      if (item.length > Math.ceil((media.maxBytes * 4) / 3) + 4) throw new SglangValueError(`${what}: media exceeds ${media.maxBytes} bytes`);
      try {
        return record(kind, decodeBase64Strict(item), "base64");
      } catch {
        throw new SglangValueError(`${what}: Invalid base64-encoded string`);
      }
    },
  };
}

function fromStore(item: string, store: URL): boolean {
  try {
    const u = new URL(item);
    return u.origin === store.origin && u.pathname.startsWith("/v1/media/") && u.username === "" && u.password === "";
  } catch {
    return false;
  }
}
