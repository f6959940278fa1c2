/**
 * Media at the edge: every image and video of a request is resolved to bytes the edge (or the
 * regional media store on its behalf) has verified, and only those reach the worker. For each item
 * (prompt order) this yields what the worker receives and the item's content identity:
 * - client `data:` URLs: decoded and hashed here; forwarded as received when SGLang decodes them
 *   to the same bytes, else re-encoded from the bytes hashed; videos probed by the decode service;
 * - http(s) URLs with a media store configured: the store fetches them once (SSRF-safe, pinned
 *   DNS), keeps the bytes under their SHA-256 and describes them; the worker the request is
 *   routed to gets a short-lived store URL for exactly those bytes, signed for that worker only;
 * - http(s) URLs without a store: images are fetched here and forwarded inline (up to a size cap);
 *   videos are refused.
 * A URL the edge cannot turn into verified bytes is the client's 400 (OpenAI error shape), on
 * every path, whatever the routing outcome: a worker never receives a client URL, unless the
 * operator opted into `KVEDGE_FORWARD_CLIENT_URLS` (unsafe: the worker fetches it itself). A video the
 * decoder cannot read is the client's 4xx too, and a data: video the decode service could not
 * check (not configured: 400; unreachable, overloaded: 503) is not forwarded either (workers get
 * only media the store could verify); a probed video without a frame rate only costs exact routing.
 */
import { MediaError, MediaStoreUnavailableError, MediaTooLargeError, isMediaError, type MediaErrorReason } from "../media/errors.ts";
import { UpstreamError } from "../api/errors.ts";
import { identifyImage } from "../media/image-identity.ts";
import { encodeBase64, isDataUrl, parseDataUrl } from "../media/data-url.ts";
import type { SafeFetcher } from "../media/safe-fetch.ts";
import type { DecodeCallOptions, DecodeClient, HeldOutcome } from "../media/decode-client.ts";
import { mediaIdentityHash, type MediaMetadata } from "../media/identity-record.ts";
import { signMediaPath } from "../media/signed-url.ts";
import type { MediaItem } from "../layout/index.ts";
import { MAX_HELD_DIGESTS } from "../media/store-result.ts";
import type { MediaMemo, Remembered } from "./media-memo.ts";
import { sha256 } from "../util/hash.ts";
import { bytesToHex } from "../util/hex.ts";

export interface MediaPartRef {
  kind: "image" | "video" | "audio";
  url: string;
  param: string;
}

/** One media item as the worker will receive it, and what identifies it. */
export interface VerifiedMedia {
  kind: "image" | "video" | "audio";
  /**
   * What goes into image_data / video_data as it is for every worker: a data: URL (or the client's
   * URL, opted in). null for audio and for stored items, whose URL is signed per worker (`stored`).
   */
  forward: string | null;
  /** Stored in the media store: the worker it is routed to gets a store URL signed for it (workerForwards). */
  stored: boolean;
  /** SHA-256 of the bytes behind `forward` or the store URL (null for audio). */
  digest: string | null;
  /** Metadata the layout needs; null when it could not be read (routing then falls back). */
  metadata: MediaMetadata | null;
  /** Why `metadata` is missing. */
  unresolved: { reason: string; detail: string } | null;
}

export interface MediaDeps {
  fetcher: SafeFetcher;
  decode: DecodeClient;
  /** Images fetched by the edge itself: cap on the bytes (and on what is inlined). */
  inlineMaxBytes: number;
  /** Signs store URLs for one worker (null when no store is configured). */
  sign: MediaSigner | null;
  forwardClientUrls: boolean;
  /**
   * A remembered stored item is forwarded without asking the store while its lease (the store's
   * promise to keep it, answered by `POST /v1/store` and `/v1/store/held`) has more than this left: the longest a request may
   * wait for admission before its URLs are signed, plus the longest a worker may fetch a signed URL
   * (`mediaStore.urlTtlSec`). Absent: the store is asked every turn.
   */
  leaseMarginMs?: number;
}

