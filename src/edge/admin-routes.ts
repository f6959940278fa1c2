/**
 * Operator routes: `/metrics` (Prometheus), `/dashboard` (HTML), `/admin/*` (JSON). All need the
 * admin token as `Authorization: Bearer <ADMIN_TOKEN>`. The dashboard also accepts a session
 * cookie, obtained once by POSTing the token to `/dashboard/login` (a form body, never a URL: a
 * token in a query string is refused). The cookie holds its expiry and an HMAC keyed by the token
 * over it (never the token itself), is HttpOnly and SameSite=Strict, expires after 12 h (checked
 * here, not only by the browser) and dies with the token's rotation; it authorises only the
 * read-only GET routes the page uses. Runtime-free: the index stubs are injected (functions/).
 */
import { AuthenticationError, InvalidRequestError, NotFoundError } from "../api/errors.ts";
import type { EdgeConfig } from "../config/config.ts";
import { readBodyText } from "../api/validate.ts";
import { getQwenTokenizer } from "../prompt/tokenizer/index.ts";
import type { ChatFrontDoor, OperatorFrontDoor, RelayKeyFrontDoor, RoutePreview } from "../routing-index/front-door.ts";
import { localHashToHex } from "../relay-wire/relay-protocol.ts";
import { EXPOSITION_CONTENT_TYPE } from "../metrics/exposition.ts";
import { renderMetrics, type PoolScrape } from "../metrics/pool-families.ts";
import { hitRate, type CohortView, type PoolMetricsSnapshot } from "../metrics/pool-snapshot.ts";
import { choiceReason } from "../metrics/decision-reason.ts";
import { dashboardHtml, dashboardLoginHtml } from "../dashboard/page.ts";
import { initHashing } from "../util/hash.ts";
import { shardForRequest } from "../routing-index/pool-address.ts";
import { DEFAULT_LOCAL_HASH_PAGE, MAX_LOCAL_HASH_PAGE, mergeLocalHashPages } from "../routing-index/front-door.ts";
import { mergeShardSnapshots, mergeShardWorkers } from "../metrics/merge-shards.ts";
import { bearerToken, matchApiKey } from "./auth.ts";
import { timingSafeEqualString } from "../util/constant-time.ts";
import { bytesToHex } from "../util/hex.ts";
import { hmacSha256 } from "../util/hmac.ts";
import { limitsOf, parseChatBody } from "./chat/parse.ts";
import { prepareRouting } from "./chat/prepare.ts";
import { resolveModel } from "./chat/resolve-model.ts";
import type { RoutingPlan } from "./chat/layout.ts";
import { namespacedHashes, routingNamespace, type CacheTenant } from "./cache-salt.ts";
import { clientNetwork } from "./rate-limit.ts";
import { sglangItemOrder } from "../layout/index.ts";
import { RELAY_KEY_ROUTES } from "./relay-key-routes.ts";
import { edgeCacheReport } from "./cache-budgets.ts";
import { exactnessStats } from "./exactness.ts";
import { sharedTurnChain } from "../prompt/turn-chain.ts";
import { dispatch, routeFor, type Route } from "./route-table.ts";
import { stripTrailing } from "../util/strip-trailing.ts";

/** What the operator routes ask of a pool's shard (explain plans a request as chat does). */
export type AdminFrontDoor = ChatFrontDoor & OperatorFrontDoor & RelayKeyFrontDoor;

export interface AdminDeps {
  config: EdgeConfig;
  /** Shard `shard` (default 0, the pool object) of a pool's routing index. */
  index(model: string, shard?: number): AdminFrontDoor;
  /** Outbound fetch (media identity for `explain`). */
  fetch(input: string, init: RequestInit): Promise<Response>;
}

export const SESSION_COOKIE = "kvedge_admin";
const SESSION_MAX_AGE_S = 12 * 3600;
/** Tokens shown at each end of the prompt by `explain`. */
const TOKEN_VIEW = 16;

/** One operator request as the route handlers see it. */
interface AdminCall {
  request: Request;
  url: URL;
  deps: AdminDeps;
}

