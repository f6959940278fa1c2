/**
 * POST /v1/chat/completions at the edge: validate → prompt → tokens → block hashes → pick a worker
 * → proxy to its SGLang /generate → translate back to OpenAI → settle the routing receipt.
 * Runtime-free: the index client, fetch and waitUntil are injected (functions/ wires them).
 */
import {
  InvalidRequestError,
  KvedgeError,
  NoWorkerAvailableError,
  NotFoundError,
  UpstreamError,
  UpstreamTimeoutError,
  errorResponse,
} from "../api/errors.ts";
import { contextTokensOf, type EdgeConfig, type ModelConfig, type RoutingConfig } from "../config/config.ts";
import type { Limits } from "../api/limits.ts";
import { parseChatRequest, readBodyText } from "../api/validate.ts";
import type { ChatCompletionRequest } from "../api/openai-schema.ts";
import { parseToolsKeepingNumbers, preparePrompt } from "../prompt/index.ts";
import { sharedPrefixCache } from "../prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../prompt/tokenizer/index.ts";
import { localBlockHashes } from "../blocks/block-hash.ts";
import { shardForRequest } from "../block-index/shard.ts";
import type { RouteDecision, RouteRequest, SettleRequest } from "../routing-index/routing-core.ts";
import { buildGenerateBody, newRequestId, outputCap } from "../proxy/generate-request.ts";
import { bodyOfChunks, generateBodyChunks } from "../proxy/generate-body.ts";
import type { JsonLiteral } from "../util/json-scan.ts";
import { namespacedHashes, namespacedItemHash, routingNamespace, type CacheTenant } from "./cache-salt.ts";
import type { NamespaceTag } from "../blocks/block-hash.ts";
import { createChatStreamTranslator, translateGenerateHttp } from "../proxy/translate.ts";
import { cumulativeLogprobBytes, MAX_CUMULATIVE_LOGPROB_BYTES, maxCumulativeLogprobTokens } from "../proxy/stream-cost.ts";
import { guardUpstreamBody, readGuardedText } from "../proxy/upstream-guard.ts";
import { chatOutputPlan, modelParsers, requiresReasoning, type ChatOutputPlan } from "../proxy/chat-output.ts";
import { authorizeClient, type ClientIdentity } from "./auth.ts";
import { StageClock } from "./server-timing.ts";
import { mediaItems, needsWorkerForwards, storeSigner, verifyMedia, workerForwards, type MediaDeps, type MediaPartRef, type VerifiedMedia } from "./media.ts";
import { clientLabel, type ClientRef } from "./client-label.ts";
import { clientNetwork } from "./rate-limit.ts";
import { buildRoutingView, requestIneligibility, type RoutingView, type WorkerContract } from "../layout/index.ts";
import { mmHashesAllowed } from "../proxy/generate-request.ts";
import { SafeFetcher } from "../media/safe-fetch.ts";
import { DecodeClient } from "../media/decode-client.ts";
import { importMediaUrlKey } from "../media/signed-url.ts";
import { workerAuthHeaders } from "./worker-auth.ts";
import { startEdgeTrace, type EdgeTrace } from "../util/trace-context.ts";

/** What the edge needs from the routing index (the Durable Object stub satisfies it). */
export interface PoolCohort {
  cohort: { ok: true; contract: WorkerContract; digest: string } | { ok: false; reason: string; detail: string };
}

export interface IndexClient {
  route(req: RouteRequest): Promise<RouteDecision | null>;
  profile(): Promise<PoolCohort>;
  settle(req: SettleRequest): Promise<void>;
  /** The edge could not connect to the worker: route elsewhere for a while (RoutingCore.quarantine). */
  quarantine(workerId: string, reason: string): Promise<void>;
  /** The worker produced its first output: the request's prefill no longer queues others. */
  markPrefillDone(receiptId: string): Promise<void>;
}

export interface ChatDeps {
  config: EdgeConfig;
  /** Shard `shard` (default 0, the pool object) of a pool's routing index. */
  index(model: string, shard?: number): IndexClient;
  fetch(input: string, init: RequestInit): Promise<Response>;
  waitUntil(p: Promise<unknown>): void;
  /** Takes one request from the client's rate-limit bucket (null key = no API keys configured); rejects with 429. */
  rateLimit?: (apiKey: string | null) => Promise<void>;
  /** The request's W3C trace context at the edge (functions/ starts it, so error answers name it too); absent: started from the request's own `traceparent`. */
  trace?: EdgeTrace;
}