/**
 * Whose request the media belongs to: the media store gives each client label at most a share of
 * its slots (docs/media.md Fair shares), and `signal` ends the request's calls when it has gone.
 * `traceparent`: the request's trace context at the edge, sent with each media store call.
 */
export interface MediaCaller {
  client: string | null;
  signal: AbortSignal | null;
  traceparent?: string | null;
}

/**
 * A store URL of `digest` for worker `workerId` only (signed-url.ts): the URL itself while one
 * signed earlier is still kept (no await), else its signing. `nowSec`: the time on the signer's
 * clock (whole seconds), read once for all of a request's items and passed to each call (a clock
 * read per item was most of what a conversation's earlier items cost here in workerd); a call
 * without it reads the clock itself.
 */
export interface MediaSigner {
  (digest: string, workerId: string, nowSec?: number): string | Promise<string>;
  nowSec(): number;
}

/** Signed URLs a signer keeps (cleared when full): a conversation's earlier items are not signed again on every turn. */
const SIGNED_URLS_KEPT = 4096;

/** Store URLs signed in this isolate (a work counter). */
let signatures = 0;

export function storeSignatures(): number {
  return signatures;
}

/**
 * Builds the signer for store URLs as workers reach them. A URL signed for a worker is given again
 * while at least three quarters of its lifetime remain, so the worker always has most of `ttlSec`
 * and a URL is valid at most `ttlSec` after it was signed (what bounds its replay); kept per worker,
 * then per digest (the digest strings of remembered items are the same objects every turn).
 */
export function storeSigner(publicUrl: string, key: Promise<CryptoKey>, ttlSec: number, nowMs: () => number = Date.now): MediaSigner {
  const base = publicUrl.replace(/\/+$/, "");
  const signed = new Map<string, Map<string, { url: string; exp: number }>>();
  let kept = 0;
  const sign = async (digest: string, workerId: string, exp: number): Promise<string> => {
    const url = base + (await signMediaPath(await key, digest, exp, workerId));
    signatures++;
    if (kept >= SIGNED_URLS_KEPT) {
      signed.clear();
      kept = 0;
    }
    let forWorker = signed.get(workerId);
    if (!forWorker) signed.set(workerId, (forWorker = new Map()));
    if (!forWorker.has(digest)) kept++;
    forWorker.set(digest, { url, exp });
    return url;
  };
  const nowSec = (): number => Math.floor(nowMs() / 1000);
  const signer = (digest: string, workerId: string, now = nowSec()): string | Promise<string> => {
    const found = signed.get(workerId)?.get(digest);
    if (found && found.exp - now >= (ttlSec * 3) / 4) return found.url;
    return sign(digest, workerId, now + ttlSec);
  };
  return Object.assign(signer, { nowSec });
}

/** True when the request's media must be signed for the worker it goes to (the body differs per worker). */
export function needsWorkerForwards(media: readonly VerifiedMedia[]): boolean {
  return media.some((m) => m.stored);
}

/** image_data and video_data as worker `workerId` receives them (prompt order); awaits only URLs signed now. */
export async function workerForwards(media: readonly VerifiedMedia[], sign: MediaSigner | null, workerId: string): Promise<{ imageData: string[]; videoData: string[] }> {
  const urls: (string | Promise<string>)[] = new Array(media.length);
  let pending = false;
  let now: number | undefined;
  for (let i = 0; i < media.length; i++) {
    const m = media[i]!;
    const u = m.stored ? sign!(m.digest!, workerId, (now ??= sign!.nowSec())) : m.forward!;
    if (u instanceof Promise) pending = true;
    urls[i] = u;
  }
  const all = pending ? await Promise.all(urls) : (urls as string[]);
  const imageData: string[] = [];
  const videoData: string[] = [];
  for (let i = 0; i < media.length; i++) {
    const kind = media[i]!.kind;
    if (kind === "image") imageData.push(all[i]!);
    else if (kind === "video") videoData.push(all[i]!);
  }
  return { imageData, videoData };
}

