/**
 * POST /v1/chat/completions at the edge, as a pipeline of named stages (src/edge/chat/), read in order:
 *   1 parse          chat/parse.ts          caller, rate limit, body → validated request
 *   2 resolve model  chat/resolve-model.ts  pool, LoRA adapter, cache namespace
 *   3 prompt         chat/prompt.ts         chat template, tokens, context limits   ┐ chat/prepare.ts
 *   4 media          chat/verify-media.ts   media parts → verified, stored bytes    │ (shared with
 *   5 layout         chat/layout.ts         routed token sequence → block hashes    ┘ admin explain)
 *   6 build          chat/upstream-body.ts  the worker's /generate body
 *   7 route          chat/route.ts          shard and pick (worker, overlap, receipt) ┐ chat/forward.ts
 *   8 proxy          chat/proxy.ts          /generate → the client's answer           │ (the retry loop;
 *   9 settle         chat/settle.ts         receipt, prefill done, quarantine         ┘ any endpoint)
 * Runtime-free: the index client, fetch and waitUntil are injected (functions/ wires them).
 */
import { contextTokensOf } from "../config/config.ts";
import { checkSamplingTokenIds } from "../api/sampling-limits.ts";
import { getQwenTokenizer } from "../prompt/tokenizer/index.ts";
import { chatOutputPlan, modelParsers } from "../proxy/chat-output.ts";
import { newRequestId, outputCap } from "../proxy/generate-request.ts";
import { startEdgeTrace, type EdgeTrace } from "../util/trace-context.ts";
import { routedHashes } from "./cache-salt.ts";
import { chatAnswer, costlyLogprobStream } from "./chat/chat-answer.ts";
import { forward, type ForwardDeps } from "./chat/forward.ts";
import { mediaDeps } from "./chat/media-deps.ts";
import { dropLeases } from "./media.ts";
import { recoverLeasedMedia } from "./chat/verify-media.ts";
import { parseChat, type ParseDeps } from "./chat/parse.ts";
import { prepareRouting, type PrepareDeps, type PreparedRouting } from "./chat/prepare.ts";
import { cacheTenant, resolveChatModel } from "./chat/resolve-model.ts";
import { edgeColoOf, routeTarget } from "./chat/route.ts";
import { admissionTicket } from "./chat/admission.ts";
import { affinityKeyOf } from "./chat/affinity.ts";
import { takeTokenQuota, withLimitHeaders, type TokenQuotaDeps } from "./token-quota.ts";
import type { AdmissionFrontDoor } from "../routing-index/front-door.ts";
import { chatUpstreamBody } from "./chat/upstream-body.ts";
import { checkedRoutedHashes } from "./chat/exactness-check.ts";
import { sampledCheck } from "./exactness.ts";
import { StageClock } from "./server-timing.ts";

export interface ChatDeps extends ParseDeps, PrepareDeps, ForwardDeps, TokenQuotaDeps {
  /** The request's W3C trace context at the edge (functions/ starts it, so error answers name it too); absent: started from the request's own `traceparent`. */
  trace?: EdgeTrace;
  /** The pool's admission queue (src/admission/); absent: every first pick is routed at once. */
  admissionIndex?(model: string, shard?: number): AdmissionFrontDoor;
  /** Called once the prompt is prepared (the Responses route keeps the conversation's prompt state from it). */
  onPrepared?(prepared: PreparedRouting): void;
}

