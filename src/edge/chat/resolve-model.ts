/**
 * Stage 2, resolve model: the pool (and LoRA adapter) a request names, and the cache namespace it
 * routes in. SGLang keeps a salted request's KV and media embeddings apart, and so does the index.
 */
import { NotFoundError } from "../../api/errors.ts";
import type { EdgeConfig, ModelConfig } from "../../config/config.ts";
import type { ClientIdentity } from "../auth.ts";
import { routingNamespace, type CacheTenant, type RoutingNamespace } from "../cache-salt.ts";
import { clientNetwork } from "../rate-limit.ts";

export interface ResolvedModel {
  model: ModelConfig;
  adapter: string | null;
  namespace: RoutingNamespace;
}

/** The pool, adapter and cache namespace of a request made by `tenant`. */
export async function resolveChatModel(config: EdgeConfig, requested: string, tenant: CacheTenant): Promise<ResolvedModel> {
  const { model, adapter } = resolveModel(config, requested);
  return { model, adapter, namespace: await routingNamespace(config, { tenant, adapter }) };
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
  throw new NotFoundError(`The model '${echoOf(requested)}' does not exist.`, "model", "model_not_found");
}

/** The unknown name as the 404 echoes it: its start, so a long one does not come back whole. */
function echoOf(requested: string): string {
  return requested.length <= 64 ? requested : `${requested.slice(0, 64)}...`;
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