const MIME: Record<string, string> = { png: "image/png", jpeg: "image/jpeg", webp: "image/webp", gif: "image/gif", bmp: "image/bmp" };

/** The store's refusals of the media itself keep their reason; its own trouble is named as such. */
const STORE_REASONS = new Set<MediaErrorReason>(["bad_url", "bad_scheme", "blocked_address", "credentials_in_url", "too_many_redirects", "bad_redirect", "dns_failed", "fetch_failed", "http_status", "timeout", "unknown_format", "truncated", "corrupt", "too_many_pixels", "unsupported_format", "unprobeable_media"]);

function storeError(p: MediaPartRef, out: { reason: string; detail: string; status: number | null; code: string | null }): MediaError | MediaTooLargeError | MediaStoreUnavailableError {
  if (out.reason === "decode_media_rejected") {
    if (out.status === 413) return new MediaTooLargeError(Number(/(\d+)-byte/.exec(out.detail)?.[1] ?? 0), p.param);
    const reason = out.code?.startsWith("media_") ? (out.code.slice(6) as MediaErrorReason) : "fetch_failed";
    return new MediaError(STORE_REASONS.has(reason) ? reason : "fetch_failed", `The ${p.kind} could not be fetched: ${out.detail}`, p.param);
  }
  return new MediaStoreUnavailableError(`The ${p.kind} could not be stored for the worker (${out.reason}); it was not forwarded. Retry later.`, p.param);
}

/** URLs checked against the policy in this isolate (a work counter: a conversation's remembered items are not checked again). */
let policyChecks = 0;

export function mediaPolicyChecks(): number {
  return policyChecks;
}

/** What the policy refuses outright (data: URLs when off, the SSRF rules on a URL), before anyone connects. */
function precheck(p: MediaPartRef, deps: MediaDeps): void {
  if (p.kind === "audio") return;
  policyChecks++;
  if (isDataUrl(p.url)) {
    if (!deps.fetcher.policy.allowDataUrls) throw new MediaError("bad_scheme", "data: URLs are not allowed.", p.param);
  } else deps.fetcher.checkUrl(p.url, p.param);
}

/**
 * One item, after precheck; `stored(leaseMs, freshMs)`: the store's answer for the item it stored
 * (ms from its answer: its lease, and how long it would answer the URL from its copy).
 */
