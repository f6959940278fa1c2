/**
 * The one error hierarchy of kvedge. Every failure that reaches a client is a KvedgeError (or is
 * wrapped into one at the edge boundary) and is rendered in the OpenAI error shape
 * `{ error: { message, type, param, code } }` with the HTTP status mapped here and nowhere else.
 */

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "server_error"
  | "service_unavailable";

export interface OpenAIErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: string | null };
}

export class KvedgeError extends Error {
  readonly type: ErrorType;
  readonly code: string | null;
  readonly param: string | null;
  constructor(message: string, type: ErrorType, code: string | null = null, param: string | null = null) {
    super(message);
    this.name = new.target.name;
    this.type = type;
    this.code = code;
    this.param = param;
  }
}

/** 400: the request is malformed or violates a limit. */
export class InvalidRequestError extends KvedgeError {
  constructor(message: string, param: string | null = null, code: string | null = "invalid_request") {
    super(message, "invalid_request_error", code, param);
  }
}

/** 413: body or media larger than the configured cap. */
export class PayloadTooLargeError extends KvedgeError {
  constructor(message: string, param: string | null = null) {
    super(message, "invalid_request_error", "payload_too_large", param);
  }
}

/** 404: unknown model or route. */
export class NotFoundError extends KvedgeError {
  constructor(message: string, param: string | null = null, code: string | null = "not_found") {
    super(message, "not_found_error", code, param);
  }
}

/** 401: missing or wrong credentials. */
export class AuthenticationError extends KvedgeError {
  constructor(message = "Missing or invalid credentials.") {
    super(message, "authentication_error", "invalid_api_key");
  }
}

/** 405 */
export class MethodNotAllowedError extends KvedgeError {
  /** The methods the route serves: the 405's `Allow` header (RFC 9110 §15.5.6 requires it). */
  readonly allow: readonly string[];
  constructor(allow: readonly string[]) {
    super(`Use ${allow.join(" or ")}.`, "invalid_request_error", "method_not_allowed");
    this.allow = allow;
  }
}

/** 429 */
export class RateLimitError extends KvedgeError {
  constructor(message = "Rate limit exceeded.", code = "rate_limit_exceeded") {
    super(message, "rate_limit_error", code);
  }
}

/** 503: no healthy worker could take the request. */
export class NoWorkerAvailableError extends KvedgeError {
  constructor(message = "No healthy worker is available for this model.") {
    super(message, "service_unavailable", "no_worker_available");
  }
}

/** 502: the upstream worker answered with something we could not use. */
export class UpstreamError extends KvedgeError {
  readonly upstreamStatus: number | null;
  constructor(message: string, upstreamStatus: number | null = null, code = "upstream_error") {
    super(message, "server_error", code);
    this.upstreamStatus = upstreamStatus;
  }
}

/**
 * An error the upstream worker reported for the request itself (SGLang validation failures,
 * e.g. an unknown sampling parameter): passed through as the client's fault.
 */
export class UpstreamRejectedError extends KvedgeError {
  readonly status: number;
  constructor(message: string, status = 400, param: string | null = null) {
    super(message, "invalid_request_error", "upstream_rejected", param);
    this.status = status;
  }
}

/** 504 */
export class UpstreamTimeoutError extends KvedgeError {
  constructor(message = "The worker did not answer in time.") {
    super(message, "server_error", "upstream_timeout");
  }
}

/**
 * 500 on every request: the deployment's configuration is invalid. The Worker refuses to serve
 * rather than guess a default. The message names the var and field (for the Worker's log and
 * tests); clients get only CONFIG_ERROR_MESSAGE, as a field's path can hold a worker URL or a
 * model id and the rule it broke can tell how secrets relate.
 */
export class ConfigError extends KvedgeError {
  constructor(message: string) {
    super(message, "server_error", "configuration_error");
  }
}

/** What a client reads for any ConfigError. */
export const CONFIG_ERROR_MESSAGE = "The service is misconfigured; its operator can read why in the Worker's log.";

/** 500: a bug. The message shown to clients is generic; the cause is logged. */
export class InternalError extends KvedgeError {
  constructor(message = "Internal error.") {
    super(message, "server_error", "internal_error");
  }
}

/** The single mapping from error to HTTP status. */
export function httpStatusOf(err: KvedgeError): number {
  if (err instanceof PayloadTooLargeError) return 413;
  if (err instanceof MethodNotAllowedError) return 405;
  if (err instanceof UpstreamRejectedError) return err.status >= 400 && err.status < 500 ? err.status : 400;
  if (err instanceof UpstreamTimeoutError) return 504;
  if (err instanceof UpstreamError) return 502;
  switch (err.type) {
    case "invalid_request_error":
      return 400;
    case "authentication_error":
      return 401;
    case "permission_error":
      return 403;
    case "not_found_error":
      return 404;
    case "rate_limit_error":
      return 429;
    case "service_unavailable":
      return 503;
    case "server_error":
      return 500;
  }
}

export function errorBody(err: KvedgeError): OpenAIErrorBody {
  return { error: { message: err instanceof ConfigError ? CONFIG_ERROR_MESSAGE : err.message, type: err.type, param: err.param, code: err.code } };
}

/** Wraps anything thrown into a KvedgeError; unknown throwables become an InternalError. */
export function asKvedgeError(err: unknown): KvedgeError {
  if (err instanceof KvedgeError) return err;
  return new InternalError();
}

export function errorResponse(err: unknown, headers?: HeadersInit): Response {
  const e = asKvedgeError(err);
  const h = new Headers(headers);
  h.set("content-type", "application/json");
  if (e instanceof MethodNotAllowedError) h.set("allow", e.allow.join(", "));
  return new Response(JSON.stringify(errorBody(e)), { status: httpStatusOf(e), headers: h });
}