/** Why the request was not routed on its exact token sequence (null = exact). */
export type FallbackReason = string | null;

export interface RoutingPlan {
  localHashes: bigint[];
  isl: number;
  fallbackReason: FallbackReason;
  /** Forwarded to SGLang only when the exact layout was built (images first, then videos). */
  mmHashes: string[] | null;
  /** Exact media routing: the routed sequence (pad-valued) and each item's span (admin explain, tests). */
  view?: Pick<RoutingView, "tokens" | "spans" | "padValues">;
}

/** The configured request limits (parsed with the rest of the config, once per isolate). */
export function limitsOf(config: EdgeConfig): Limits {
  return config.limits;
}

/**
 * The chat request as the handler reads it: validated, and when it has tools, each tool's
 * `parameters` (free-form JSON the template prints) re-read from the body keeping every number's
 * JSON lexeme. SGLang's `json.loads` keeps `0.0` a float and the template's `tojson` prints `0.0`
 * where a JS number would print `0` (a different prompt), so only the lexeme gives the worker's
 * tools block (docs/prompt.md, number policy). The rest of each tool stays as validated.
 */
export function parseChatBody(bodyText: string, limits: Limits, opts: { sizeChecked?: boolean; literals?: JsonLiteral[] } = {}): ChatCompletionRequest {
  const req = parseChatRequest(bodyText, limits, opts);
  if (req.tools && req.tools.length > 0) {
    const raw = parseToolsKeepingNumbers(bodyText);
    if (raw && raw.length === req.tools.length) {
      req.tools = req.tools.map((t, i) => {
        const params = (raw[i] as { function?: { parameters?: unknown } } | null)?.function?.parameters;
        return params && typeof params === "object" && !Array.isArray(params) ? { ...t, function: { ...t.function, parameters: params as Record<string, unknown> } } : t;
      });
    }
  }
  return req;
}

function modelConfig(config: EdgeConfig, model: string): ModelConfig {
  return resolveModel(config, model).model;
}

/** `<pool id>` or `<pool id>:<adapter>` (SGLang's OpenAI "base:adapter" form) → the pool and adapter. */
export function resolveModel(config: EdgeConfig, requested: string): { model: ModelConfig; adapter: string | null } {
  const exact = config.models.find((x) => x.id === requested);
  if (exact) return { model: exact, adapter: null };
  const colon = requested.lastIndexOf(":");
  if (colon > 0) {
    const base = config.models.find((x) => x.id === requested.slice(0, colon));
    const adapter = requested.slice(colon + 1);
    if (base?.loraAdapters.includes(adapter)) return { model: base, adapter };
  }
  throw new NotFoundError(`The model '${requested}' does not exist.`, "model", "model_not_found");
}

/**
 * A media request routed without its exact layout (`fallbackReason` says why): only the text
 * before the first media placeholder can be predicted. (Text-only requests hash their own tokens
 * through the prompt-prefix cache; exact media requests hash the layout's view.)
 */
function textPrefixPlan(tokens: readonly number[], blockSize: number, visionStartId: number, fallbackReason: string): RoutingPlan {
  const cut = tokens.indexOf(visionStartId);
  const prefix = cut < 0 ? tokens : tokens.slice(0, cut);
  return { localHashes: localBlockHashes(prefix, blockSize), isl: tokens.length, fallbackReason, mmHashes: null };
}

/** Per-isolate cache of each pool's cohort (a DO round trip per request would be wasteful). */
const cohortCache = new Map<string, { at: number; value: PoolCohort }>();
async function poolCohort(index: IndexClient, model: string, ttlMs: number): Promise<PoolCohort> {
  const hit = cohortCache.get(model);
  const now = Date.now();
  if (hit && now - hit.at < ttlMs) return hit.value;
  const value = await index.profile();
  cohortCache.set(model, { at: now, value });
  return value;
}