async function resolveOne(p: MediaPartRef, deps: MediaDeps, call: Required<DecodeCallOptions>, stored: (leaseMs: number, freshMs: number) => void): Promise<VerifiedMedia> {
  if (p.kind === "audio") return { kind: "audio", forward: null, stored: false, digest: null, metadata: null, unresolved: { reason: "audio", detail: "audio input" } };
  const policy = deps.fetcher.policy;

  if (isDataUrl(p.url)) {
    const d = parseDataUrl(p.url, { maxBytes: policy.maxBytes, base64Mode: policy.dataUrlBase64, param: p.param });
    // SGLang checks `startswith("data:")` and strictly base64-decodes after the first comma; a URL
    // it would read differently (leading space, upper-case scheme, forgiving base64) is re-encoded.
    const forward = d.sglangCompatible && p.url.startsWith("data:") ? p.url : `data:${d.mimeType};base64,${encodeBase64(d.bytes)}`;
    if (p.kind === "image") {
      const id = await identifyImage(d.bytes, { maxBytes: policy.maxBytes, param: p.param });
      return { kind: "image", forward, stored: false, digest: id.contentDigest, metadata: { modality: "image", width: id.header.width, height: id.header.height }, unresolved: null };
    }
    // No bytes cannot be a video for any decoder.
    if (d.bytes.length === 0) throw new MediaError("truncated", "Video is empty.", p.param);
    const digest = bytesToHex(sha256(d.bytes));
    const out = await deps.decode.probe({ bytes: d.bytes }, call);
    if (!out.ok) {
      // A video the decoder refuses is not forwarded: workers get only media the store could verify.
      if (out.reason === "decode_media_rejected") throw new MediaError("unprobeable_media", `The video could not be probed: ${out.detail}`, p.param);
      // Cancelled (the request is ending), or opted in to forwarding unverified media: only exact routing is lost.
      if (out.reason === "decode_cancelled" || deps.forwardClientUrls) return { kind: "video", forward, stored: false, digest, metadata: null, unresolved: { reason: out.reason, detail: out.detail } };
      if (out.reason === "decode_not_configured") throw new MediaError("store_unavailable", "Videos are verified by the regional media store, which is not configured; this video was not forwarded.", p.param);
      throw new MediaStoreUnavailableError(`The video could not be verified (${out.reason}); it was not forwarded. Retry later.`, p.param);
    }
    return videoItem({ forward, stored: false }, digest, out.probe);
  }

  if (deps.sign) {
    const out = await deps.decode.store(p.url, p.kind, call);
    if (!out.ok) {
      const err = storeError(p, out);
      // Opted in to forwarding URLs: the store's trouble only costs exact routing (policy refusals still stop).
      if (deps.forwardClientUrls && !(err instanceof MediaError && POLICY_REFUSALS.has(err.reason))) {
        return { kind: p.kind, forward: p.url, stored: false, digest: null, metadata: null, unresolved: { reason: out.reason, detail: out.detail } };
      }
      throw err;
    }
    const r = out.result;
    stored(r.leaseMs ?? 0, r.freshMs ?? 0);
    // As for data: URLs: no bytes are no video (the worker would only refuse it later).
    if (p.kind === "video" && r.byteLength === 0) throw new MediaError("truncated", "Video is empty.", p.param);
    // The store URL is signed later, for the worker the request is routed to (workerForwards).
    const via = deps.forwardClientUrls ? { forward: p.url, stored: false } : { forward: null, stored: true };
    if (p.kind === "image") {
      if (!r.image) throw new MediaError("corrupt", "The media store returned no image size.", p.param);
      return { kind: "image", ...via, digest: r.digest, metadata: { modality: "image", width: r.image.width, height: r.image.height }, unresolved: null };
    }
    // The store refuses a video it cannot probe (4xx); an answer without a probe is refused the same way.
    if (!r.probe) throw new MediaError("unprobeable_media", "The media store returned no probe of the video.", p.param);
    return videoItem(via, r.digest, r.probe);
  }

  if (p.kind === "video") {
    if (deps.forwardClientUrls) return { kind: "video", forward: p.url, stored: false, digest: null, metadata: null, unresolved: { reason: "decode_not_configured", detail: "no media store" } };
    throw new MediaError("store_unavailable", "Video URLs need the regional media store, which is not configured; send the video as a data: URL.", p.param);
  }
  // No store: the edge fetches the image itself and forwards exactly those bytes inline.
  try {
    const res = await deps.fetcher.open(p.url, { param: p.param, ...(call.signal ? { signal: call.signal } : {}) });
    const id = await identifyImage(res.body, { maxBytes: Math.min(policy.maxBytes, deps.inlineMaxBytes), param: p.param });
    const forward = deps.forwardClientUrls ? p.url : `data:${MIME[id.header.format] ?? "application/octet-stream"};base64,${encodeBase64(id.bytes)}`;
    return { kind: "image", forward, stored: false, digest: id.contentDigest, metadata: { modality: "image", width: id.header.width, height: id.header.height }, unresolved: null };
  } catch (e) {
    // Opted in to forwarding URLs: a fetch the edge could not make only costs exact routing.
    if (deps.forwardClientUrls && isMediaError(e) && !(e instanceof MediaError && POLICY_REFUSALS.has(e.reason))) {
      return { kind: "image", forward: p.url, stored: false, digest: null, metadata: null, unresolved: { reason: "unresolved_media", detail: e.message } };
    }
    throw e;
  }
}

