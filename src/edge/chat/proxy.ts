/**
 * Stage 8, proxy: one attempt at the picked worker's `/generate`, with its credential, a deadline
 * for the headers, idle and total deadlines and a size cap for the body, and the client's going
 * aborting it. The answer's shape (chat, completions, …) is the caller's `AnswerFormat`; this file
 * knows only `/generate`. A failure of the worker before any output throws RetryableUpstream: the
 * retry loop (forward.ts) sends the request elsewhere, up to `routing.maxAttempts`. A deadline, the
 * size cap or the client's going throws its own error, which is not retried.
 */
import { UpstreamError, UpstreamTimeoutError, type KvedgeError } from "../../api/errors.ts";
import type { EdgeConfig } from "../../config/config.ts";
import type { StreamOutcome, UpstreamBytes } from "../../proxy/chat-stream.ts";
import { openExchange } from "../../proxy/upstream-guard.ts";
import type { RouteDecision } from "../../routing-index/front-door.ts";
import { workerAuthHeaders } from "../worker-auth.ts";
import { PairSideFailed, sendPair } from "./pd-dispatch.ts";
import type { EdgeFetch } from "./media-deps.ts";
import type { Receipt } from "./settle.ts";

/** A failure where the worker never produced output: safe to send the request elsewhere. */
export class RetryableUpstream extends Error {
  /** No connection to the worker: keep other requests away from it for a while too. */
  readonly unreachable: boolean;
  /** The worker that failed when not the picked one (a PD pair's decode side); null: the pick. */
  readonly workerId: string | null;
  constructor(message: string, unreachable: boolean, workerId: string | null = null) {
    super(message);
    this.unreachable = unreachable;
    this.workerId = workerId;
  }
}

/** A streamed answer's translator: it reads the `/generate` SSE body and streams the client's frames. */
export interface AnswerStream {
  readonly readable: ReadableStream<Uint8Array>;
  /** The upstream error when it failed before any output; null once output started. */
  readonly ready: Promise<KvedgeError | null>;
}

/** How an endpoint turns `/generate` answers into its own. */
export interface AnswerFormat {
  stream: boolean;
  /** A complete answer → the client's JSON and token counts; a non-2xx status throws its mapped error. */
  complete(status: number, text: string): { body: unknown; usage: { prompt_tokens: number; cached_tokens: number } };
  streamAnswer(opts: {
    /** The worker's body, under the guard's deadlines; the translator reads it and cancels it when the client goes. */
    source: UpstreamBytes;
    /** The worker runs --incremental-streaming-output. */
    incremental: boolean;
    /** Hold the last frames until onFinish's promise settles. */
    holdEndUntilFinished: boolean;
    onFinish: (o: StreamOutcome) => unknown;
  }): AnswerStream;
}

export interface ProxyInput {
  config: Pick<EdgeConfig, "routing" | "workerAuth">;
  fetch: EdgeFetch;
  decision: RouteDecision;
  /** The `/generate` body (src/proxy/generate-body.ts). */
  body: Blob;
  /** A PD pair's decode body (its media signed for the decode worker); absent: `body`. */
  decodeBody?: Blob;
  answer: AnswerFormat;
  receipt: Receipt;
  /**
   * Sharded pool: hold a complete answer until its release has reached every shard, so a client's
   * next request never sees this one as load on a shard whose replica lags (docs/scale.md §3).
   */
  releaseBeforeReply: boolean;
  /** The client's request signal: the client going away aborts the upstream request. */
  clientSignal: AbortSignal | null;
  /**
   * The request's trace context with the edge's span. SGLang run with --enable-trace parents its
   * request span on it (TRACE_HEADERS, python/sglang/srt/tracing/trace.py L40, and its
   * trace_req_start; sgl-project/sglang@021a892).
   */
  traceparent: string;
  /** Headers of the client's answer decided before the call (its request id, routing headers): set as it is made, not one by one after. */
  headers: Record<string, string>;
}

