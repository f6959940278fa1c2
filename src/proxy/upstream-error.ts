/**
 * Maps what an SGLang worker reports as a failure to a KvedgeError. Clients see the status class
 * and a message written here, never the worker's text (it can echo internal addresses, paths, or
 * what a fetch of some URL returned: a port scanner's oracle). Request faults (4xx) become
 * UpstreamRejectedError, worker faults (5xx, malformed answers) UpstreamError; the worker's own
 * text goes to `cause`, which the edge logs.
 */
import { UpstreamError, UpstreamRejectedError, UpstreamTimeoutError } from "../api/errors.ts";
import type { KvedgeError } from "../api/errors.ts";
import type { SglangFinishReason } from "./sglang-wire.ts";

const MAX_MESSAGE = 1000;

function clip(s: string): string {
  return s.length > MAX_MESSAGE ? `${s.slice(0, MAX_MESSAGE)}…` : s;
}

/** Pulls a human message out of the bodies SGLang/FastAPI produce (sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py @9d147fd: error handlers L480-580). */
export function upstreamMessageOf(bodyText: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bodyText);
  } catch {
    return clip(bodyText.trim());
  }
  if (typeof parsed === "object" && parsed !== null) {
    const o = parsed as Record<string, unknown>;
    const err = o["error"];
    if (typeof err === "string") return clip(err);
    if (typeof err === "object" && err !== null && typeof (err as Record<string, unknown>)["message"] === "string") {
      return clip((err as Record<string, string>)["message"]!);
    }
    if (typeof o["message"] === "string") return clip(o["message"]);
    const detail = o["detail"];
    if (typeof detail === "string") return clip(detail);
    if (Array.isArray(detail)) {
      // FastAPI validation errors: [{loc, msg, type}, …]
      const msgs = detail.map((d) =>
        typeof d === "object" && d !== null && typeof (d as Record<string, unknown>)["msg"] === "string"
          ? String((d as Record<string, unknown>)["msg"])
          : JSON.stringify(d),
      );
      return clip(msgs.join("; "));
    }
  }
  return clip(bodyText.trim());
}

function withCause<E extends KvedgeError>(err: E, cause: string): E {
  err.cause = cause;
  return err;
}

/** Request faults clients can act on, recognised in SGLang's text and described in our own words. */
const KNOWN_REJECTIONS: [RegExp, string][] = [
  [/context length|maximum context|context (is )?too long/i, "The prompt is longer than the model's context length."],
  [/Failed to load (image|video)|base64/i, "The worker could not decode a media item of the request."],
  // SGLang aborts a request whose grammar its backend cannot compile: "Invalid grammar request: …"
  // (scheduler / grammar manager, also "… with cache hit").
  [/Invalid grammar request/i, "The worker could not compile the request's output constraint (response_format, a strict tool's parameters, or a forced tool call)."],
];

/** An error for a status code and SGLang's message (kept only as `cause`). */
export function upstreamErrorFor(status: number, message: string): KvedgeError {
  const msg = message === "" ? `HTTP ${status}` : message;
  if (status === 408 || status === 504) return withCause(new UpstreamTimeoutError(), msg);
  if (status >= 400 && status < 500 && status !== 429) {
    const known = KNOWN_REJECTIONS.find(([re]) => re.test(msg))?.[1];
    return withCause(new UpstreamRejectedError(known ?? `The worker rejected the request (HTTP ${status}).`, status), msg);
  }
  return withCause(new UpstreamError(`The worker failed to process the request (HTTP ${status}).`, status), msg);
}

/** A non-2xx `/generate` response. */
export function upstreamHttpError(status: number, bodyText: string): KvedgeError {
  return upstreamErrorFor(status, upstreamMessageOf(bodyText));
}

/** An inline `{"error": {...}}` frame of a 200 stream (http_server.py @9d147fd L826-844: `code` carries the status). */
export function upstreamStreamError(frame: unknown): KvedgeError {
  const err = typeof frame === "object" && frame !== null ? (frame as Record<string, unknown>)["error"] : undefined;
  if (typeof err === "string") return upstreamErrorFor(500, err);
  if (typeof err === "object" && err !== null) {
    const e = err as Record<string, unknown>;
    const message = typeof e["message"] === "string" ? e["message"] : "";
    const code = typeof e["code"] === "number" ? e["code"] : Number.NaN;
    const status =
      Number.isInteger(code) && code >= 400 && code < 600 ? code : e["type"] === "invalid_request_error" ? 400 : 500;
    return upstreamErrorFor(status, clip(message));
  }
  return withCause(new UpstreamError("The worker reported an error."), JSON.stringify(frame)?.slice(0, MAX_MESSAGE) ?? "");
}

/**
 * An abort that carries a status code is an error (SGLang turns it into an error chunk or an
 * error response); a graceful abort (status_code null) is a normal `finish_reason: "abort"`.
 */
export function abortErrorOf(fr: SglangFinishReason | null | undefined): KvedgeError | null {
  if (fr === null || fr === undefined || fr.type !== "abort") return null;
  if (fr.status_code === null || fr.status_code === undefined) return null;
  return upstreamErrorFor(fr.status_code, clip(fr.message ?? "Generation aborted."));
}

/** The upstream answered 200 with something we cannot use. */
export function malformedUpstream(what: string): KvedgeError {
  return withCause(new UpstreamError("The worker returned an unreadable response."), what);
}