/** Refused by policy: never forwarded, even with KVEDGE_FORWARD_CLIENT_URLS. */
const POLICY_REFUSALS = new Set<MediaErrorReason>(["bad_url", "bad_scheme", "blocked_address", "credentials_in_url", "bad_redirect"]);

function videoItem(via: { forward: string | null; stored: boolean }, digest: string, probe: { width: number; height: number; totalFrames: number; avgFps: number | null }): VerifiedMedia {
  if (probe.avgFps === null) return { kind: "video", ...via, digest, metadata: null, unresolved: { reason: "unprobeable_video", detail: "decoder reports no frame rate" } };
  return { kind: "video", ...via, digest, metadata: { modality: "video", width: probe.width, height: probe.height, totalFrames: probe.totalFrames, avgFps: probe.avgFps }, unresolved: null };
}

/**
 * Media items of one request resolved at once, at most: within one client's share of the media
 * store's downloads (4 at its defaults, docs/media.md Fair shares), so a request with many items
 * waits at the edge instead of filling its client's line at the store (64 items at once had 28
 * refused), and below the Workers runtime's 6 simultaneous connections per request.
 */
const MEDIA_CALLS_PER_REQUEST = 4;

const clientGone = (): UpstreamError => new UpstreamError("The client went away before its media were verified.", null, "cancelled");

/**
 * Earlier items of a conversation, reused (media-memo.ts). `scope` names the client and the cache
 * namespace (entries never cross it); `earlier[i]`: part i sits in a message the model has already
 * answered (before the request's last assistant message).
 */
export interface MediaReuse {
  memo: MediaMemo;
  scope: string;
  earlier: readonly boolean[];
  /** Filled by verifyMedia: the items forwarded on their lease, without asking the store (recoverLeased, dropLeases if the worker's answer fails). */
  leased: LeasedItem[];
}

/** An item forwarded on its lease: its memo entry, and the part that named it (its URL, to store it again). */
export interface LeasedItem {
  entry: Remembered;
  part: MediaPartRef;
}

/**
 * Forgets the leases of items forwarded without asking the store, and their freshness: after a
 * worker's failed answer (the store may have restarted and lost the bytes, and with them what it
 * knew of their URLs' freshness) the next request asks it again, stores again by URL what it no
 * longer holds, and sends a new message naming such a URL through the store.
 */
export function dropLeases(leased: readonly LeasedItem[]): void {
  for (const l of leased) {
    l.entry.leaseUntil = 0;
    l.entry.freshUntil = 0;
  }
}

/** A held answer by digest: each held one's lease in ms (0: held, not leased); a digest not held is absent. */
function heldLeases(digests: readonly string[], answer: Extract<HeldOutcome, { ok: true }>): Map<string, number> {
  const held = new Map<string, number>();
  digests.forEach((d, k) => answer.held[k] && held.set(d, answer.leaseMs?.[k] ?? 0));
  return held;
}

/**
 * Until when (Date.now ms) a span the store's answer gave (a lease, a freshness; 0: none) lasts,
 * counted from before the call (`askedAt`): the store's own span began no earlier.
 */
function untilFrom(askedAt: number, ms: number): number {
  return ms > 0 ? askedAt + ms : 0;
}

/** A remembered entry's lease from a held answer, counted from before the call (`askedAt`). */
function renewLease(entry: Remembered, leaseMs: number, askedAt: number): void {
  entry.leaseUntil = untilFrom(askedAt, leaseMs);
}

