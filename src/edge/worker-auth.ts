/**
 * The edge's credential towards each worker (docs/security.md, edge → worker). SGLang started with
 * `--api-key K` answers 401 to every request without `Authorization: Bearer K`, except OPTIONS and
 * paths starting with /health or /metrics (sgl-project/sglang python/sglang/srt/utils/auth.py
 * `decide_request_auth`, commit a343daaf, lines 97-112 and 140-145).
 *
 * Each worker has its own key, so one leaked key opens one worker. The key is found by the worker's
 * URL as its relay key binds it (src/relay-wire/relay-auth.ts): a relay cannot change that URL, and a
 * key is only ever sent to the URL it belongs to, so no relay can draw another worker's key to a
 * host of its choosing. Two sources, explicit first:
 *   KVEDGE_WORKER_KEYS        {"<worker URL>": "<key>"} chosen by the operator;
 *   KVEDGE_WORKER_KEY_SECRET  key = "kvw1-" + hex HMAC-SHA256(secret, JSON ["kvedge-worker-api-key-v1", url]),
 *                             handed to the operator with the worker's relay key (relay-key-routes.ts).
 * Optionally a Cloudflare Access service token goes to every worker (a Tunnel behind Access).
 */
import type { WorkerAuthConfig } from "../config/config.ts";
import { bytesToHex } from "../util/hex.ts";
import { hmacSha256 } from "../util/hmac.ts";
import { SecretMemo } from "../util/secret-memo.ts";

/** Derived keys of this isolate, by secret and URL (bounded: workers are registered by operators). */
const derived = new SecretMemo(4096, deriveWorkerApiKey);

/** The SGLang `--api-key` the edge uses for the worker at `workerUrl` (normalized), derived from `secret`. */
export async function deriveWorkerApiKey(secret: string, workerUrl: string): Promise<string> {
  if (secret.length === 0) throw new RangeError("worker key secret must not be empty");
  return `kvw1-${bytesToHex(await hmacSha256(secret, JSON.stringify(["kvedge-worker-api-key-v1", workerUrl])))}`;
}

/** The worker's key: the explicit one, else the derived one, else null. */
export function workerApiKey(auth: WorkerAuthConfig, workerUrl: string): Promise<string | null> {
  const explicit = auth.keys.get(workerUrl);
  if (explicit !== undefined) return Promise.resolve(explicit);
  const secret = auth.keySecret;
  if (secret === null) return Promise.resolve(null);
  return derived.get(secret, workerUrl);
}

/**
 * Headers for a call to the worker at `workerUrl`, or null when the edge holds no key for it and
 * KVEDGE_WORKER_AUTH requires one (the caller then does not call it at all).
 */
export async function workerAuthHeaders(auth: WorkerAuthConfig, workerUrl: string): Promise<Record<string, string> | null> {
  const key = await workerApiKey(auth, workerUrl);
  if (key === null && auth.required) return null;
  const headers: Record<string, string> = {};
  if (key !== null) headers["authorization"] = `Bearer ${key}`;
  if (auth.access) {
    headers["cf-access-client-id"] = auth.access.clientId;
    headers["cf-access-client-secret"] = auth.access.clientSecret;
  }
  return headers;
}