/** Routes that check their own credential (the dashboard's session cookie, the login form). */
const OWN_AUTH_ROUTES: readonly Route<AdminCall>[] = [
  { path: "/metrics", methods: { GET: metricsRoute } },
  { path: "/dashboard", methods: { GET: (c) => dashboard(c.request, c.url, c.deps.config) } },
  { path: "/dashboard/login", methods: { POST: (c) => login(c.request, c.url, c.deps.config) } },
  { path: "/admin/overview", methods: { GET: overviewRoute } },
];

/** Every other `/admin/*` route: the admin token is checked before the path is looked at. */
const TOKEN_ROUTES: readonly Route<AdminCall>[] = [
  ...RELAY_KEY_ROUTES,
  { path: "/admin/explain", methods: { POST: explainRoute } },
  // These read pool state (worker URLs, contracts): GET only, never cached.
  { path: "/admin/workers", methods: { GET: workersRoute } },
  { path: "/admin/stats", methods: { GET: statsRoute } },
  { path: "/admin/shards", methods: { GET: shardsRoute } },
  // This isolate's caches (budgets, hits, work): per isolate, so a deployment's isolates each answer their own.
  { path: "/admin/edge-caches", methods: { GET: () => json(edgeCacheReport(), NO_STORE) } },
  { path: /^\/admin\/workers\/([^/]+)\/local-hashes$/, methods: { GET: (c, [worker]) => localHashesRoute(c, worker!) } },
  { path: /^\/admin\/workers\/([^/]+)\/drain$/, methods: { POST: (c, [worker]) => drainRoute(c, worker!) } },
  { path: /^\/admin\/workers\/([^/]+)\/undrain$/, methods: { POST: (c, [worker]) => undrainRoute(c, worker!) } },
];

/** Serves an operator route (`/metrics`, `/dashboard…`, `/admin/*`); an unknown one is 404 once the token passed. */
export async function handleAdminRoute(request: Request, deps: AdminDeps): Promise<Response> {
  const url = new URL(request.url);
  const path = stripTrailing(url.pathname, "/") || "/";
  const call: AdminCall = { request, url, deps };
  if (routeFor(OWN_AUTH_ROUTES, path)) return dispatch(OWN_AUTH_ROUTES, request.method, path, call);
  await requireAdminAuth(request, deps.config, false);
  return dispatch(TOKEN_ROUTES, request.method, path, call);
}

const NO_STORE = { "cache-control": "no-store" };

async function metricsRoute({ request, deps }: AdminCall): Promise<Response> {
  await requireAdminAuth(request, deps.config, false);
  return new Response(await scrape(deps), { headers: { "content-type": EXPOSITION_CONTENT_TYPE, "cache-control": "no-store" } });
}

async function overviewRoute({ request, deps }: AdminCall): Promise<Response> {
  await requireAdminAuth(request, deps.config, true);
  return json(await overview(deps), NO_STORE);
}

async function explainRoute({ request, url, deps }: AdminCall): Promise<Response> {
  const tokens = url.searchParams.get("tokens");
  if (tokens !== null && tokens !== "all") throw new InvalidRequestError("tokens must be 'all' (the whole routed sequence) or absent.", "tokens");
  return json(await explain(request, deps, tokens === "all"), NO_STORE);
}

/** The pool named by `?model=` (default: the first configured). */
function poolOf({ url, deps }: AdminCall): string {
  const model = url.searchParams.get("model") ?? deps.config.models[0]!.id;
  if (!deps.config.models.some((m) => m.id === model)) throw new NotFoundError(`Unknown model '${model}'.`, "model", "model_not_found");
  return model;
}

async function workersRoute(c: AdminCall): Promise<Response> {
  const model = poolOf(c);
  const lists = await Promise.all(allShards(c.deps, model).map((s) => s.workers()));
  // One shard: its rows as they are; more: blocks per shard, synced only where every shard is.
  return json({ model, workers: lists.length === 1 ? lists[0] : mergeShardWorkers(lists) }, NO_STORE);
}

async function statsRoute(c: AdminCall): Promise<Response> {
  const model = poolOf(c);
  const [stats, perShard] = await Promise.all([c.deps.index(model).stats(), Promise.all(allShards(c.deps, model).map((s) => s.shardInfo()))]);
  return json({ model, stats, shards: perShard }, NO_STORE);
}