/**
 * After the worker failed a request that forwarded items on their leases, before any output:
 * drops those leases, asks the store about exactly those items (one held call, which leases the
 * held ones again) and stores again by URL each one it no longer holds. True only when at least
 * one was lost and every lost one is held again under the same digest, so the request's body
 * (content-addressed store URLs) is good to send once more; false for a failure the leases cannot
 * explain (all held: a genuine refusal is not sent again) or one they cannot mend (the store's
 * trouble, a URL now serving other bytes): the client gets the worker's answer, and its retry
 * resolves the items afresh. `lost` is called once the store's answer shows an item lost, before
 * any is stored again.
 */
export async function recoverLeased(leased: readonly LeasedItem[], deps: MediaDeps, caller: MediaCaller, lost: () => void = () => undefined): Promise<boolean> {
  if (leased.length === 0) return false;
  dropLeases(leased);
  const digests = [...new Set(leased.map((l) => l.entry.media.digest!))];
  if (digests.length > MAX_HELD_DIGESTS) return false;
  const call = { client: caller.client, signal: caller.signal, traceparent: caller.traceparent ?? null };
  const now = Date.now();
  const answer = await deps.decode.held(digests, call);
  if (!answer.ok) return false;
  const held = heldLeases(digests, answer);
  const lostItems = new Map<string, LeasedItem>();
  for (const l of leased) {
    const leaseMs = held.get(l.entry.media.digest!);
    if (leaseMs !== undefined) renewLease(l.entry, leaseMs, now);
    else lostItems.set(l.entry.media.digest!, l);
  }
  if (lostItems.size === 0) return false;
  lost();
  const todo = [...lostItems.values()];
  let next = 0;
  let mended = true;
  const lane = async (): Promise<void> => {
    while (mended && next < todo.length) {
      const l = todo[next++]!;
      // Audio is never remembered (takeRemembered): a leased item is an image or a video.
      const askedAt = Date.now();
      const out = await deps.decode.store(l.part.url, l.part.kind === "video" ? "video" : "image", call);
      if (!out.ok || out.result.digest !== l.entry.media.digest) mended = false;
      else {
        renewLease(l.entry, out.result.leaseMs ?? 0, askedAt);
        l.entry.freshUntil = untilFrom(askedAt, out.result.freshMs ?? 0);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(MEDIA_CALLS_PER_REQUEST, todo.length) }, lane));
  return mended;
}

/**
 * What may be remembered: verified items whose identity is known, either a data: URL (its text is
 * its bytes) or bytes the media store holds. An image the edge fetched itself (no store) is fetched
 * again each time, as a worker fetching the URL would, and nothing is remembered while the
 * operator lets workers fetch client URLs themselves.
 */
function memoizable(p: MediaPartRef, m: VerifiedMedia, deps: MediaDeps): boolean {
  return !deps.forwardClientUrls && m.digest !== null && m.metadata !== null && (m.stored || isDataUrl(p.url));
}

/** What the memo gave a request: its items are in `out`; the other indices, and the remembered items the store must confirm. */
interface Taken {
  /** Parts to check against the policy, prompt order: those not remembered, and seeds not checked yet. */
  unchecked: number[];
  /** Seeds among them (marked checked once every part has passed). */
  seeds: Remembered[];
  /** Parts not remembered. */
  rest: number[];
  /** Remembered parts whose bytes are in the store, and their entries. */
  stored: number[];
  storedHits: Remembered[];
}

/**
 * Items taken from the memo, without any call. A data: URL's entry is used wherever the URL
 * appears. An http(s) URL's entry is used for an earlier item, and only once the store confirms it
 * still holds the bytes (confirmHeld): the URL's bytes are those verified when the conversation
 * first sent it, while a new message naming a URL has it fetched as the store's HTTP caching allows
 * (docs: what SGLang and the store do when a URL's bytes change), so its entry is used only while
 * the store said it would answer the URL with those bytes from its copy, without asking the origin
 * (`freshUntil`; then confirmed as an earlier item's). A remembered URL passed this policy when it
 * was remembered (media-memo.ts), also one a new message names again: only the others are checked.
 */
