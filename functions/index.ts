/**
 * The edge Worker: routes → handlers, nothing but wiring. All logic lives in src/.
 */
import "./wasm-shim.ts";
import { RoutingIndex } from "../durable-objects/routing-index.ts";
import { RateLimiter } from "../durable-objects/rate-limiter.ts";
import { ResponseStore } from "../durable-objects/response-store.ts";
import { handleResponsesRoute } from "../src/edge/responses/handler.ts";
import { handleCompletions } from "../src/edge/completions/handler.ts";
import { errorResponse, InvalidRequestError, NotFoundError, AuthenticationError, ConfigError } from "../src/api/errors.ts";
import { parseEdgeConfig, type BucketConfig, type EdgeConfig, type ModelConfig } from "../src/config/config.ts";
import { authorizeClient, bearerToken } from "../src/edge/auth.ts";
import { verifyRelayConnect } from "../src/relay-wire/relay-auth.ts";
import { clientNetwork, enforceRateLimit, rateLimitBucketName, rateLimitHeaders, requestLimitHeaders, type BucketKind } from "../src/edge/rate-limit.ts";
import { RateLeases } from "../src/edge/rate-lease.ts";
import { enforceTokenQuota, type TokenCounts } from "../src/edge/token-quota.ts";
import type { ClientRef } from "../src/edge/client-label.ts";
import { handleChatCompletions, type ChatDeps } from "../src/edge/chat.ts";
import { ReceiptOutbox } from "../src/edge/chat/receipt-outbox.ts";
import { handleAdminRoute, presentsAdminCredentials } from "../src/edge/admin-routes.ts";
import { preflightResponse, withCors } from "../src/edge/cors.ts";
import { dispatch, type Route } from "../src/edge/route-table.ts";
import { readinessResponse } from "../src/edge/readiness.ts";
import { requestPath } from "../src/edge/request-path.ts";
import { initHashing } from "../src/util/hash.ts";
import { shardObjectName } from "../src/routing-index/pool-address.ts";
import { relayConnectRequest, relayConnectTarget } from "../src/routing-index/front-door.ts";
import { startEdgeTrace, TRACE_RESPONSE_HEADER, type EdgeTrace } from "../src/util/trace-context.ts";

export { RoutingIndex, RateLimiter, ResponseStore };

export interface Env {
  ROUTING_INDEX: DurableObjectNamespace<RoutingIndex>;
  KVEDGE_MODELS?: string;
  KVEDGE_LIMITS?: string;
  KVEDGE_ROUTING?: string;
  RELAY_SECRET?: string;
  ADMIN_TOKEN?: string;
  KVEDGE_API_KEYS?: string;
  /** Rate limits (on by default; "off" or JSON, src/config/config.ts RateLimitsSchema). */
  KVEDGE_RATE_LIMIT?: string;
  RATE_LIMITER?: DurableObjectNamespace<RateLimiter>;
  /** Stored Responses, one object per tenant (durable-objects/response-store.ts); absent: `store` is off. */
  RESPONSE_STORE?: DurableObjectNamespace<ResponseStore>;
}

let cached: { env: Env; config: EdgeConfig } | null = null;
/** The config, parsed once per env; an invalid one throws ConfigError on every request. */
function configOf(env: Env): EdgeConfig {
  if (cached?.env !== env) cached = { env, config: parseEdgeConfig(env as unknown as Record<string, unknown>) };
  return cached.config;
}
/** The env whose ConfigError was last logged: its field-naming message goes to the log once, clients get a generic one. */
let loggedBadConfig: Env | null = null;

/** The client's network as the edge sees it (Cloudflare sets cf-connecting-ip; absent in local tests). */
function networkOf(request: Request): string {
  return clientNetwork(request.headers.get("cf-connecting-ip"));
}