async function shardsRoute(c: AdminCall): Promise<Response> {
  const model = poolOf(c);
  return json({ model, shards: await Promise.all(allShards(c.deps, model).map((s) => s.shardInfo())) }, NO_STORE);
}

function workerIdOf(encodedWorker: string): string {
  try {
    return decodeURIComponent(encodedWorker);
  } catch {
    throw new InvalidRequestError("The worker id in the path is not valid percent-encoding.", "worker");
  }
}

/**
 * Drains a worker on every shard (a rolling restart: drain, wait for activeRequests 0 in
 * /admin/workers, restart; its new life joins up). Answers the worker's row.
 */
async function drainRoute(c: AdminCall, encodedWorker: string): Promise<Response> {
  return setDrain(c, encodedWorker, true);
}

/** Puts a drained worker back on every shard without restarting it (a worker that is down stays down). Answers the worker's row. */
async function undrainRoute(c: AdminCall, encodedWorker: string): Promise<Response> {
  return setDrain(c, encodedWorker, false);
}

async function setDrain(c: AdminCall, encodedWorker: string, drain: boolean): Promise<Response> {
  const model = poolOf(c);
  const workerId = workerIdOf(encodedWorker);
  const shards = allShards(c.deps, model);
  const known = await Promise.all(shards.map((s) => (drain ? s.drainWorker(workerId) : s.undrainWorker(workerId))));
  if (!known.some(Boolean)) throw new NotFoundError(`Unknown worker '${workerId.slice(0, 128)}' in pool '${model}'.`, "worker", "worker_not_found");
  const lists = await Promise.all(shards.map((s) => s.workers()));
  const rows = lists.length === 1 ? lists[0]! : mergeShardWorkers(lists);
  return json({ model, worker: rows.find((w) => w.workerId === workerId) ?? null }, NO_STORE);
}

async function localHashesRoute(c: AdminCall, encodedWorker: string): Promise<Response> {
  const model = poolOf(c);
  const workerId = workerIdOf(encodedWorker);
  const known = (await c.deps.index(model).workers()).some((w) => w.workerId === workerId);
  if (!known) throw new NotFoundError(`Unknown worker '${workerId.slice(0, 128)}' in pool '${model}'.`, "worker", "worker_not_found");
  const cursor = c.url.searchParams.get("cursor");
  if (cursor !== null && !/^[0-9a-f]{16}$/.test(cursor)) throw new InvalidRequestError("cursor must be a page's nextCursor (16 lower-case hex digits).", "cursor");
  const limitParam = c.url.searchParams.get("limit");
  const limit = limitParam === null ? DEFAULT_LOCAL_HASH_PAGE : /^\d{1,5}$/.test(limitParam) ? Number(limitParam) : 0;
  if (limit < 1 || limit > MAX_LOCAL_HASH_PAGE) throw new InvalidRequestError(`limit must be a whole number 1…${MAX_LOCAL_HASH_PAGE}.`, "limit");
  const pages = await Promise.all(allShards(c.deps, model).map((s) => s.workerLocalHashes(workerId, cursor, limit)));
  return json({ workerId, ...mergeLocalHashPages(pages, limit) }, NO_STORE);
}

function allShards(deps: AdminDeps, model: string): AdminFrontDoor[] {
  return Array.from({ length: deps.config.shards }, (_, k) => deps.index(model, k));
}

// ---- auth ----

/** `<expires unix s>.<hex HMAC-SHA256(token, "kvedge-dashboard-session-v2:" + expires)>`. */
export async function sessionValue(adminToken: string, expiresAt: number): Promise<string> {
  return `${expiresAt}.${bytesToHex(await hmacSha256(adminToken, `kvedge-dashboard-session-v2:${expiresAt}`))}`;
}

/** A session cookie is valid when its MAC matches and its expiry is in the future (and not too far). */
async function sessionValid(cookie: string, adminToken: string, nowS: number): Promise<boolean> {
  const m = /^(\d{1,12})\.[0-9a-f]{64}$/.exec(cookie);
  if (!m) return false;
  const expiresAt = Number(m[1]);
  if (expiresAt <= nowS || expiresAt > nowS + SESSION_MAX_AGE_S) return false;
  return timingSafeEqualString(cookie, await sessionValue(adminToken, expiresAt));
}