function takeRemembered(parts: readonly MediaPartRef[], deps: MediaDeps, reuse: MediaReuse, out: VerifiedMedia[]): Taken {
  const taken: Taken = { unchecked: [], seeds: [], rest: [], stored: [], storedHits: [] };
  let now: number | undefined;
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    const usesMemo = p.kind !== "audio" && !deps.forwardClientUrls;
    const asEarlier = reuse.earlier[i] || isDataUrl(p.url);
    const hit = !usesMemo ? null : asEarlier ? reuse.memo.get(reuse.scope, p.kind, p.url) : reuse.memo.getFresh(reuse.scope, p.kind, p.url, (now ??= Date.now()));
    if (!hit) {
      // A new message naming a remembered URL that is not fresh is stored again; its URL passed this policy.
      if (!(usesMemo && !asEarlier && reuse.memo.policyChecked(reuse.scope, p.kind, p.url))) taken.unchecked.push(i);
      taken.rest.push(i);
      continue;
    }
    if (!hit.policyChecked) {
      taken.unchecked.push(i);
      taken.seeds.push(hit);
    }
    out[i] = hit.media;
    if (hit.media.stored) {
      taken.stored.push(i);
      taken.storedHits.push(hit);
    }
  }
  return taken;
}

/**
 * The indices still to resolve: those not remembered, and remembered ones the store no longer
 * holds (one call for all). A stored item whose lease has more than `leaseMarginMs` left is not
 * asked about: the store promised to keep it past the longest its signed URL may be fetched. An
 * item asked about and held gets the lease the store answers.
 */
async function confirmHeld(parts: readonly MediaPartRef[], deps: MediaDeps, reuse: MediaReuse, call: Required<DecodeCallOptions>, out: VerifiedMedia[], taken: Taken): Promise<number[]> {
  const todo = taken.rest;
  if (taken.stored.length === 0) return todo;
  const now = Date.now();
  const margin = deps.leaseMarginMs;
  const ask: number[] = [];
  const askHits: Remembered[] = [];
  for (let k = 0; k < taken.stored.length; k++) {
    const hit = taken.storedHits[k]!;
    if (margin !== undefined && hit.leaseUntil - now > margin) reuse.leased.push({ entry: hit, part: parts[taken.stored[k]!]! });
    else {
      ask.push(taken.stored[k]!);
      askHits.push(hit);
    }
  }
  if (ask.length === 0) return todo;
  const digests = [...new Set(ask.map((i) => out[i]!.digest!))];
  const answer = digests.length <= MAX_HELD_DIGESTS ? await deps.decode.held(digests, call) : null;
  // No answer (the store's trouble, the client gone): every such item is stored again, which
  // raises the store's own error for the request.
  const held = answer?.ok ? heldLeases(digests, answer) : new Map<string, number>();
  let dropped = false;
  for (let k = 0; k < ask.length; k++) {
    const i = ask[k]!;
    const leaseMs = held.get(out[i]!.digest!);
    if (leaseMs !== undefined) {
      renewLease(askHits[k]!, leaseMs, now);
      continue;
    }
    // Forgotten only when the store said so (not when it could not answer, or the client left).
    if (answer?.ok) reuse.memo.drop(reuse.scope, parts[i]!.kind, parts[i]!.url);
    todo.push(i);
    dropped = true;
  }
  return dropped ? todo.sort((a, b) => a - b) : todo;
}

/**
 * Resolves every media part (prompt order), at most MEDIA_CALLS_PER_REQUEST at a time; throws the
 * client's 4xx for the first that cannot be verified. Once one item has failed, or the caller's
 * signal ends, the other items' calls are cancelled: they would only hold the media store's slots
 * for an answer nobody reads. With `reuse`, items verified for earlier turns are taken from the
 * memo (takeRemembered, confirmHeld) and only the others are checked, resolved, then remembered.
 */
