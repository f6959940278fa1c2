/**
 * One HTTP request of the decode service: its signal (the caller hanging up, or the request
 * deadline), its route, and whatever it throws mapped to one answer (the OpenAI error shape).
 */
import type http from "node:http";
import { InternalError, KvedgeError, MethodNotAllowedError, NoWorkerAvailableError, UpstreamTimeoutError, errorBody, httpStatusOf } from "../../src/api/errors.ts";
import { CallerGone } from "./caller.ts";
import { QueueFullError } from "./concurrency.ts";
import { sendJson } from "./http-json.ts";
import { ProbeTimeoutError } from "./probers.ts";
import { dispatch, type Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";

export interface RequestContext {
  routes: readonly Route[];
  requestTimeoutMs: number;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function serveRequest(req: http.IncomingMessage, res: http.ServerResponse, ctx: RequestContext): void {
  const { stats, log } = ctx;
  const ctrl = new AbortController();
  const deadline = setTimeout(() => ctrl.abort(new UpstreamTimeoutError(`The decode service gave up after ${ctx.requestTimeoutMs} ms.`)), ctx.requestTimeoutMs);
  res.on("close", () => {
    clearTimeout(deadline);
    if (!res.writableFinished && !ctrl.signal.aborted) ctrl.abort(new CallerGone("caller went away"));
  });
  dispatch(ctx.routes, req, res, ctrl.signal).catch((e: unknown) => {
    if (e instanceof CallerGone || (ctrl.signal.reason instanceof CallerGone && !(e instanceof KvedgeError))) {
      stats.downloadsCancelled++;
      log("caller went away; its work was dropped");
      res.destroy();
      return;
    }
    const err = answerOf(e, log);
    if (err instanceof MethodNotAllowedError && !res.headersSent) res.setHeader("allow", err.allow.join(", "));
    // An unread upload body (e.g. 413 or 401): answer, then drop the connection so the client
    // does not reuse a socket with half a request body still in it.
    if (!req.complete && !res.headersSent) {
      res.setHeader("connection", "close");
      res.on("finish", () => req.destroy());
    }
    sendJson(res, httpStatusOf(err), errorBody(err));
  });
}

/** The answer to a request whose handler threw `e` (an unexpected error is logged, answered 500). */
function answerOf(e: unknown, log: (msg: string) => void): KvedgeError {
  if (e instanceof KvedgeError) return e;
  if (e instanceof QueueFullError) return new NoWorkerAvailableError("Decode service is at capacity (its queue, or this client's share of it, is full).");
  if (e instanceof ProbeTimeoutError) return new UpstreamTimeoutError("Probe timed out.");
  log(`internal error: ${(e as Error).stack ?? String(e)}`);
  return new InternalError();
}

/** Ends a request after an exception escaped its handler (last-resort.ts): 500, then its socket closes. */
export function failOutsideHandler(req: http.IncomingMessage, res: http.ServerResponse, log: (msg: string) => void): (e: unknown) => void {
  return (e) => {
    log(`request failed outside its handler: ${(e as Error)?.stack ?? String(e)}`);
    if (res.headersSent) return void res.destroy();
    res.setHeader("connection", "close");
    res.on("finish", () => req.destroy());
    sendJson(res, 500, errorBody(new InternalError()));
  };
}
