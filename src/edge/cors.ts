/**
 * CORS for the public API only (`/v1/models`, `/v1/chat/completions`, `/v1/completions`,
 * `/v1/responses` and a stored response `/v1/responses/{id}`), so a browser app can call
 * it with an API key it holds. Authentication is a bearer key, never a cookie, so allowing any
 * origin grants a page nothing its key does not already; admin, relay, metrics and dashboard routes
 * send no CORS headers and stay closed to cross-origin pages. `KVEDGE_CORS`: "*" (default), "off",
 * or a comma-separated list of origins (then echoed with `Vary: Origin`).
 */
import type { CorsPolicy } from "../config/config.ts";

/** The methods each public route serves (OPTIONS, the preflight, on every one): its `Allow` header. */
const PUBLIC_ROUTE_METHODS: Readonly<Record<string, readonly string[]>> = {
  "/v1/models": ["GET", "HEAD", "OPTIONS"],
  "/v1/chat/completions": ["POST", "OPTIONS"],
  "/v1/completions": ["POST", "OPTIONS"],
  "/v1/responses": ["POST", "OPTIONS"],
};
const STORED_RESPONSE_PATH = /^\/v1\/responses\/[^/]+$/;
const STORED_RESPONSE_METHODS: readonly string[] = ["GET", "DELETE", "OPTIONS"];

/** The methods of the public route at `path`; undefined: not a public route (no CORS). */
export function publicRouteMethods(path: string): readonly string[] | undefined {
  return PUBLIC_ROUTE_METHODS[path] ?? (STORED_RESPONSE_PATH.test(path) ? STORED_RESPONSE_METHODS : undefined);
}
/** Headers a page may read: the request id for support, the rate limiter's back-off, the request's trace (trace-context.ts). */
const EXPOSED = "x-request-id, retry-after, traceresponse";
/**
 * Headers a page may send (the OpenAI SDKs add their own `x-stainless-*` and `openai-*` ones, which
 * carry nothing the edge reads; a traced page adds W3C `traceparent`, which it reads, and `tracestate`).
 */
const REQUEST_HEADER = /^(?:authorization|content-type|x-api-key|x-stainless-[a-z0-9-]+|openai-[a-z0-9-]+|traceparent|tracestate)$/;

function allowedOrigin(policy: CorsPolicy, origin: string | null): string | null {
  if (policy === null || origin === null) return null;
  if (policy.origins === "*") return "*";
  return policy.origins.has(origin) ? origin : null;
}

/** The answer to a preflight (`OPTIONS` on a CORS route), or null when the request is none. */
export function preflightResponse(request: Request, path: string, policy: CorsPolicy): Response | null {
  const methods = publicRouteMethods(path);
  if (request.method !== "OPTIONS" || methods === undefined) return null;
  const origin = allowedOrigin(policy, request.headers.get("origin"));
  const wanted = (request.headers.get("access-control-request-headers") ?? "")
    .split(",")
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h !== "");
  const headers = new Headers({ allow: methods.join(", ") });
  if (origin !== null) {
    headers.set("access-control-allow-origin", origin);
    headers.set("access-control-allow-methods", methods.join(", "));
    headers.set("access-control-allow-headers", wanted.filter((h) => REQUEST_HEADER.test(h)).join(", ") || "authorization, content-type");
    headers.set("access-control-max-age", "86400");
    if (origin !== "*") headers.set("vary", "Origin");
  }
  return new Response(null, { status: 204, headers });
}

/** `response` with the CORS headers its route and the request's origin call for (a preflight's answer has its own). */
export function withCors(response: Response, request: Request, path: string, policy: CorsPolicy): Response {
  if (publicRouteMethods(path) === undefined || request.method === "OPTIONS") return response;
  const origin = allowedOrigin(policy, request.headers.get("origin"));
  if (origin === null) return response;
  try {
    setCorsHeaders(response.headers, origin);
    return response;
  } catch (err) {
    // Immutable headers (a Response from fetch()) refuse the first set: copy (the body streams through untouched).
    if (!(err instanceof TypeError)) throw err;
  }
  const out = new Response(response.body, response);
  setCorsHeaders(out.headers, origin);
  return out;
}

function setCorsHeaders(headers: Headers, origin: string): void {
  headers.set("access-control-allow-origin", origin);
  headers.set("access-control-expose-headers", EXPOSED);
  if (origin !== "*") headers.append("vary", "Origin");
}
