/**
 * Stages 7–9 with retries: route → proxy → settle, up to `routing.maxAttempts` workers. A worker
 * that fails before any output is settled as an error, excluded (and quarantined when unreachable)
 * and the next pick tried; any other failure is the client's answer, unless the caller's
 * `recoverMedia` mends its media (once per request: the request is then sent once more, an attempt
 * beyond `maxAttempts`). Endpoint-neutral: the body and the answer's shape come from the caller.
 */
import { errorResponse, KvedgeError, NoWorkerAvailableError, UpstreamError, UpstreamRejectedError } from "../../api/errors.ts";
import type { EdgeConfig } from "../../config/config.ts";
import type { EdgeTrace } from "../../util/trace-context.ts";
import type { StageClock } from "../server-timing.ts";
import type { FallbackReason } from "./layout.ts";
import type { EdgeFetch } from "./media-deps.ts";
import { proxyOnce, RetryableUpstream, type AnswerFormat } from "./proxy.ts";
import { routingHeaders, type RouteTarget } from "./route.ts";
import { openReceipt, quarantineEverywhere, type SettleDeps } from "./settle.ts";
import { parseRankTarget } from "../../routing-index/front-door.ts";
import { withRoutedDpRank } from "../../proxy/routed-rank.ts";

export interface ForwardDeps extends SettleDeps {
  config: EdgeConfig;
  fetch: EdgeFetch;
}

export interface ForwardInput {
  model: string;
  target: RouteTarget;
  fallbackReason: FallbackReason;
  bodyFor(workerId: string): Promise<Blob>;
  answer: AnswerFormat;
  requestId: string;
  trace: EdgeTrace;
  /** The client's request signal: its going aborts the upstream request. */
  clientSignal: AbortSignal | null;
  /** Routing headers and server-timing on the answer (admin callers or debug headers). */
  showRouting: boolean;
  /** Admin callers also get every stage's time in server-timing. */
  admin: boolean;
  clock: StageClock;
  /** The answer when the first pick finds no worker that passes the route's filter (incrementalOnly). */
  noneEligible: KvedgeError | null;
  /**
   * The worker answered an error before any output: true when the request's media explain it and
   * are mended (items forwarded on a media store lease that the store had lost, stored again), so
   * the same body is worth sending once more (chat.ts: media.ts recoverLeased). It calls `lost` once
   * it knows an item was lost, before mending it (the failed attempt is settled as retried then; a
   * request its mending fails ends with that attempt). Absent: no such media.
   */
  recoverMedia?: (lost: () => void) => Promise<boolean>;
}

/** The worker's own error answer (a 4xx/5xx status or error frame), not a deadline, size cap or the client's going. */
function workerAnswered(e: KvedgeError): boolean {
  return e instanceof UpstreamRejectedError || (e instanceof UpstreamError && e.upstreamStatus !== null);
}

