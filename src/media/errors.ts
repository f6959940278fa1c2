/**
 * Media errors: a media item that cannot be fetched, is refused by the SSRF policy, or whose
 * header cannot be read. They extend the api hierarchy so they render as 400 (413 for size caps);
 * `reason` is a stable machine-readable name the edge records when it falls back.
 */
import { InvalidRequestError, KvedgeError, PayloadTooLargeError } from "../api/errors.ts";

export type MediaErrorReason =
  // fetch policy
  | "bad_url"
  | "bad_scheme"
  | "blocked_address"
  | "credentials_in_url"
  | "too_many_redirects"
  | "bad_redirect"
  | "dns_failed"
  | "fetch_failed"
  | "http_status"
  | "timeout"
  | "bad_data_url"
  // media store
  | "store_unavailable"
  // content
  | "unknown_format"
  | "truncated"
  | "corrupt"
  | "too_many_pixels"
  | "unsupported_format"
  | "unprobeable_media";

export class MediaError extends InvalidRequestError {
  readonly reason: MediaErrorReason;
  constructor(reason: MediaErrorReason, message: string, param: string | null = null) {
    super(message, param, `media_${reason}`);
    this.reason = reason;
  }
}

/** 413: media bytes above the configured cap. */
export class MediaTooLargeError extends PayloadTooLargeError {
  readonly reason = "too_large" as const;
  readonly limitBytes: number;
  constructor(limitBytes: number, param: string | null = null) {
    super(`Media exceeds the ${limitBytes}-byte limit.`, param);
    this.limitBytes = limitBytes;
  }
}

/**
 * 503: the media store could not take the item (down, overloaded, out of time, refusing the
 * edge's token): the service's fault, not the request's, so clients may retry; the item was not
 * forwarded to any worker.
 */
export class MediaStoreUnavailableError extends KvedgeError {
  readonly reason = "store_unavailable" as const;
  constructor(message: string, param: string | null = null) {
    super(message, "service_unavailable", "media_store_unavailable", param);
  }
}

export type AnyMediaError = MediaError | MediaTooLargeError | MediaStoreUnavailableError;

export function isMediaError(e: unknown): e is AnyMediaError {
  return e instanceof MediaError || e instanceof MediaTooLargeError || e instanceof MediaStoreUnavailableError;
}
