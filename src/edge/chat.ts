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
import type { EdgeConfig, ModelConfig } from "../api/config.ts";
import { parseLimits, type Limits } from "../api/limits.ts";
import { parseChatRequest, readBodyText } from "../api/validate.ts";
import type { ChatCompletionRequest } from "../api/openai-schema.ts";
import { preparePrompt } from "../prompt/index.ts";
import { getQwenTokenizer } from "../prompt/tokenizer/index.ts";
import { localBlockHashes } from "../kv/block-hash.ts";
import type { RouteDecision, RouteRequest, SettleRequest } from "../kv/routing-core.ts";
import { buildGenerateBody, newRequestId } from "../proxy/generate-request.ts";
import { createChatStreamTranslator, translateGenerateHttp } from "../proxy/translate.ts";
import { requireApiKey } from "./auth.ts";

/** What the edge needs from the routing index (the Durable Object stub satisfies it). */
export interface IndexClient {
  route(req: RouteRequest): Promise<RouteDecision | null>;
  settle(req: SettleRequest): Promise<void>;
  markDown(workerId: string, reason: string): Promise<void>;
}

export interface ChatDeps {
  config: EdgeConfig;
  index(model: string): IndexClient;
  fetch(input: string, init: RequestInit): Promise<Response>;
  waitUntil(p: Promise<unknown>): void;
}

/** Why the request was not routed on its exact token sequence (null = exact). */
export type FallbackReason = string | null;

interface RoutingPlan {
  localHashes: bigint[];
  isl: number;
  fallbackReason: FallbackReason;
}

let limitsCache: { src: Record<string, unknown>; limits: Limits } | null = null;
function limitsOf(config: EdgeConfig): Limits {
  if (limitsCache?.src !== config.limitsOverride) limitsCache = { src: config.limitsOverride, limits: parseLimits(config.limitsOverride) };
  return limitsCache.limits;
}

function modelConfig(config: EdgeConfig, model: string): ModelConfig {
  const m = config.models.find((x) => x.id === model);
  if (!m) throw new NotFoundError(`The model '${model}' does not exist.`, "model", "model_not_found");
  return m;
}

/**
 * The token view the index is asked about. Text-only: the prompt's own tokens. With media, until
 * the exact layout is built, only the text before the first media placeholder can be predicted.
 */
export function planRouting(tokens: readonly number[], blockSize: number, visionStartId: number, hasMedia: boolean): RoutingPlan {
  if (!hasMedia) return { localHashes: localBlockHashes(tokens, blockSize), isl: tokens.length, fallbackReason: null };
  const cut = tokens.indexOf(visionStartId);
  const prefix = cut < 0 ? tokens : tokens.slice(0, cut);
  return { localHashes: localBlockHashes(prefix, blockSize), isl: tokens.length, fallbackReason: "media_layout_unavailable" };
}

function routingHeaders(d: RouteDecision, plan: RoutingPlan, requestId: string, attempts: number): Headers {
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
  return h;
}

/** A failure where the worker never produced output: safe to send the request elsewhere. */
class RetryableUpstream extends Error {
  readonly markDown: boolean;
  constructor(message: string, markDown: boolean) {
    super(message);
    this.markDown = markDown;
  }
}

