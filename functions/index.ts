/**
 * The edge Worker: routes → handlers, nothing but wiring. All logic lives in src/.
 */
import "./wasm-shim.ts";
import { RoutingIndex } from "../durable-objects/routing-index.ts";
import { errorResponse, InvalidRequestError, MethodNotAllowedError, NotFoundError, AuthenticationError } from "../src/api/errors.ts";
import { parseEdgeConfig, type EdgeConfig } from "../src/api/config.ts";
import { timingSafeEqualString, bearerToken } from "../src/edge/auth.ts";
import { relayToken } from "../src/kv/relay-auth.ts";
import { handleChatCompletions, type IndexClient } from "../src/edge/chat.ts";
import { handleAdminRoute, type AdminIndexClient } from "../src/edge/admin-routes.ts";
import { initHashing } from "../src/util/hash.ts";

export { RoutingIndex };

export interface Env {
  ROUTING_INDEX: DurableObjectNamespace<RoutingIndex>;
  KVEDGE_MODELS?: string;
  KVEDGE_LIMITS?: string;
  KVEDGE_ROUTING?: string;
  RELAY_SECRET?: string;
  ADMIN_TOKEN?: string;
  KVEDGE_API_KEYS?: string;
}

let cached: { env: Env; config: EdgeConfig } | null = null;
function configOf(env: Env): EdgeConfig {
  if (cached?.env !== env) cached = { env, config: parseEdgeConfig(env as unknown as Record<string, unknown>) };
  return cached.config;
}

function indexFor(env: Env, model: string): DurableObjectStub<RoutingIndex> {
  return env.ROUTING_INDEX.getByName(model);
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

async function handleRelayUpgrade(request: Request, env: Env, config: EdgeConfig): Promise<Response> {
  const url = new URL(request.url);
  const workerId = url.searchParams.get("worker") ?? "";
  const model = url.searchParams.get("model") ?? "";
  const pool = config.models.find((m) => m.id === model);
  if (!pool) throw new NotFoundError(`Unknown model '${model}'.`, "model", "model_not_found");
  if (!/^[A-Za-z0-9._:-]{1,128}$/.test(workerId)) throw new InvalidRequestError("Bad worker id.", "worker");
  if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") throw new InvalidRequestError("Expected a WebSocket upgrade.");
  const token = bearerToken(request);
  if (!config.relaySecret || !token || !timingSafeEqualString(token, await relayToken(config.relaySecret, workerId)))
    throw new AuthenticationError("Relay token missing or invalid.");
  const headers = new Headers({ upgrade: "websocket", "x-kvedge-worker": workerId, "x-kvedge-block-size": String(pool.blockSize) });
  return indexFor(env, model).fetch(new Request("https://index/relay", { headers }));
}

async function route(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
  const config = configOf(env);
  const url = new URL(request.url);
  const path = url.pathname.replace(/\/+$/, "") || "/";
  const method = request.method;

  if (path === "/healthz") return json({ status: "ok" });
  if (path === "/v1/models") {
    if (method !== "GET") throw new MethodNotAllowedError("Use GET.");
    return json({ object: "list", data: config.models.map((m) => ({ id: m.id, object: "model", created: 0, owned_by: m.ownedBy })) });
  }
  if (path === "/v1/chat/completions") {
    if (method !== "POST") throw new MethodNotAllowedError("Use POST.");
    await initHashing();
    return handleChatCompletions(request, {
      config,
      index: (model) => indexFor(env, model) as unknown as IndexClient,
      fetch: (input, init) => fetch(input, init),
      waitUntil: (p) => ctx.waitUntil(p),
    });
  }
  if (path === "/v1/relay") return handleRelayUpgrade(request, env, config);
  if (path === "/metrics" || path === "/dashboard" || path.startsWith("/admin/")) {
    await initHashing();
    const res = await handleAdminRoute(request, {
      config,
      index: (model) => indexFor(env, model) as unknown as AdminIndexClient,
      fetch: (input, init) => fetch(input, init),
    });
    if (res) return res;
  }
  throw new NotFoundError(`No route for ${method} ${path}.`, null, "unknown_route");
}

export default {
  async fetch(request, env, ctx): Promise<Response> {
    try {
      return await route(request, env, ctx);
    } catch (err) {
      if (!(err instanceof Error) || !("type" in err)) console.error(JSON.stringify({ event: "unhandled", error: String(err), stack: err instanceof Error ? err.stack : undefined }));
      return errorResponse(err);
    }
  },
} satisfies ExportedHandler<Env>;
