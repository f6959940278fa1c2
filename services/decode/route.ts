/** A route of the decode service and the dispatch of a request to the route its path names. */
import type http from "node:http";
import { MethodNotAllowedError, NotFoundError } from "../../src/api/errors.ts";

export interface RouteCall {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  /** Aborts when the caller hangs up or the request deadline passes. */
  signal: AbortSignal;
}

export interface Route {
  /** The path, or with `prefix` the start of every path it serves. */
  path: string;
  prefix?: boolean;
  method: "GET" | "POST";
  handle(call: RouteCall): Promise<void>;
}

/** 404 for a path no route serves; 405 for another method than the route's. */
export async function dispatch(routes: readonly Route[], req: http.IncomingMessage, res: http.ServerResponse, signal: AbortSignal): Promise<void> {
  const url = new URL(req.url ?? "/", "http://decode");
  const route = routes.find((r) => (r.prefix ? url.pathname.startsWith(r.path) : url.pathname === r.path));
  if (!route) throw new NotFoundError(`No route ${url.pathname}.`);
  if (req.method !== route.method) throw new MethodNotAllowedError([route.method]);
  await route.handle({ req, res, url, signal });
}
