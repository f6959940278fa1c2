/**
 * What the edge sends with each store or probe call: its bearer token (the decode service's only
 * client besides workers fetching signed URLs; edge-auth.ts), the label of its own client, and its
 * trace context.
 */
import { InvalidRequestError } from "../../src/api/errors.ts";
import { parseTraceparent } from "../../src/util/trace-context.ts";
import type { Caller } from "./caller.ts";
import type { EdgeAuth } from "./edge-auth.ts";
import type { RouteCall } from "./route.ts";

/** `x-kvedge-client`: an opaque label the edge derives from its client. */
const CLIENT_LABEL = /^[A-Za-z0-9:._-]{1,80}$/;

/** The caller of an edge call, once its token is checked (401 without it, 429 past the failure budget, 400 for a bad label). */
export function edgeCaller({ req, url, signal }: RouteCall, auth: EdgeAuth, log: (msg: string) => void): Caller {
  auth.require(req);
  // The edge's label of its client (authenticated with the edge's token): whose share a call spends.
  const label = req.headers["x-kvedge-client"];
  if (label !== undefined && (typeof label !== "string" || !CLIENT_LABEL.test(label))) throw new InvalidRequestError("x-kvedge-client must be 1-80 characters of [A-Za-z0-9:._-].");
  // The edge's W3C trace context: one line per call names the client request's trace (--verbose).
  const trace = parseTraceparent(req.headers.traceparent?.toString());
  if (trace) log(`${url.pathname} trace=${trace.traceId} parent=${trace.parentId}`);
  return { client: label ?? null, signal };
}