export async function handleChatCompletions(request: Request, deps: ChatDeps): Promise<Response> {
  const { config } = deps;
  requireApiKey(request, config.apiKeys);
  const limits = limitsOf(config);
  const bodyText = await readBodyText(request.body, limits, request.headers.get("content-length"));
  const req = parseChatRequest(bodyText, limits);
  const model = modelConfig(config, req.model);
  const prompt = preparePrompt(req, { family: model.family, templateId: model.templateId });
  const tokenizer = getQwenTokenizer(model.family);
  const tokens = tokenizer.encode(prompt.text);
  if (tokens.length === 0) throw new InvalidRequestError("The prompt is empty.", "messages");
  const plan = planRouting(tokens, model.blockSize, tokenizer.specialIds.visionStart, prompt.mediaParts.length > 0);
  const index = deps.index(model.id);
  const requestId = newRequestId();
  const body = buildGenerateBody(req, {
    text: prompt.text,
    rid: requestId,
    media: {
      imageData: prompt.mediaParts.filter((p) => p.kind === "image").map((p) => p.url),
      videoData: prompt.mediaParts.filter((p) => p.kind === "video").map((p) => p.url),
    },
  });
  const bodyJson = JSON.stringify(body);

  const exclude: string[] = [];
  let lastError: KvedgeError | null = null;
  for (let attempt = 1; attempt <= config.routing.maxAttempts; attempt++) {
    const decision = await index.route({ localHashes: plan.localHashes, isl: plan.isl, exclude, fallbackReason: plan.fallbackReason });
    if (!decision) break;
    const settle = (s: Omit<SettleRequest, "receiptId">) => deps.waitUntil(index.settle({ receiptId: decision.receiptId, ...s }).catch(() => undefined));
    try {
      const res = await proxyOnce(deps, decision, req, bodyJson, requestId, config.routing.upstreamHeadersTimeoutMs, settle);
      const headers = routingHeaders(decision, plan, requestId, attempt);
      for (const [k, v] of res.headers) headers.set(k, v);
      return new Response(res.body, { status: res.status, headers });
    } catch (err) {
      if (err instanceof RetryableUpstream) {
        settle({ promptTokens: null, cachedTokens: null, outcome: "error" });
        if (err.markDown) deps.waitUntil(index.markDown(decision.workerId, err.message).catch(() => undefined));
        exclude.push(decision.workerId);
        lastError = new UpstreamError(`Worker ${decision.workerId} failed before answering: ${err.message}`, null, "worker_unavailable");
        continue;
      }
      settle({ promptTokens: null, cachedTokens: null, outcome: "error" });
      const e = err instanceof KvedgeError ? err : new UpstreamError("The worker's answer could not be processed.");
      return errorResponse(e, { "x-request-id": requestId, "x-kvedge-worker": decision.workerId });
    }
  }
  throw lastError ?? new NoWorkerAvailableError();
}

async function proxyOnce(
  deps: ChatDeps,
  d: RouteDecision,
  req: ChatCompletionRequest,
  bodyJson: string,
  requestId: string,
  headersTimeoutMs: number,
  settle: (s: Omit<SettleRequest, "receiptId">) => void,
): Promise<Response> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), headersTimeoutMs);
  let upstream: Response;
  try {
    upstream = await deps.fetch(`${d.url}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: bodyJson,
      signal: abort.signal,
    });
  } catch (err) {
    if (abort.signal.aborted) throw new UpstreamTimeoutError();
    // Connection refused/reset before any byte: the worker is gone, nothing was processed.
    throw new RetryableUpstream(err instanceof Error ? err.message : String(err), true);
  } finally {
    clearTimeout(timer);
  }
  const ctx = { id: `chatcmpl-${requestId}`, model: req.model, n: req.n };

  if (!req.stream) {
    let text: string;
    try {
      text = await upstream.text();
    } catch (err) {
      // The worker died while computing; the client has seen nothing yet.
      throw new RetryableUpstream(err instanceof Error ? err.message : String(err), true);
    }
    if (upstream.status === 503) throw new RetryableUpstream("worker overloaded (503)", false);
    try {
      const { completion, usage } = translateGenerateHttp(upstream.status, text, ctx);
      settle({ promptTokens: usage.prompt_tokens, cachedTokens: usage.cached_tokens, outcome: "ok" });
      return new Response(JSON.stringify(completion), { status: 200, headers: { "content-type": "application/json" } });
    } catch (err) {
      settle({ promptTokens: null, cachedTokens: null, outcome: "error" });
      throw err;
    }
  }

  if (upstream.status < 200 || upstream.status > 299) {
    if (upstream.status === 503) throw new RetryableUpstream("worker overloaded (503)", false);
    const text = await upstream.text().catch(() => "");
    return translateGenerateHttp(upstream.status, text, ctx) as never; // throws the mapped error
  }
  if (!upstream.body) throw new RetryableUpstream("empty upstream body", false);
  const translator = createChatStreamTranslator({
    id: ctx.id,
    model: req.model,
    n: req.n,
    includeUsage: req.stream_options?.include_usage === true,
    onFinish: (o) =>
      settle({
        promptTokens: o.usage?.prompt_tokens ?? null,
        cachedTokens: o.usage?.cached_tokens ?? null,
        outcome: o.status === "completed" ? "ok" : "error",
      }),
  });
  upstream.body.pipeTo(translator.writable).catch(() => undefined);
  const early = await translator.ready;
  if (early) {
    await translator.readable.cancel().catch(() => undefined);
    // Cut before any output: another worker can still answer in full.
    if (early instanceof UpstreamError && early.upstreamStatus === null) throw new RetryableUpstream(early.message, true);
    throw early;
  }
  return new Response(translator.readable, {
    status: 200,
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
  });
}