function cookieOf(request: Request, name: string): string | null {
  const header = request.headers.get("cookie");
  if (!header) return null;
  for (const part of header.split(";")) {
    const i = part.indexOf("=");
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return null;
}

/**
 * Whether the request tries to sign in as the operator (the login form, a bearer, a session
 * cookie): a 401 to it is a failed authentication (functions/index.ts spends the auth bucket on it);
 * a first visit without any credential is not.
 */
export function presentsAdminCredentials(request: Request, path: string): boolean {
  return path === "/dashboard/login" || request.headers.has("authorization") || cookieOf(request, SESSION_COOKIE) !== null;
}

async function isAdmin(request: Request, config: EdgeConfig, allowCookie: boolean): Promise<boolean> {
  const token = config.adminToken;
  if (!token) return false;
  const bearer = bearerToken(request);
  if (bearer !== null) return timingSafeEqualString(bearer, token);
  if (!allowCookie) return false;
  const cookie = cookieOf(request, SESSION_COOKIE);
  return cookie !== null && (await sessionValid(cookie, token, Math.floor(Date.now() / 1000)));
}

async function requireAdminAuth(request: Request, config: EdgeConfig, allowCookie: boolean): Promise<void> {
  if (!(await isAdmin(request, config, allowCookie))) throw new AuthenticationError("Admin token required.");
}

// ---- dashboard ----

/** Trades the admin token (form body `token=…`, POSTed once) for the expiring session cookie. */
async function login(request: Request, url: URL, config: EdgeConfig): Promise<Response> {
  const text = await readBodyText(request, { maxBodyBytes: 4096 });
  const given = new URLSearchParams(text).get("token") ?? "";
  // Guessing is slowed like any failed authentication: this 401 spends the auth-failure bucket and an
  // empty one turns further attempts into 429 (functions/index.ts); the admin bucket bounds them too.
  if (!config.adminToken || !timingSafeEqualString(given, config.adminToken)) return html(dashboardLoginHtml("That token is not the admin token."), 401);
  const secure = url.protocol === "https:" ? "; Secure" : "";
  const value = await sessionValue(config.adminToken, Math.floor(Date.now() / 1000) + SESSION_MAX_AGE_S);
  const cookie = `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_MAX_AGE_S}${secure}`;
  return new Response(null, { status: 303, headers: { location: "/dashboard", "set-cookie": cookie, "cache-control": "no-store", "referrer-policy": "no-referrer" } });
}

async function dashboard(request: Request, url: URL, config: EdgeConfig): Promise<Response> {
  // Secrets never travel in URLs (logs, history, referrers): a token there is refused, not used.
  if (url.searchParams.has("token")) return html(dashboardLoginHtml("Tokens are not accepted in the address: sign in with the form."), 400);
  if (!(await isAdmin(request, config, true))) return html(dashboardLoginHtml(null), 401);
  const nonce = crypto.randomUUID().replace(/-/g, "");
  return html(dashboardHtml(nonce), 200, {
    "content-security-policy": `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  });
}

function html(body: string, status: number, extra: Record<string, string> = {}): Response {
  return new Response(body, {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "referrer-policy": "no-referrer",
      "x-content-type-options": "nosniff",
      "x-frame-options": "DENY",
      ...extra,
    },
  });
}

function json(body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { headers: { "content-type": "application/json", ...headers } });
}

// ---- metrics and overview ----

async function snapshots(deps: AdminDeps): Promise<PoolScrape[]> {
  return Promise.all(
    deps.config.models.map(async (m) => {
      try {
        const perShard = await Promise.all(allShards(deps, m.id).map((s) => s.metrics()));
        return { model: m.id, snapshot: mergeShardSnapshots(perShard) };
      } catch (err) {
        console.error(JSON.stringify({ event: "metrics_pool_failed", model: m.id, error: String(err) }));
        return { model: m.id, snapshot: null };
      }
    }),
  );
}

async function scrape(deps: AdminDeps): Promise<string> {
  return renderMetrics(await snapshots(deps), exactnessStats(sharedTurnChain().stats()));
}

export interface PoolOverview {
  model: string;
  configuredBlockSize: number;
  ok: boolean;
  hitRate: number | null;
  cohort: CohortView | null;
  snapshot: PoolMetricsSnapshot | null;
}

async function overview(deps: AdminDeps): Promise<{ generatedAt: number; models: PoolOverview[] }> {
  const pools = await snapshots(deps);
  return {
    generatedAt: Date.now(),
    models: pools.map((p) => ({
      model: p.model,
      configuredBlockSize: deps.config.models.find((m) => m.id === p.model)!.blockSize,
      ok: p.snapshot !== null,
      hitRate: p.snapshot ? hitRate(p.snapshot) : null,
      cohort: p.snapshot ? p.snapshot.cohort : null,
      snapshot: p.snapshot,
    })),
  };
}

// ---- explain ----

/**
 * The whole routed sequence (`?tokens=all`), for diffing kvedge against a worker's own ids: the ids
 * whose blocks are hashed (exact: the expanded prompt with every media token set to its item's pad
 * value; text-prefix fallback: the tokens before the first media placeholder), each media item's
 * span, pad value and mm_hash, and every block hash (in the request's cache namespace, as the index
 * keys them).
 */
function routedSequence(tokens: readonly number[], plan: RoutingPlan, blockHashes: readonly string[], visionStartId: number, kinds: readonly string[]): unknown {
  let ids: number[];
  if (plan.view) ids = Array.from(plan.view.tokens);
  else if (plan.fallbackReason === null) ids = tokens.slice();
  else {
    const cut = tokens.indexOf(visionStartId);
    ids = cut < 0 ? tokens.slice() : tokens.slice(0, cut);
  }
  const view = plan.view;
  // mm_hashes are in SGLang's item order (images, then videos); spans are in prompt order.
  const order = view ? sglangItemOrder(kinds.map((k) => ({ modality: k === "video" ? ("video" as const) : ("image" as const) }))) : [];
  const mmHashOf = new Map(order.map((item, k) => [item, plan.mmHashes?.[k] ?? null]));
  return {
    ids,
    items: view ? view.spans.map((s) => ({ kind: kinds[s.item], start: s.start, end: s.end, padValue: view.padValues[s.item], mmHash: mmHashOf.get(s.item) ?? null })) : [],
    blockHashes,
  };
}

/**
 * Names the tenant `explain` routes as: its API key, in a header (never the URL). Requests with a key
 * are routed in that tenant's cache namespace under per_tenant sharing, so without it an explain of
 * such a request would look at blocks it can never match.
 */
const TENANT_KEY_HEADER = "x-kvedge-tenant-key";
/** Names a keyless caller's address instead: such requests route in their client network's namespace (/64, /32). */
const CLIENT_IP_HEADER = "x-kvedge-client-ip";

function explainTenant(request: Request, config: EdgeConfig): string | null {
  const presented = request.headers.get(TENANT_KEY_HEADER);
  if (presented === null) return null;
  const found = config.apiKeys ? matchApiKey(presented, config.apiKeys) : null;
  if (found === null) throw new InvalidRequestError(`${TENANT_KEY_HEADER} is not one of the configured API keys.`, TENANT_KEY_HEADER);
  return found;
}

/**
 * Runs the edge pipeline of `POST /v1/chat/completions` up to the pick (validate → template →
 * tokens → routing plan → block hashes → index peek) and reports every step. Nothing is sent to a
 * worker and no load or receipt is added. `allTokens` adds the whole routed sequence (`routed`).
 */
async function explain(request: Request, deps: AdminDeps, allTokens = false): Promise<unknown> {
  await initHashing();
  // Checked before any work: a wrong key is the caller's mistake, not the request's.
  const tenant = explainTenant(request, deps.config);
  const limits = limitsOf(deps.config);
  const bodyText = await readBodyText(request, limits);
  const req = parseChatBody(bodyText, limits, { sizeChecked: true });
  // The namespace the request would be routed in, by the same rule as /v1/chat/completions: the
  // tenant named, else a keyless caller from the address named, else the pool's common one.
  const { adapter } = resolveModel(deps.config, req.model);
  const clientIp = request.headers.get(CLIENT_IP_HEADER);
  const cacheFor: CacheTenant = tenant !== null ? { apiKey: tenant } : clientIp !== null ? { network: clientNetwork(clientIp) } : null;
  const namespace = await routingNamespace(deps.config, { tenant: cacheFor, adapter });
  const { model, prompt, tokens, plan } = await prepareRouting(
    req,
    { config: deps.config, index: (m, k) => deps.index(m, k), fetch: deps.fetch },
    // The common partition: under per_tenant no /v1 caller reads it (security.md).
    "",
    null,
    namespace.tag,
  );
  const tokenizer = getQwenTokenizer(model.family);
  const { cacheSalt } = namespace;
  const localHashes = namespacedHashes(namespace, plan);
  const shard = shardForRequest(localHashes, deps.config.shards);
  const preview = await deps.index(model.id, shard).peek({ localHashes, isl: plan.isl });
  const view = (ids: number[]) => ids.map((id) => ({ id, text: tokenizer.decode([id]) }));
  const hashes = localHashes.map(localHashToHex);
  const chosen = preview.workerId;
  const warnings: string[] = [];
  if (cacheFor === null && deps.config.kvSharing === "per_tenant")
    warnings.push(
      `explained in the pool's common namespace: requests with an API key are routed in their tenant's own (send the key as ${TENANT_KEY_HEADER}), keyless ones in their client network's (send the address as ${CLIENT_IP_HEADER})`,
    );
  if (preview.candidates.length > 0 && preview.blockSize !== model.blockSize)
    warnings.push(`configured blockSize ${model.blockSize} differs from the index's ${preview.blockSize}: no prefix can match`);
  if (chosen === null) warnings.push("no worker is up: the request would fail with 503");
  return {
    model: model.id,
    routing: plan.fallbackReason === null ? "exact" : "text_prefix",
    fallbackReason: plan.fallbackReason,
    eligibility:
      plan.fallbackReason === null
        ? "exact: the routed token sequence is the one the worker will cache"
        : `text-prefix fallback (${plan.fallbackReason}): only the tokens before the first media placeholder are hashed`,
    namespace: {
      salted: cacheSalt !== null,
      tenant: tenant !== null && deps.config.kvSharing === "per_tenant",
      network: cacheFor !== null && "network" in cacheFor && deps.config.kvSharing === "per_tenant",
      adapter,
      sharing: deps.config.kvSharing,
    },
    prompt: { chars: prompt.text.length, mediaItems: prompt.mediaParts.map((p) => p.kind), mmHashes: plan.mmHashes },
    tokens: {
      count: tokens.length,
      /** Length of the sequence the index is asked about (with exact media: the expanded layout). */
      routed: plan.fallbackReason === null ? plan.isl : plan.localHashes.length * model.blockSize,
      head: view(tokens.slice(0, TOKEN_VIEW)),
      tail: tokens.length > TOKEN_VIEW ? view(tokens.slice(Math.max(TOKEN_VIEW, tokens.length - TOKEN_VIEW))) : [],
    },
    blocks: {
      blockSize: model.blockSize,
      total: hashes.length,
      partialTailTokens: plan.fallbackReason === null ? plan.isl % model.blockSize : null,
      first: hashes.slice(0, 4),
      last: hashes.length > 4 ? hashes.slice(-2) : [],
    },
    decision: {
      workerId: chosen,
      overlapBlocks: preview.overlapBlocks,
      predictedCachedTokens: Math.min(preview.overlapBlocks * preview.blockSize, plan.isl),
      tiedWith: preview.tiedWith,
      reason: chosen === null ? "no worker up" : choiceReason(chosen, preview.candidates, preview.totalBlocks),
      // HiCache: where the credited blocks are; the storage view is an estimate (SGLang reports no L3 events).
      ...(preview.hostBlocks || preview.storageBlocks
        ? { tiers: { gpuBlocks: preview.overlapBlocks - (preview.hostBlocks ?? 0) - (preview.storageBlocks ?? 0), hostBlocks: preview.hostBlocks ?? 0, storageBlocks: preview.storageBlocks ?? 0, storageApproximate: (preview.storageBlocks ?? 0) > 0 } }
        : {}),
    },
    candidates: preview.candidates,
    ...(deps.config.shards > 1 ? { shard: { index: shard, of: deps.config.shards } } : {}),
    ...(allTokens ? { routed: routedSequence(tokens, plan, hashes, tokenizer.specialIds.visionStart, prompt.mediaParts.map((p) => p.kind)) } : {}),
    warnings,
  };
}