let mediaDepsCache: { config: EdgeConfig; deps: MediaDeps } | null = null;
function mediaDeps(deps: Pick<ChatDeps, "config" | "fetch">): MediaDeps {
  if (mediaDepsCache?.config !== deps.config) {
    const store = deps.config.mediaStore;
    const decode = new DecodeClient(deps.config.decode, (u, i) => deps.fetch(u, i));
    const key = decode.configured && store.urlKey && store.publicUrl ? importMediaUrlKey(store.urlKey) : null;
    key?.catch(() => undefined);
    mediaDepsCache = {
      config: deps.config,
      deps: {
        fetcher: new SafeFetcher(deps.config.media, { fetch: (url, init) => deps.fetch(url, init) }),
        decode,
        inlineMaxBytes: store.inlineMaxBytes,
        sign: key ? storeSigner(store.publicUrl!, key, store.urlTtlSec) : null,
        forwardClientUrls: store.forwardClientUrls,
      },
    };
  }
  return mediaDepsCache.deps;
}

/**
 * Content part kinds in prompt order (messages are separated, so only parts within one message can
 * be adjacent) and any client-supplied media uuids.
 */
function requestShape(req: ChatCompletionRequest): { partTypes: string[]; uuids: string[] } {
  const partTypes: string[] = [];
  const uuids: string[] = [];
  for (const m of req.messages) {
    const c = (m as { content?: unknown }).content;
    partTypes.push("text");
    if (!Array.isArray(c)) continue;
    for (const part of c as { type?: string; uuid?: unknown }[]) {
      const t = part.type;
      partTypes.push(t === "image_url" || t === "input_image" ? "image" : t === "video_url" ? "video" : t === "input_audio" || t === "audio_url" ? "audio" : "text");
      if (typeof part.uuid === "string") uuids.push(part.uuid);
    }
  }
  return { partTypes, uuids };
}

/**
 * Exact media routing: the token view SGLang will cache (every media token = the item's pad value),
 * or the named reason it cannot be built, in which case the request routes on its text prefix.
 */
async function planMediaRouting(
  deps: Pick<ChatDeps, "config" | "fetch">,
  req: ChatCompletionRequest,
  tokens: readonly number[],
  media: readonly VerifiedMedia[],
  /** The media parts as the request names them (prompt order, as `media`), for errors about one item. */
  parts: readonly MediaPartRef[],
  model: ModelConfig,
  index: IndexClient,
  /** The request's cache namespace: item hashes (mm_hashes, pad values) move into it. */
  itemTag: NamespaceTag,
): Promise<RoutingPlan> {
  const tokenizer = getQwenTokenizer(model.family);
  const fallback = (reason: string) => textPrefixPlan(tokens, model.blockSize, tokenizer.specialIds.visionStart, reason);
  if (!deps.config.exactMedia) return fallback("exact_media_disabled");
  const { partTypes, uuids } = requestShape(req);
  const shape = requestIneligibility({
    partTypes,
    mmProcessorKwargs: (req as { mm_processor_kwargs?: unknown }).mm_processor_kwargs,
    mediaUuids: uuids,
  });
  if (shape) return fallback(shape.reason);
  if (!mmHashesAllowed(req)) return fallback("n_greater_than_one");
  const { cohort } = await poolCohort(index, model.id, deps.config.routing.profileTtlMs);
  if (!cohort.ok) return fallback(cohort.reason);
  const resolved = mediaItems(media, cohort.digest);
  if (resolved.unresolved) return fallback(resolved.unresolved.reason);
  const items = resolved.items.map((it) => (it.hash === null ? it : { ...it, hash: namespacedItemHash(it.hash, itemTag) }));
  const view = buildRoutingView(cohort.contract, tokens, items, (t) => tokenizer.encode(t));
  if (!view.ok) {
    // The pool's own processor raises for this item (the transformers resize rules under its
    // contract, e.g. an aspect ratio above 200): the client's 400 here, naming the part, instead of
    // an opaque rejection from the worker.
    if (view.reason === "worker_would_reject" && view.item !== undefined) {
      const part = parts[view.item];
      throw new InvalidRequestError(`The model's processor cannot take this ${part?.kind ?? "media item"}: ${view.detail.replace(/^\w+: worker raises /, "")}.`, part?.param ?? null, "media_unprocessable");
    }
    return fallback(view.reason);
  }
  return {
    localHashes: localBlockHashes(view.tokens, model.blockSize),
    isl: view.tokens.length,
    fallbackReason: null,
    mmHashes: view.mmHashes,
    view: { tokens: view.tokens, spans: view.spans, padValues: view.padValues },
  };
}