export async function proxyOnce(input: ProxyInput): Promise<Response> {
  const { routing } = input.config;
  const { decision: d, answer, receipt } = input;
  const clientSignal = input.clientSignal;
  // The worker's credential, bound to its registered URL; none configured: it is not called at all.
  const auth = await workerAuthHeaders(input.config.workerAuth, d.url);
  if (auth === null) throw new RetryableUpstream("the edge holds no credential for this worker (KVEDGE_WORKER_KEYS or KVEDGE_WORKER_KEY_SECRET)", false);
  const decodeAuth = d.pd ? await workerAuthHeaders(input.config.workerAuth, d.pd.decodeUrl) : null;
  if (d.pd && decodeAuth === null) {
    throw new RetryableUpstream("the edge holds no credential for this decode worker (KVEDGE_WORKER_KEYS or KVEDGE_WORKER_KEY_SECRET)", false, d.pd.decodeWorkerId);
  }
  // Opened once the credentials are in hand (a look-up that throws leaves no exchange to end).
  // Headers timeout, idle timeout, total deadline, a size cap when buffered; the client's going aborts it.
  const exchange = openExchange({
    headersMs: routing.upstreamHeadersTimeoutMs,
    idleMs: routing.upstreamIdleTimeoutMs,
    deadlineAt: Date.now() + routing.upstreamDeadlineMs,
    clientSignal,
  });
  const headersFor = (a: Record<string, string>) => ({ "content-type": "application/json", traceparent: input.traceparent, ...a });
  let upstream: Response;
  try {
    upstream = d.pd
      ? (
          await sendPair({
            fetch: input.fetch,
            prefill: { workerId: d.workerId, url: d.url, headers: headersFor(auth) },
            decode: { workerId: d.pd.decodeWorkerId, url: d.pd.decodeUrl, headers: headersFor(decodeAuth ?? {}) },
            pd: d.pd,
            prefillBody: input.body,
            decodeBody: input.decodeBody ?? input.body,
            signal: exchange.signal,
            maxPrefillBodyBytes: routing.maxUpstreamBodyBytes,
            prefillDeadlineMs: routing.upstreamDeadlineMs,
          })
        ).decode
      : await input.fetch(`${d.url}/generate`, { method: "POST", headers: headersFor(auth), body: input.body, signal: exchange.signal, redirect: "manual" });
  } catch (err) {
    // Read before end(), which aborts the signal too.
    const cut = exchange.signal.aborted;
    exchange.end();
    if (err instanceof PairSideFailed) {
      // The prefill refused the request itself (4xx): the client's answer, as SGLang's gateway returns it.
      if (err.clientError) return answer.complete(err.clientError.status, err.clientError.text) as never;
      throw new RetryableUpstream(err.message, err.unreachable, err.workerId === d.workerId ? null : err.workerId);
    }
    // The client's going, not the worker's failure: settled as cancelled, never retried.
    if (clientSignal?.aborted) throw new UpstreamError("The client went away before the worker answered.", null, "cancelled");
    if (cut) throw new UpstreamTimeoutError();
    // Connection refused/reset before any byte: nothing was processed (the worker may be gone).
    throw new RetryableUpstream(err instanceof Error ? err.message : String(err), true);
  }
  // Read once: each read of a runtime Response's status is a call into the runtime.
  const status = upstream.status;
  if (status === 401 || status === 403) {
    // The worker refused the edge's credential (a key not set, or rotated on one side only): an
    // operator's error the client cannot fix; another worker may still answer.
    exchange.end();
    await upstream.body?.cancel().catch(() => undefined);
    throw new RetryableUpstream(`worker refused the edge's credential (HTTP ${status})`, false);
  }
  if (status >= 300 && status <= 399) {
    // Not followed: the worker's credentials (fetch keeps the Access token across origins) go only
    // to the URL the worker is registered at, never to a Location whoever answers there names.
    exchange.end();
    await upstream.body?.cancel().catch(() => undefined);
    throw new RetryableUpstream(`worker answered a redirect (HTTP ${status}); worker redirects are not followed`, false);
  }

  if (!answer.stream) {
    let text: string;
    try {
      text = await exchange.text(upstream, routing.maxUpstreamBodyBytes);
    } catch (err) {
      // Cut by a deadline, the size cap or the client's going: not the worker's failure; not retried.
      if (err instanceof UpstreamTimeoutError || (err instanceof UpstreamError && (err.code === "upstream_too_large" || err.code === "cancelled"))) throw err;
      // The connection broke while the worker computed; the client has seen nothing yet. Retried
      // elsewhere, but not marked down: one request that makes a worker drop its connection must
      // not take workers out of the pool for everyone (a dead worker is seen by its relay, and by
      // the next connect that is refused).
      throw new RetryableUpstream(err instanceof Error ? err.message : String(err), false);
    }
    // Not a success: a PD pair's prefill may still run (end aborts it).
    if (status < 200 || status > 299) exchange.end();
    if (status === 503) throw new RetryableUpstream("worker overloaded (503)", false);
    // A non-2xx answer throws its mapped error, settled by the caller (forward.ts) once it knows
    // whether the request is sent again.
    const { body, usage } = answer.complete(status, text);
    const settled = receipt.settle({ promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens, outcome: "ok" });
    if (input.releaseBeforeReply) await settled;
    return new Response(JSON.stringify(body), { status: 200, headers: { "content-type": "application/json", ...input.headers } });
  }

  if (status < 200 || status > 299) {
    if (status === 503) {
      exchange.end();
      throw new RetryableUpstream("worker overloaded (503)", false);
    }
    const text = await exchange.text(upstream, routing.maxUpstreamBodyBytes).catch(() => "");
    exchange.end();
    return answer.complete(status, text) as never; // throws the mapped error
  }
  if (!upstream.body) {
    exchange.end();
    throw new RetryableUpstream("empty upstream body", false);
  }
  const translator = answer.streamAnswer({
    source: exchange.body(upstream.body),
    // A PD pair streams from its decode side.
    incremental: d.pd ? d.pd.decodeIncrementalStreaming : d.incrementalStreaming,
    holdEndUntilFinished: input.releaseBeforeReply,
    // An error before any output (`ready`, resolved as the translation ends) is thrown below and
    // settled by the caller (forward.ts), which knows whether the request is sent again.
    onFinish: (o) =>
      Promise.resolve()
        .then(() => translator.ready)
        .then((earlyError) =>
          earlyError
            ? undefined
            : receipt.settle({
                promptTokens: o.usage?.prompt_tokens ?? null,
                cachedTokens: o.usage?.cached_tokens ?? null,
                // The client's going can reach the translator first as the upstream read it cut (request.signal).
                outcome: o.status === "completed" ? "ok" : o.status === "client_cancelled" || o.error?.code === "cancelled" ? "cancelled" : "error",
              }),
        ),
  });
  const early = await translator.ready;
  if (early) {
    await translator.readable.cancel().catch(() => undefined);
    // Cut before any output: another worker can still answer in full (unless the client has left).
    if (early instanceof UpstreamError && early.upstreamStatus === null && early.code !== "cancelled") throw new RetryableUpstream(early.message, false);
    throw early;
  }
  receipt.prefillDone();
  return new Response(translator.readable, {
    status: 200,
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache", ...input.headers },
  });
}