export async function handleChatCompletions(request: Request, deps: ChatDeps): Promise<Response> {
  const { config } = deps;
  // workerd advances clocks only across I/O, so this measures what awaits cost (body, index RPC).
  const clock = new StageClock();
  const trace = deps.trace ?? startEdgeTrace(request.headers.get("traceparent"));
  const { caller, showRouting, req, limitHeaders, bodyText, literals, turn, work, address, client, partition } = await parseChat(request, deps, clock);
  const { model: pool, adapter, namespace } = await resolveChatModel(config, req.model, cacheTenant(caller, address));
  checkSamplingTokenIds(req, getQwenTokenizer(pool.family).vocabSize);
  const prepared = await prepareRouting(req, deps, partition, { client, signal: request.signal ?? null, traceparent: trace.header }, namespace.tag, bodyText, turn);
  const { model, prompt, plan, media } = prepared;
  clock.mark("prepare");
  deps.onPrepared?.(prepared);

  const parsers = modelParsers(model);
  const output = chatOutputPlan(req, parsers);
  const defaultMaxNewTokens = outputCap(config.limits.maxMaxTokens, { tokens: plan.isl, exact: plan.fallbackReason === null }, contextTokensOf(model), model.allowAutoTruncate);
  const outputBudget = req.max_completion_tokens ?? req.max_tokens ?? defaultMaxNewTokens ?? contextTokensOf(model);
  const costly = costlyLogprobStream(req, output, outputBudget);
  // Token quotas once the prompt is counted (src/edge/token-quota.ts): a refusal is a 429 before any routing.
  const quotaHeaders = await takeTokenQuota(deps, caller.apiKey, { input: plan.isl, output: outputBudget });
  const requestId = newRequestId();
  const bodyFor = await chatUpstreamBody({
    req,
    literals,
    promptText: prompt.text,
    promptPieces: prompt.pieces ?? null,
    requestId,
    defaultMaxNewTokens,
    parsers,
    plan,
    media,
    sign: mediaDeps(deps).sign,
    cacheSalt: namespace.cacheSalt,
    adapter,
    streamInterval: config.routing.streamInterval ?? null,
  });
  clock.mark("build");

  const routed = routedHashes(namespace, plan);
  const localHashes = sampledCheck(config.turnCheckRate) ? checkedRoutedHashes(routed, namespace, plan) : routed;
  const ticket = admissionTicket({ requestId, serviceTier: req.service_tier, priority: req.priority, client, priorityAllowed: caller.admin || config.routing.admission.openPriority, decodeBudget: outputBudget });
  const target = routeTarget({
    index: (m, k) => deps.index(m, k),
    shards: config.shards,
    model: model.id,
    localHashes,
    isl: plan.isl,
    fallbackReason: plan.fallbackReason,
    edgeColo: edgeColoOf(request, config),
    traceId: trace.traceId,
    incrementalOnly: costly !== null,
    receiptOutbox: deps.receiptOutbox,
    waitUntil: deps.waitUntil,
    ...(deps.admissionIndex
      ? {
          admission: {
            index: (m, k) => deps.admissionIndex!(m, k),
            ticket,
            affinityKey: affinityKeyOf(ticket.tenant, {
              promptCacheKey: req.prompt_cache_key,
              sessionHeader: request.headers.get("x-session-id"),
              safetyIdentifier: req.safety_identifier,
              user: req.user,
            }),
            signal: request.signal ?? null,
            waitUntil: deps.waitUntil,
          },
        }
      : {}),
  });
  // Leases of a request that did not succeed are dropped, whatever ended it (the worker's error, a
  // deadline, every attempt failing or no worker): the next request asks the store about them.
  let answered = false;
  let answer: Response;
  try {
    answer = await forward(deps, {
      model: model.id,
      target,
      fallbackReason: plan.fallbackReason,
      bodyFor,
      answer: chatAnswer(req, output, requestId),
      requestId,
      trace,
      clientSignal: request.signal ?? null,
      showRouting,
      admin: caller.admin,
      clock,
      noneEligible: costly,
      // A worker that could not fetch an item forwarded on its lease (a store restarted without it):
      // the store is asked about those items, stores the lost ones again by URL, and the request is
      // sent once more, so a store restart is not the client's failure.
      ...(prepared.mediaLeased.length > 0
        ? { recoverMedia: (lost) => recoverLeasedMedia(prepared.mediaLeased, deps, { client, signal: request.signal ?? null, traceparent: trace.header }, lost) }
        : {}),
    });
    answered = answer.ok;
  } finally {
    if (!answered) dropLeases(prepared.mediaLeased);
  }
  // How much of the prompt the turn chain supplied (admin and debug only, like the routing headers).
  // And the work this request did: characters parsed and validated, characters the template rendered, tokens the tokenizer produced.
  if (showRouting) {
    answer.headers.set("x-kvedge-parsed-chars", String(work.parsedChars));
    answer.headers.set("x-kvedge-prompt-reused-messages", String(prompt.reusedMessages ?? 0));
    answer.headers.set("x-kvedge-prompt-rendered-chars", String(prompt.renderedChars));
    answer.headers.set("x-kvedge-prompt-encoded-tokens", String(prepared.encodedTokens));
  }
  return withLimitHeaders(answer, limitHeaders, quotaHeaders);
}