export async function verifyMedia(parts: readonly MediaPartRef[], deps: MediaDeps, caller: MediaCaller = { client: null, signal: null }, reuse: MediaReuse | null = null): Promise<VerifiedMedia[]> {
  const out = new Array<VerifiedMedia>(parts.length);
  const taken = reuse ? takeRemembered(parts, deps, reuse, out) : null;
  // Every other item's policy first: one refused URL stops the request before any item is fetched.
  if (taken) {
    for (const i of taken.unchecked) precheck(parts[i]!, deps);
    for (const seed of taken.seeds) seed.policyChecked = true;
  } else for (const p of parts) precheck(p, deps);
  const over = new AbortController();
  const onGone = (): void => over.abort(caller.signal!.reason);
  if (caller.signal?.aborted) onGone();
  else caller.signal?.addEventListener("abort", onGone, { once: true });
  const call = { client: caller.client, signal: over.signal, traceparent: caller.traceparent ?? null };
  let todo: number[] = reuse ? [] : parts.map((_, i) => i);
  // Until when (Date.now ms) the store promised to keep each item it stored now, and would answer its URL from its copy; counted from before its call.
  const leaseUntil = new Array<number>(parts.length).fill(0);
  const freshUntil = new Array<number>(parts.length).fill(0);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < todo.length && !over.signal.aborted) {
      const i = todo[next++]!;
      const askedAt = Date.now();
      out[i] = await resolveOne(parts[i]!, deps, call, (leaseMs, freshMs) => {
        leaseUntil[i] = untilFrom(askedAt, leaseMs);
        freshUntil[i] = untilFrom(askedAt, freshMs);
      });
    }
  };
  try {
    if (reuse && taken) todo = await confirmHeld(parts, deps, reuse, call, out, taken);
    await Promise.all(
      Array.from({ length: Math.min(MEDIA_CALLS_PER_REQUEST, todo.length) }, () =>
        lane().catch((e: unknown) => {
          over.abort(e);
          // A call cut because the client left fails as whatever it was doing (a store outage, a
          // fetch timeout): name the real cause.
          throw caller.signal?.aborted ? clientGone() : e;
        }),
      ),
    );
  } finally {
    caller.signal?.removeEventListener("abort", onGone);
  }
  // Cancelled probes come back as unresolved items: a request whose client left stops here.
  if (caller.signal?.aborted) throw clientGone();
  // An item the memo holds as verified now (a new message naming a remembered URL, same bytes) keeps its entry: its lease and its object (routed-items.ts keys).
  if (reuse) for (const i of todo) if (memoizable(parts[i]!, out[i]!, deps)) out[i] = reuse.memo.set(reuse.scope, parts[i]!.kind, parts[i]!.url, out[i]!, leaseUntil[i]!, freshUntil[i]!);
  return out;
}

/**
 * The layout's items under one cohort contract: the mm hash is derived from the content digest
 * and metadata. `unresolved` is the first item whose identity is missing (routing falls back).
 */
export function mediaItems(media: readonly VerifiedMedia[], contractDigest: string): { items: MediaItem[]; unresolved: { reason: string; detail: string } | null } {
  let unresolved: { reason: string; detail: string } | null = null;
  const items = media.map((m): MediaItem => {
    if (!m.metadata || !m.digest) {
      unresolved ??= m.unresolved ?? { reason: "unresolved_media", detail: "no identity" };
      return { modality: m.kind === "video" ? "video" : "image", hash: null, probe: null };
    }
    const hash = BigInt("0x" + mediaIdentityHash({ contentDigest: m.digest, metadata: m.metadata, contractDigest }));
    const md = m.metadata;
    if (md.modality === "image") return { modality: "image", hash, probe: { width: md.width, height: md.height } };
    return { modality: "video", hash, probe: { totalFrames: md.totalFrames, avgFps: md.avgFps, width: md.width, height: md.height } };
  });
  return { items, unresolved };
}