function routingHeaders(d: RouteDecision, plan: RoutingPlan, requestId: string, attempts: number, shard: number): Headers {
  const h = new Headers({
    "x-request-id": requestId,
    "x-kvedge-worker": d.workerId,
    "x-kvedge-overlap-blocks": String(d.overlapBlocks),
    "x-kvedge-total-blocks": String(d.totalBlocks),
    "x-kvedge-receipt": d.receiptId,
    "x-kvedge-routing": plan.fallbackReason === null ? "exact" : "text_prefix",
    "x-kvedge-attempts": String(attempts),
  });
  if (plan.fallbackReason) h.set("x-kvedge-fallback-reason", plan.fallbackReason);
  if (shard > 0) h.set("x-kvedge-shard", String(shard));
  return h;
}

/** A failure where the worker never produced output: safe to send the request elsewhere. */
class RetryableUpstream extends Error {
  /** No connection to the worker: keep other requests away from it for a while too. */
  readonly unreachable: boolean;
  constructor(message: string, unreachable: boolean) {
    super(message);
    this.unreachable = unreachable;
  }
}

export interface PreparedRouting {
  model: ModelConfig;
  prompt: ReturnType<typeof preparePrompt>;
  /** Template tokens before media expansion (text-only: the routed sequence itself). */
  tokens: number[];
  plan: RoutingPlan;
  index: IndexClient;
  /** Media as the worker receives it (verified bytes only), prompt order. */
  media: VerifiedMedia[];
}

/**
 * Everything up to the pick: template → tokens → media identity → layout → block hashes. Shared by
 * the chat handler and the admin `explain` endpoint so both always agree.
 */
export async function prepareRouting(
  req: ChatCompletionRequest,
  deps: Pick<ChatDeps, "config" | "index" | "fetch">,
  /** Whose request it is (the media store's fair share) and when it has gone; none for admin explain. */
  caller: { client: ClientRef | null; signal: AbortSignal | null; traceparent?: string | null } | null = null,
  /** The request's cache namespace (cache-salt.ts routingNamespace): media item hashes move into it. */
  itemTag: NamespaceTag = null,
): Promise<PreparedRouting> {
  const model = modelConfig(deps.config, req.model);
  const prompt = preparePrompt(req, { family: model.family, templateId: model.templateId });
  checkPromptChars(prompt.text.length, model, limitsOf(deps.config));
  const tokenizer = getQwenTokenizer(model.family);
  if (prompt.mediaParts.length === 0) {
    // Text: earlier turns' tokens and block hashes come from the isolate's prompt-prefix cache (exact:
    // the same as encode + localBlockHashes). The ids are built only if asked for (admin explain).
    const encoded = sharedPrefixCache().encode(tokenizer, prompt.text, model.blockSize);
    if (encoded.length === 0) throw new InvalidRequestError("The prompt is empty.", "messages");
    checkContextFit(encoded.length, req, model);
    const plan: RoutingPlan = { localHashes: encoded.localHashes, isl: encoded.length, fallbackReason: null, mmHashes: null };
    let ids: number[] | null = null;
    return {
      model,
      prompt,
      get tokens() {
        return (ids ??= encoded.tokens());
      },
      plan,
      index: deps.index(model.id),
      media: [],
    };
  }
  const tokens = tokenizer.encode(prompt.text, prompt.text.length);
  if (tokens.length === 0) throw new InvalidRequestError("The prompt is empty.", "messages");
  checkPromptTokens(tokens.length, model);
  const index = deps.index(model.id);
  const parts: MediaPartRef[] = prompt.mediaParts.map((p) => ({
    kind: p.kind,
    url: p.url,
    param: `messages[${p.messageIndex}].content[${p.partIndex}]`,
  }));
  // Every item becomes verified bytes before anything else, whatever the routing outcome.
  const media = await verifyMedia(parts, mediaDeps(deps), { client: caller?.client ? clientLabel(caller.client) : null, signal: caller?.signal ?? null, traceparent: caller?.traceparent ?? null });
  const plan = await planMediaRouting(deps, req, tokens, media, parts, model, index, itemTag);
  // The worker counts expanded media tokens: exact when the plan is, else the text tokens are a lower bound.
  checkContextFit(plan.fallbackReason === null ? plan.isl : tokens.length, req, model);
  return { model, prompt, tokens, plan, index, media };
}

/** Longest token of the Qwen2/2.5/3 vocabularies, in UTF-16 units (a run of 128 spaces). */
const MAX_TOKEN_CHARS = 128;

/**
 * Before tokenizing: the rendered prompt within `maxPromptChars`, and not so long that even at the
 * longest token it could not fit the context (both bound the tokenizer's work per request).
 */