export async function forward(deps: ForwardDeps, input: ForwardInput): Promise<Response> {
  const { config } = deps;
  const { target, requestId, trace } = input;
  const exclude: string[] = [];
  let lastError: KvedgeError | null = null;
  let attempts = config.routing.maxAttempts;
  let mediaRecovered = false;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const decision = await target.pick(exclude, attempt === 1);
    if (!decision && input.noneEligible && attempt === 1) throw input.noneEligible;
    if (!decision) break;
    // A DP-attention rank target (`<worker>#<rank>`): media are signed for the worker (its ranks share
    // its media credential), and the worker is told which rank holds the prefix.
    const { workerId, rank } = parseRankTarget(decision.workerId);
    const body = rank === null ? await input.bodyFor(workerId) : withRoutedDpRank(await input.bodyFor(workerId), rank);
    // A PD pair's decode side reads the media too, under URLs signed for its worker; a decode rank
    // target is told its rank like any other.
    const decodeTarget = decision.pd ? parseRankTarget(decision.pd.decodeWorkerId) : null;
    const decodeBody = decodeTarget
      ? decodeTarget.rank === null
        ? await input.bodyFor(decodeTarget.workerId)
        : withRoutedDpRank(await input.bodyFor(decodeTarget.workerId), decodeTarget.rank)
      : undefined;
    input.clock.mark("route");
    const edgeOverheadMs = Date.now() - input.clock.start;
    const releaseBeforeReply = config.shards > 1;
    const receipt = openReceipt(deps, target, decision, edgeOverheadMs, releaseBeforeReply);
    try {
      const res = await proxyOnce({
        config,
        fetch: deps.fetch,
        decision,
        body,
        ...(decodeBody ? { decodeBody } : {}),
        answer: input.answer,
        receipt,
        releaseBeforeReply,
        clientSignal: input.clientSignal,
        traceparent: trace.header,
        headers: input.showRouting ? routingHeaders(decision, input.fallbackReason, requestId, attempt, target.shard) : { "x-request-id": requestId },
      });
      input.clock.mark("upstream");
      // Edge time before the upstream call (workerd clocks advance across I/O: body, index RPCs);
      // admin callers also get the stages (upstream = until the answer's headers, or all of it
      // unstreamed). proxyOnce's own Response: its headers are mutable.
      if (input.showRouting) res.headers.set("server-timing", `kvedge-route;dur=${edgeOverheadMs}${input.admin ? `, ${input.clock.header()}` : ""}`);
      return res;
    } catch (err) {
      if (err instanceof RetryableUpstream) {
        receipt.settle({ promptTokens: null, cachedTokens: null, outcome: "error", retrying: attempt < attempts });
        // A PD pair's failing side may be its decode worker: that one is kept away, not the prefill.
        const failed = err.workerId ?? decision.workerId;
        if (err.unreachable) quarantineEverywhere(deps, input.model, config.shards, failed, err.message);
        exclude.push(failed);
        // The client learns that a worker failed, never which one or how (ids, addresses, texts).
        console.warn(JSON.stringify({ event: "worker_failed", worker: failed, requestId, traceId: trace.traceId, error: err.message.slice(0, 300) }));
        lastError = new UpstreamError("A worker failed before answering.", null, "worker_unavailable");
        continue;
      }
      const e = err instanceof KvedgeError ? err : new UpstreamError("The worker's answer could not be processed.");
      // The worker's own text stays in the logs (whether or not the request is sent again); the client gets the sanitized message.
      if (typeof e.cause === "string") console.warn(JSON.stringify({ event: "upstream_error", requestId, traceId: trace.traceId, worker: decision.workerId, code: e.code, upstream: e.cause.slice(0, 1000) }));
      // Nothing reached the client yet (a stream's answer is returned only after its first output).
      let settled = false;
      if (!mediaRecovered && input.recoverMedia && workerAnswered(e)) {
        mediaRecovered = true;
        // Settled as retried once the store's answer shows an item lost, before the downloads, so
        // they do not hold the worker's load and admission slot (only the held call does).
        const settleRetrying = (): void => {
          if (settled) return;
          settled = true;
          receipt.settle({ promptTokens: null, cachedTokens: null, outcome: "error", retrying: true });
        };
        let recovered = false;
        try {
          recovered = await input.recoverMedia(settleRetrying);
        } catch {
          recovered = false;
        }
        if (recovered) {
          settleRetrying();
          attempts++;
          // The worker is not at fault: it may take the request again (its cache holds the prefix).
          console.warn(JSON.stringify({ event: "media_recovered", worker: decision.workerId, requestId, traceId: trace.traceId, code: e.code }));
          lastError = e;
          continue;
        }
      }
      if (!settled) receipt.settle({ promptTokens: null, cachedTokens: null, outcome: e.code === "cancelled" ? "cancelled" : "error" });
      return errorResponse(e, input.showRouting ? { "x-request-id": requestId, "x-kvedge-worker": decision.workerId } : { "x-request-id": requestId });
    }
  }
  throw lastError ?? new NoWorkerAvailableError();
}
