/**
 * Media identity at the edge: for each image or video of a request (prompt order) find its content
 * identity and the metadata the layout needs — images by an SSRF-safe fetch (xxh3 of the raw bytes,
 * width/height from the header), videos through the regional decode service. Failures never fail
 * the request: the item stays unresolved and the request falls back to text-prefix routing with a
 * named reason. Only URLs the SSRF policy refuses outright are the client's error (400), because
 * forwarding them would let the worker fetch them instead.
 */
import { MediaError, isMediaError } from "../media/errors.ts";
import { identifyImage } from "../media/image-identity.ts";
import type { SafeFetcher } from "../media/safe-fetch.ts";
import type { DecodeClient } from "../media/decode-client.ts";
import { mediaIdentityHash } from "../media/identity-record.ts";
import type { MediaItem } from "../layout/index.ts";

export interface MediaPartRef {
  kind: "image" | "video" | "audio";
  url: string;
  param: string;
}

export interface ResolvedMedia {
  items: MediaItem[];
  /** First reason an item could not be resolved (null = all resolved). */
  unresolved: { reason: string; detail: string } | null;
}

/** Policy refusals that must reach the client: the worker must never be asked to fetch these. */
const CLIENT_ERRORS = new Set(["bad_url", "bad_scheme", "blocked_address", "credentials_in_url", "bad_redirect", "bad_data_url"]);

export interface MediaDeps {
  fetcher: SafeFetcher;
  decode: DecodeClient;
  maxImageBytes: number;
}

export async function resolveMedia(parts: readonly MediaPartRef[], contractDigest: string, deps: MediaDeps): Promise<ResolvedMedia> {
  let unresolved: ResolvedMedia["unresolved"] = null;
  const note = (reason: string, detail: string) => {
    unresolved ??= { reason, detail };
  };
  const items = await Promise.all(
    parts.map(async (p): Promise<MediaItem> => {
      if (p.kind === "image") {
        try {
          const res = await deps.fetcher.open(p.url, { param: p.param });
          const id = await identifyImage(res.body, { maxBytes: deps.maxImageBytes, param: p.param });
          const metadata = { modality: "image" as const, width: id.header.width, height: id.header.height };
          const hash = BigInt("0x" + mediaIdentityHash({ contentHash: id.contentHash, metadata, contractDigest }));
          return { modality: "image", hash, probe: { width: metadata.width, height: metadata.height } };
        } catch (err) {
          if (err instanceof MediaError && CLIENT_ERRORS.has(err.reason)) throw err;
          note("unresolved_media", isMediaError(err) ? `${err.reason}: ${err.message}` : String(err));
          return { modality: "image", hash: null, probe: null };
        }
      }
      if (p.kind === "video") {
        // The decode service fetches the video itself; check the URL here so it cannot be used to
        // reach private addresses either.
        deps.fetcher.checkUrl(p.url.startsWith("data:") ? "https://inline.invalid/" : p.url, p.param);
        const out = await deps.decode.probe({ url: p.url });
        if (!out.ok) {
          note(out.reason, out.detail);
          return { modality: "video", hash: null, probe: null };
        }
        const r = out.probe;
        if (r.avgFps === null) {
          note("unprobeable_video", "decoder reports no frame rate");
          return { modality: "video", hash: null, probe: null };
        }
        const metadata = { modality: "video" as const, width: r.width, height: r.height, totalFrames: r.totalFrames, avgFps: r.avgFps };
        const hash = BigInt("0x" + mediaIdentityHash({ contentHash: r.contentHash, metadata, contractDigest }));
        return { modality: "video", hash, probe: { totalFrames: r.totalFrames, avgFps: r.avgFps, width: r.width, height: r.height } };
      }
      note("audio", "audio input");
      return { modality: "image", hash: null, probe: null };
    }),
  );
  return { items, unresolved };
}