function checkPromptChars(chars: number, model: ModelConfig, limits: Limits): void {
  const context = contextTokensOf(model);
  if (chars > limits.maxPromptChars || chars > context * MAX_TOKEN_CHARS)
    throw new InvalidRequestError(
      `The rendered prompt is ${chars} characters, more than this endpoint accepts for '${model.id}' (limit ${Math.min(limits.maxPromptChars, context * MAX_TOKEN_CHARS)}).`,
      "messages",
      "context_length_exceeded",
    );
}

/** After tokenizing: SGLang refuses input_len ≥ context_len (tokenizer_manager _validate_one_request); refuse it here first. */
function checkPromptTokens(tokens: number, model: ModelConfig): void {
  if (model.allowAutoTruncate) return;
  const context = contextTokensOf(model);
  if (tokens >= context)
    throw new InvalidRequestError(
      `The input (${tokens} tokens) is longer than the model's context length (${context} tokens).`,
      "messages",
      "context_length_exceeded",
    );
}

/**
 * SGLang also refuses input + max_new_tokens ≥ context_len (same function) unless its workers run
 * with --allow-auto-truncate (then they clamp; `allowAutoTruncate` in the model config): with the
 * prompt's token count (exact, or a lower bound, so a refusal here is one the worker would make),
 * say so with both numbers instead of forwarding a request that can only fail.
 */
function checkContextFit(promptTokens: number, req: ChatCompletionRequest, model: ModelConfig): void {
  checkPromptTokens(promptTokens, model);
  if (model.allowAutoTruncate) return;
  const maxNew = req.max_completion_tokens ?? req.max_tokens;
  if (maxNew === undefined || maxNew === null) return;
  const context = contextTokensOf(model);
  const field = req.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  if (promptTokens + maxNew >= context)
    throw new InvalidRequestError(
      `The input (${promptTokens} tokens) plus the completion (${maxNew} tokens) is ${promptTokens + maxNew} tokens, which does not fit the model's context length (${context} tokens): lower ${field} or shorten the messages.`,
      field,
      "context_length_exceeded",
    );
}