/** Takes one request from a bucket; a no-op with rate limiting off. Throws RateLimitedError (429); answers the chat bucket's `x-ratelimit-*-requests`. */
async function limit(env: Env, config: EdgeConfig, kind: BucketKind, client: ClientRef): Promise<Record<string, string>> {
  const limits = config.rateLimits;
  if (!limits) return {};
  const ns = env.RATE_LIMITER;
  // Fail closed: rate limiting on without its Durable Object binding is a deployment error.
  if (!ns) throw new ConfigError("Invalid configuration: rate limiting is on but the RATE_LIMITER binding is missing.");
  const cfg: BucketConfig = kind === "chat" ? { requestsPerMinute: limits.requestsPerMinute, burst: limits.burst } : kind === "auth" ? limits.authFailures : limits[kind];
  await initHashing();
  return requestLimitHeaders(cfg, await enforceRateLimit(rateLeases, rateLimitBucketName(kind, client), (name) => ns.getByName(name), cfg));
}

/** The isolate's rate-limit leases (src/edge/rate-lease.ts): a busy client's requests mostly need no call to its bucket. */
const rateLeases = new RateLeases();

/** The chat route's token quotas (src/edge/token-quota.ts); none with rate limiting off or no quota configured. */
async function tokenQuota(env: Env, config: EdgeConfig, client: ClientRef, tokens: TokenCounts): Promise<Record<string, string>> {
  const limits = config.rateLimits;
  const ns = env.RATE_LIMITER;
  if (!limits || (limits.inputTokensPerMinute === undefined && limits.outputTokensPerMinute === undefined)) return {};
  if (!ns) throw new ConfigError("Invalid configuration: rate limiting is on but the RATE_LIMITER binding is missing.");
  await initHashing();
  return enforceTokenQuota((kind) => ns.getByName(rateLimitBucketName(kind, client)), limits, tokens);
}

/** The isolate's receipt queue (src/edge/chat/receipt-outbox.ts): one for every request this isolate serves. */
const receiptOutbox = new ReceiptOutbox();

