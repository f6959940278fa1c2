/**
 * Tenant and adapter isolation of the workers' KV caches (docs/relay.md §Tenant isolation).
 *
 * SGLang's `/generate` takes `cache_salt` (GenerateReqInput.cache_salt, managers/io_struct.py: "Cache
 * namespace used to isolate otherwise-identical prefixes"): its radix tree keeps requests of
 * different salts in disjoint subtrees, and salted blocks are published as
 * BlockStoredWithMetadata{cache_salt} with a salt-seeded hash chain (disaggregation/kv_events.py,
 * mem_cache/utils.py compute_node_event_hash_values). The edge sends one salt per namespace:
 *   tenant  = the request's API key, when KVEDGE_KV_SHARING is "per_tenant" (default) and keys are
 *             configured; nobody without that key can reuse or detect its cached prefixes;
 *   adapter = the LoRA adapter the request names (`model: "<pool>:<adapter>"`): SGLang's events do
 *             not say which adapter a block belongs to (lora_id is always None), so an adapter's
 *             blocks must come back salted to never be predicted for another adapter or the base.
 * The salt is a keyed hash, HMAC-SHA256(RELAY_SECRET, JSON ["kvedge-cache-salt-v1", tenant, adapter])
 * in base64url (43 characters): workers and relays see it, never the API key, and cannot invert it.
 * The router maps the request's local hashes into the salt's namespace (block-hash.ts); the relay
 * does the same with the salt each stored block reports, so the two meet only within a namespace.
 */
import type { EdgeConfig } from "../config/config.ts";
import { namespacedLocalHashes, namespaceTag } from "../blocks/block-hash.ts";

const encoder = new TextEncoder();
/** Salts computed in this isolate (bounded: API keys × adapters are configured, but stay safe). */
const memo = new Map<string, Promise<string>>();
let memoSecret: string | null = null;
const MEMO_MAX = 4096;

export interface CacheNamespaceInput {
  /** The API key the request authenticated with (null: the API has no keys). */
  apiKey: string | null;
  /** The LoRA adapter the request names (null: the base model). */
  adapter: string | null;
}

/** The cache_salt to send for this request, or null when it shares the pool's common namespace. */
export function cacheSaltFor(config: Pick<EdgeConfig, "kvSharing" | "relaySecret">, input: CacheNamespaceInput): Promise<string | null> {
  const tenant = config.kvSharing === "per_tenant" ? input.apiKey : null;
  if (tenant === null && input.adapter === null) return Promise.resolve(null);
  // Without the pool secret no worker can register, so there is nothing to isolate from.
  const secret = config.relaySecret;
  if (!secret) return Promise.resolve(null);
  const message = JSON.stringify(["kvedge-cache-salt-v1", tenant, input.adapter]);
  if (memoSecret !== secret || memo.size >= MEMO_MAX) {
    memo.clear();
    memoSecret = secret;
  }
  let salt = memo.get(message);
  if (!salt) {
    salt = hmacBase64url(secret, message);
    memo.set(message, salt);
  }
  return salt;
}

/** A request's cache namespace and its block hashes there: what the index is asked and the worker told. */
export interface RoutingNamespace {
  /** The cache_salt for `/generate` (null: the pool's common namespace). */
  cacheSalt: string | null;
  /** The request's local block hashes moved into that namespace (the plain ones when unsalted). */
  localHashes: readonly bigint[];
}

/** Salt and namespaced hashes for a request: the one rule both routing and `explain` follow. Requires initHashing(). */
export async function routingNamespace(config: Pick<EdgeConfig, "kvSharing" | "relaySecret">, input: CacheNamespaceInput, plainHashes: readonly bigint[]): Promise<RoutingNamespace> {
  const cacheSalt = await cacheSaltFor(config, input);
  return { cacheSalt, localHashes: cacheSalt === null ? plainHashes : namespacedLocalHashes(plainHashes, namespaceTag(cacheSalt)) };
}

async function hmacBase64url(secret: string, message: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(message)));
  let bin = "";
  for (const b of mac) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