export async function handleChatCompletions(request: Request, deps: ChatDeps): Promise<Response> {
  const { config } = deps;
  // workerd advances clocks only across I/O, so this measures what awaits cost (body, index RPC).
  const clock = new StageClock();
  const arrivedAt = clock.start;
  const caller = authorizeClient(request, config);
  const trace = deps.trace ?? startEdgeTrace(request.headers.get("traceparent"));
  // Routing headers reveal topology and other tenants' cached prefixes: admin callers or debug only.
  const showRouting = caller.admin || config.debugHeaders;
  // The rate-limit verdict comes before the body is read: a refused client cannot make the edge
  // read, buffer or parse up to maxBodyBytes (or wait on a body that never ends).
  await deps.rateLimit?.(caller.apiKey);
  const limits = limitsOf(config);
  const bodyText = await readBodyText(request, limits);
  clock.mark("read");
  // Long message texts whose JSON escaping can go to the worker as the client sent it (generate-body.ts).
  const literals: JsonLiteral[] = [];
  const req = parseChatBody(bodyText, limits, { sizeChecked: true, literals });
  clock.mark("parse");
  // Without a key or a client address (a local fleet) the edge cannot tell clients apart: no label.
  const address = request.headers.get("cf-connecting-ip");
  const client: ClientRef | null = caller.apiKey !== null ? { apiKey: caller.apiKey } : address ? { network: clientNetwork(address) } : null;
  // Tenant / adapter isolation: SGLang keeps a salted request's KV and media embeddings apart, and so does the index.
  const { adapter } = resolveModel(config, req.model);
  const namespace = await routingNamespace(config, { tenant: cacheTenant(caller, address), adapter });
  const { model, prompt, plan, media } = await prepareRouting(req, deps, { client, signal: request.signal ?? null, traceparent: trace.header }, namespace.tag);
  clock.mark("prepare");
  const { cacheSalt } = namespace;
  const localHashes = namespacedHashes(namespace, plan.localHashes);
  const parsers = modelParsers(model);
  const output = chatOutputPlan(req, parsers);
  const costly = costlyLogprobStream(req, output, req.max_completion_tokens ?? req.max_tokens ?? outputCap(limitsOf(config).maxMaxTokens, { tokens: plan.isl, exact: plan.fallbackReason === null }, contextTokensOf(model), model.allowAutoTruncate) ?? contextTokensOf(model));
  const requestId = newRequestId();
  // Stored media go to each worker under URLs signed for that worker only: with any, the body is built per attempt.
  const bodyFor = async (workerId: string): Promise<Blob> => {
    const body = buildGenerateBody(req, {
      text: prompt.text,
      rid: requestId,
      defaultMaxNewTokens: outputCap(limitsOf(config).maxMaxTokens, { tokens: plan.isl, exact: plan.fallbackReason === null }, contextTokensOf(model), model.allowAutoTruncate),
      requireReasoning: requiresReasoning(req, parsers),
      toolCallParser: parsers.toolCallParser,
      media: {
        ...(await workerForwards(media, mediaDeps(deps).sign, workerId)),
        ...(plan.mmHashes ? { mmHashes: plan.mmHashes } : {}),
      },
    });
    if (cacheSalt !== null) {
      body.cache_salt = cacheSalt;
      // Older SGLang /generate has no cache_salt (dropped silently) but namespaces by extra_key.
      body.extra_key = cacheSalt;
    }
    if (adapter !== null) body.lora_path = adapter;
    return bodyOfChunks(generateBodyChunks(body, literals));
  };
  const sharedBody = needsWorkerForwards(media) ? null : await bodyFor("");
  clock.mark("build");

  // A sharded pool: the shard of the first block holds every worker's overlap for this request.
  const shard = shardForRequest(localHashes, config.shards);
  const shardIndex = deps.index(model.id, shard);
  const exclude: string[] = [];
  let lastError: KvedgeError | null = null;
  // One buffer over the RPC instead of thousands of BigInts (serialized and read back per attempt).
  const routeHashes = BigUint64Array.from(localHashes);
  for (let attempt = 1; attempt <= config.routing.maxAttempts; attempt++) {
    const decision = await shardIndex.route({ localHashes: routeHashes, isl: plan.isl, exclude, fallbackReason: plan.fallbackReason, edgeColo: edgeColoOf(request), traceId: trace.traceId, ...(costly ? { incrementalOnly: true } : {}) });
    if (!decision && costly && attempt === 1) throw costly;
    if (!decision) break;
    const upstreamBody = sharedBody ?? (await bodyFor(decision.workerId));
    clock.mark("route");
    const edgeOverheadMs = Date.now() - arrivedAt;
    const settle = (s: Omit<SettleRequest, "receiptId">): Promise<void> => {
      const p = shardIndex.settle({ receiptId: decision.receiptId, edgeOverheadMs, ...s }).catch(() => undefined);
      deps.waitUntil(p);
      return p;
    };
    try {
      const prefillDone = () => deps.waitUntil(shardIndex.markPrefillDone(decision.receiptId).catch(() => undefined));
      const res = await proxyOnce(deps, decision, req, output, upstreamBody, requestId, config.routing, settle, config.shards > 1, prefillDone, request.signal ?? null, trace.header);
      const headers = showRouting ? routingHeaders(decision, plan, requestId, attempt, shard) : new Headers({ "x-request-id": requestId });
      clock.mark("upstream");
      for (const [k, v] of res.headers) headers.set(k, v);
      // Edge time before the upstream call (workerd clocks advance across I/O: body, index RPCs);
      // admin callers also get the stages (upstream = until the answer's headers, or all of it unstreamed).
      if (showRouting) headers.set("server-timing", `kvedge-route;dur=${edgeOverheadMs}${caller.admin ? `, ${clock.header()}` : ""}`);
      return new Response(res.body, { status: res.status, headers });
    } catch (err) {
      if (err instanceof RetryableUpstream) {
        settle({ promptTokens: null, cachedTokens: null, outcome: "error", retrying: attempt < config.routing.maxAttempts });
        // Every shard routes to this worker: tell them all. A quarantine, not "down": a lost pooled
        // connection or a blip says little, and a dead worker is reported down by its relay.
        if (err.unreachable)
          for (let k = 0; k < config.shards; k++)
            deps.waitUntil(deps.index(model.id, k).quarantine(decision.workerId, err.message).catch(() => undefined));
        exclude.push(decision.workerId);
        // The client learns that a worker failed, never which one or how (ids, addresses, texts).
        console.warn(JSON.stringify({ event: "worker_failed", worker: decision.workerId, requestId, traceId: trace.traceId, error: err.message.slice(0, 300) }));
        lastError = new UpstreamError("A worker failed before answering.", null, "worker_unavailable");
        continue;
      }
      const e = err instanceof KvedgeError ? err : new UpstreamError("The worker's answer could not be processed.");
      settle({ promptTokens: null, cachedTokens: null, outcome: e.code === "cancelled" ? "cancelled" : "error" });
      // The worker's own text stays in the logs; the client gets the sanitized message.
      if (typeof e.cause === "string") console.warn(JSON.stringify({ event: "upstream_error", requestId, traceId: trace.traceId, worker: decision.workerId, code: e.code, upstream: e.cause.slice(0, 1000) }));
      return errorResponse(e, showRouting ? { "x-request-id": requestId, "x-kvedge-worker": decision.workerId } : { "x-request-id": requestId });
    }
  }
  throw lastError ?? new NoWorkerAvailableError();
}