/** Shard `shard` of a pool's routing index; shard 0 is also the pool object (src/routing-index/pool-address.ts). */
function indexFor(env: Env, model: string, shard = 0): DurableObjectStub<RoutingIndex> {
  return env.ROUTING_INDEX.getByName(shardObjectName(model, shard));
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

async function handleRelayUpgrade(request: Request, env: Env, config: EdgeConfig): Promise<Response> {
  const url = new URL(request.url);
  const workerId = url.searchParams.get("worker") ?? "";
  const model = url.searchParams.get("model") ?? "";
  // Whether a pool exists is told only to a caller whose token verifies (signed with the secret): asked in the key lookup.
  const pool = (): ModelConfig => {
    const found = config.models.find((m) => m.id === model);
    if (!found) throw new NotFoundError(`Unknown model '${model.slice(0, 64)}'.`, "model", "model_not_found");
    return found;
  };
  if (!/^[A-Za-z0-9._:-]{1,128}$/.test(workerId)) throw new InvalidRequestError("Bad worker id.", "worker");
  if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") throw new InvalidRequestError("Expected a WebSocket upgrade.");
  const shardParam = url.searchParams.get("shard") ?? "0";
  const shard = /^\d{1,4}$/.test(shardParam) ? Number(shardParam) : -1;
  if (shard < 0 || shard >= config.shards)
    throw new InvalidRequestError(`Bad shard '${shardParam.slice(0, 16)}': this pool has ${config.shards} (0…${config.shards - 1}).`, "shard");
  // Signature, worker, pool, URL policy and freshness first, with no I/O (the token names its whole
  // binding); only a connect that passes spends the relay bucket and asks the pool object for the
  // key's registry row. The shard then accepts the token's nonce once.
  const check = await verifyRelayConnect(
    config.relaySecret,
    bearerToken(request),
    { workerId, model, audience: shardObjectName(model, shard), nowSeconds: Math.floor(Date.now() / 1000), allowHttp: config.relayAllowHttp },
    async (keyId) => {
      pool();
      await limit(env, config, "relay", { network: networkOf(request) });
      return indexFor(env, model).relayKey(keyId);
    },
  );
  if (!check.ok) throw new AuthenticationError(`Relay token refused (${check.reason}).`);
  const target = relayConnectTarget(workerId, url.searchParams.get("rank"), check.record.dpSize);
  if (!target.ok) throw new InvalidRequestError(target.message, "rank", target.code ?? undefined);
  const connect = relayConnectRequest({
    workerId: target.targetId,
    nonce: check.nonce,
    expiresAt: check.expiresAt,
    keyId: check.record.keyId,
    url: check.record.url,
    pool: model,
    shard,
    blockSize: pool().blockSize,
    dpSize: check.record.dpSize,
    storageGroup: check.record.storageGroup,
  });
  const res = await indexFor(env, model, shard).fetch(connect);
  if (res.status === 401) throw new AuthenticationError(`Relay token refused (${(await res.text()) || "replayed"}).`);
  return res;
}

/** One request as the route handlers see it. */
interface EdgeRequest {
  request: Request;
  /** The pathname without trailing slashes, worked out once in fetch(). */
  path: string;
  env: Env;
  ctx: ExecutionContext;
  config: EdgeConfig;
  /** A chat request's trace context. */
  trace: EdgeTrace | undefined;
}

/** The Worker's routes: path → method → handler (src/edge/route-table.ts answers 404 and 405). */
const ROUTES: readonly Route<EdgeRequest>[] = [
  { path: "/healthz", methods: { GET: healthz, HEAD: healthz } },
  { path: "/readyz", methods: { GET: readyz, HEAD: readyz } },
  { path: "/v1/models", methods: { GET: models, HEAD: models, OPTIONS: preflight } },
  { path: "/v1/chat/completions", methods: { POST: chatCompletions, OPTIONS: preflight } },
  { path: "/v1/completions", methods: { POST: completions, OPTIONS: preflight } },
  { path: "/v1/responses", methods: { POST: responses, OPTIONS: preflight } },
  { path: "/v1/responses/*", methods: { GET: responses, DELETE: responses, OPTIONS: preflight } },
  { path: "/v1/relay", methods: { "*": (r) => handleRelayUpgrade(r.request, r.env, r.config) } },
  { path: "/metrics", methods: { "*": operator } },
  { path: "/dashboard", methods: { "*": operator } },
  { path: "/dashboard/login", methods: { "*": operator } },
  { path: "/admin/*", methods: { "*": operator } },
];

/** A public route's CORS preflight (src/edge/cors.ts). */
function preflight(r: EdgeRequest): Response | null {
  return preflightResponse(r.request, r.path, r.config.cors);
}

function healthz(): Response {
  return json({ status: "ok" });
}

async function readyz(r: EdgeRequest): Promise<Response> {
  // It asks each pool's index object: throttled like the admin routes, which do too.
  await limit(r.env, r.config, "admin", { network: networkOf(r.request) });
  return readinessResponse(
    r.config.models.map((m) => m.id),
    (model) => indexFor(r.env, model).workers(),
  );
}

function models(r: EdgeRequest): Response {
  authorizeClient(r.request, r.config);
  // Each pool, then its LoRA adapters as "<pool>:<adapter>" (the name a request selects them by).
  const data = r.config.models.flatMap((m) => [
    { id: m.id, object: "model", created: 0, owned_by: m.ownedBy },
    ...m.loraAdapters.map((a) => ({ id: `${m.id}:${a}`, object: "model", created: 0, owned_by: m.ownedBy, parent: m.id })),
  ]);
  return json({ object: "list", data });
}

async function chatCompletions(r: EdgeRequest): Promise<Response> {
  await initHashing();
  return handleChatCompletions(r.request, { ...generateDeps(r), trace: r.trace });
}

/**
 * What every generate route (chat, completions, responses) is handed: one set, so each charges the
 * same request bucket and token quotas (per API key, else client network) and routes through the
 * same index and admission queue.
 */
function generateDeps(r: EdgeRequest): ChatDeps {
  const { request, env, config } = r;
  const client = (apiKey: string | null): ClientRef => (apiKey !== null ? { apiKey } : { network: networkOf(request) });
  return {
    config,
    index: (model, shard) => indexFor(env, model, shard),
    admissionIndex: (model, shard) => indexFor(env, model, shard),
    tokenQuota: (apiKey, tokens) => tokenQuota(env, config, client(apiKey), tokens),
    fetch: (input, init) => fetch(input, init),
    waitUntil: (p) => r.ctx.waitUntil(p),
    receiptOutbox,
    rateLimit: (apiKey) => limit(env, config, "chat", client(apiKey)),
  };
}

async function completions(r: EdgeRequest): Promise<Response> {
  await initHashing();
  return handleCompletions(r.request, generateDeps(r));
}

async function responses(r: EdgeRequest): Promise<Response | null> {
  await initHashing();
  const store = r.env.RESPONSE_STORE;
  return handleResponsesRoute(r.request, r.path, {
    ...generateDeps(r),
    ...(store ? { responseStore: (name: string) => store.getByName(name) } : {}),
  });
}

/** `/metrics`, `/dashboard`, `/admin/*` (src/edge/admin-routes.ts), behind the admin bucket. */
async function operator(r: EdgeRequest): Promise<Response> {
  const { request, env, config } = r;
  await limit(env, config, "admin", { network: networkOf(request) });
  await initHashing();
  const res = await handleAdminRoute(request, {
    config,
    index: (model, shard) => indexFor(env, model, shard),
    fetch: (input, init) => fetch(input, init),
  });
  // The dashboard answers a wrong token or a forged cookie with its sign-in page (401), not an
  // AuthenticationError: such attempts spend the auth bucket too (a bare first visit does not).
  if (res.status === 401 && presentsAdminCredentials(request, r.path)) await limit(env, config, "auth", { network: networkOf(request) });
  return res;
}

export default {
  async fetch(request, env, ctx): Promise<Response> {
    const path = requestPath(request.url);
    // CORS headers on answers and errors alike (a page must be able to read a 4xx); a config that
    // does not parse has no policy, so its error goes out without them.
    const cors = (res: Response): Response => (cached?.env === env ? withCors(res, request, path, cached.config.cors) : res);
    // A chat request's W3C trace context (src/util/trace-context.ts): the client's, or one started
    // here; its answers and errors alike name it to the client.
    const trace = path === "/v1/chat/completions" ? startEdgeTrace(request.headers.get("traceparent")) : undefined;
    const traced = (res: Response): Response => {
      if (trace) res.headers.set(TRACE_RESPONSE_HEADER, trace.header);
      return res;
    };
    try {
      return cors(traced(await dispatch(ROUTES, request.method, path, { request, path, env, ctx, config: configOf(env), trace })));
    } catch (err) {
      if (!(err instanceof Error) || !("type" in err)) console.error(JSON.stringify({ event: "unhandled", error: String(err), stack: err instanceof Error ? err.stack : undefined }));
      let e = err;
      // Failed authentication on any route spends a token of the client network's auth bucket;
      // an empty bucket turns further attempts into 429 (guessing is slowed, not just refused).
      if (err instanceof AuthenticationError && cached?.env === env)
        e = await limit(env, cached.config, "auth", { network: networkOf(request) }).then(
          () => err,
          (limited: unknown) => limited,
        );
      // After the auth bucket: a missing RATE_LIMITER binding surfaces there as a ConfigError too.
      if (e instanceof ConfigError && loggedBadConfig !== env) {
        console.error(JSON.stringify({ event: "bad_config", error: e.message }));
        loggedBadConfig = env;
      }
      return cors(traced(errorResponse(e, rateLimitHeaders(e))));
    }
  },
} satisfies ExportedHandler<Env>;