/**
 * A stream with logprobs whose cumulative frames would make the edge receive more than
 * MAX_CUMULATIVE_LOGPROB_BYTES (src/proxy/stream-cost.ts): it goes only to workers that stream
 * increments, and this is the client's 400 when the pool has none. Null when any worker will do.
 */
function costlyLogprobStream(req: ChatCompletionRequest, output: ChatOutputPlan, maxNewTokens: number): InvalidRequestError | null {
  const top = req.top_logprobs ?? 0;
  if (!req.stream || !output.logprobs || cumulativeLogprobBytes(maxNewTokens, top, req.n) <= MAX_CUMULATIVE_LOGPROB_BYTES) return null;
  const field = req.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens";
  return new InvalidRequestError(
    `Streaming logprobs for up to ${maxNewTokens} tokens is refused here: this pool's workers resend every earlier position in each stream frame, which would cost the edge quadratic work. Set ${field} to at most ${maxCumulativeLogprobTokens(top, req.n)}${top > 0 ? ", lower top_logprobs" : ""}, or use stream: false (operators: run workers with --incremental-streaming-output).`,
    field,
    "logprobs_stream_too_costly",
  );
}

async function proxyOnce(
  deps: ChatDeps,
  d: RouteDecision,
  req: ChatCompletionRequest,
  output: ChatOutputPlan,
  /** The `/generate` body (generate-body.ts). */
  upstreamBody: Blob,
  requestId: string,
  routing: RoutingConfig,
  settle: (s: Omit<SettleRequest, "receiptId">) => Promise<void>,
  /**
   * Sharded pool: hold a complete answer until its release has reached every shard, so a client's
   * next request never sees this one as load on a shard whose replica lags (docs/scale.md §3).
   */
  releaseBeforeReply: boolean,
  /** Called when a stream's first output arrives (its prefill is over; the TTFT cost stops counting it). */
  prefillDone: () => void,
  /** The client's request signal: the client going away aborts the upstream request. */
  clientSignal: AbortSignal | null,
  /**
   * The request's trace context with the edge's span. SGLang run with --enable-trace parents its
   * request span on it (TRACE_HEADERS, python/sglang/srt/tracing/trace.py L40, and its
   * trace_req_start; sgl-project/sglang@021a892).
   */
  traceparent: string,
): Promise<Response> {
  const abort = new AbortController();
  const deadlineAt = Date.now() + routing.upstreamDeadlineMs;
  if (clientSignal?.aborted) abort.abort();
  else clientSignal?.addEventListener("abort", () => abort.abort(), { once: true });
  const timer = setTimeout(() => abort.abort(), Math.min(routing.upstreamHeadersTimeoutMs, routing.upstreamDeadlineMs));
  // The body: idle timeout, total deadline, a size cap when buffered; cancelling it aborts the request.
  const guarded = (maxBytes?: number) =>
    guardUpstreamBody(upstream.body ?? new ReadableStream(), { idleMs: routing.upstreamIdleTimeoutMs, deadlineAt, abort, ...(maxBytes !== undefined ? { maxBytes } : {}) });
  // The worker's credential, bound to its registered URL; none configured: it is not called at all.
  const auth = await workerAuthHeaders(deps.config.workerAuth, d.url);
  if (auth === null) {
    clearTimeout(timer);
    throw new RetryableUpstream("the edge holds no credential for this worker (KVEDGE_WORKER_KEYS or KVEDGE_WORKER_KEY_SECRET)", false);
  }
  let upstream: Response;
  try {
    upstream = await deps.fetch(`${d.url}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent, ...auth },
      body: upstreamBody,
      signal: abort.signal,
    });
  } catch (err) {
    if (abort.signal.aborted) throw new UpstreamTimeoutError();
    // Connection refused/reset before any byte: nothing was processed (the worker may be gone).
    throw new RetryableUpstream(err instanceof Error ? err.message : String(err), true);
  } finally {
    clearTimeout(timer);
  }
  if (upstream.status === 401 || upstream.status === 403) {
    // The worker refused the edge's credential (a key not set, or rotated on one side only): an
    // operator's error the client cannot fix; another worker may still answer.
    await upstream.body?.cancel().catch(() => undefined);
    throw new RetryableUpstream(`worker refused the edge's credential (HTTP ${upstream.status})`, false);
  }
  const ctx = { id: `chatcmpl-${requestId}`, model: req.model, n: req.n, plan: output };

  if (!req.stream) {
    let text: string;
    try {
      text = await readGuardedText(guarded(routing.maxUpstreamBodyBytes));
    } catch (err) {
      // Cut by a deadline, the size cap or the client's going: not the worker's failure; not retried.
      if (err instanceof UpstreamTimeoutError || (err instanceof UpstreamError && (err.code === "upstream_too_large" || err.code === "cancelled"))) throw err;
      // The connection broke while the worker computed; the client has seen nothing yet. Retried
      // elsewhere, but not marked down: one request that makes a worker drop its connection must
      // not take workers out of the pool for everyone (a dead worker is seen by its relay, and by
      // the next connect that is refused).
      throw new RetryableUpstream(err instanceof Error ? err.message : String(err), false);
    }
    if (upstream.status === 503) throw new RetryableUpstream("worker overloaded (503)", false);
    try {
      const { completion, usage } = translateGenerateHttp(upstream.status, text, ctx);
      const settled = settle({ promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens, outcome: "ok" });
      if (releaseBeforeReply) await settled;
      return new Response(JSON.stringify(completion), { status: 200, headers: { "content-type": "application/json" } });
    } catch (err) {
      settle({ promptTokens: null, cachedTokens: null, outcome: "error" });
      throw err;
    }
  }

  if (upstream.status < 200 || upstream.status > 299) {
    if (upstream.status === 503) throw new RetryableUpstream("worker overloaded (503)", false);
    const text = await readGuardedText(guarded(routing.maxUpstreamBodyBytes)).catch(() => "");
    return translateGenerateHttp(upstream.status, text, ctx) as never; // throws the mapped error
  }
  if (!upstream.body) throw new RetryableUpstream("empty upstream body", false);
  const translator = createChatStreamTranslator({
    id: ctx.id,
    model: req.model,
    n: req.n,
    incremental: d.incrementalStreaming,
    includeUsage: req.stream_options?.include_usage === true,
    plan: output,
    holdEndUntilFinished: releaseBeforeReply,
    onFinish: (o) =>
      settle({
        promptTokens: o.usage?.prompt_tokens ?? null,
        cachedTokens: o.usage?.cached_tokens ?? null,
        // The client's going can reach the translator first as the upstream read it cut (request.signal).
        outcome: o.status === "completed" ? "ok" : o.status === "client_cancelled" || o.error?.code === "cancelled" ? "cancelled" : "error",
      }),
  });
  guarded().pipeTo(translator.writable).catch(() => undefined);
  const early = await translator.ready;
  if (early) {
    await translator.readable.cancel().catch(() => undefined);
    // Cut before any output: another worker can still answer in full.
    if (early instanceof UpstreamError && early.upstreamStatus === null) throw new RetryableUpstream(early.message, false);
    throw early;
  }
  prefillDone();
  return new Response(translator.readable, {
    status: 200,
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
  });
}

/**
 * Whose cache namespace a `/v1` caller uses: its API key's, the admin callers' own, or, keyless on a
 * public endpoint, its client network's (/64, /32; "unknown" without an address, as outside Cloudflare).
 */
export function cacheTenant(caller: ClientIdentity, address: string | null): CacheTenant {
  if (caller.admin) return { admin: true };
  if (caller.apiKey !== null) return { apiKey: caller.apiKey };
  return { network: clientNetwork(address) };
}

/** The Cloudflare colo serving this request (regions: src/selection/regions.ts); null outside Cloudflare. */
function edgeColoOf(request: Request): string | null {
  const colo = (request as { cf?: { colo?: unknown } }).cf?.colo;
  return typeof colo === "string" ? colo : null;
}
