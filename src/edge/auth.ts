/**
 * Credential checks shared by the edge routes. Constant-time comparison avoids timing leaks.
 * `/v1` is closed by default: without configured API keys it serves nobody unless the operator set
 * KVEDGE_ACCESS=public (src/config/config.ts). The admin token is also accepted on `/v1`: an admin
 * caller sees the `x-kvedge-*` routing headers.
 */
import type { EdgeConfig } from "../config/config.ts";
import { AuthenticationError } from "../api/errors.ts";
import { timingSafeEqualBytes } from "../util/constant-time.ts";

const utf8 = new TextEncoder();

export function bearerToken(request: Request): string | null {
  const h = request.headers.get("authorization");
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1]! : null;
}

/** Who is calling `/v1`: the rate-limit identity (an API key, or null = by client network) and admin or not. */
export interface ClientIdentity {
  apiKey: string | null;
  admin: boolean;
}

/**
 * Authorizes a `/v1` request. Every configured key is compared, so timing does not reveal which one
 * (or how much of one) matched. Throws AuthenticationError (401) when the endpoint is closed (no
 * keys, not public), when a key is required and missing, or when a presented token matches nothing.
 */
export function authorizeClient(request: Request, config: Pick<EdgeConfig, "apiKeys" | "adminToken" | "publicAccess">): ClientIdentity {
  const t = bearerToken(request);
  // The presented token is encoded once, for the admin token and every key.
  const presented = t === null ? null : utf8.encode(t);
  if (presented !== null && config.adminToken !== null && timingSafeEqualBytes(presented, adminTokenBytes(config.adminToken))) return { apiKey: null, admin: true };
  const keys = config.apiKeys;
  if (!keys) {
    if (config.publicAccess) return { apiKey: null, admin: false };
    throw new AuthenticationError("This endpoint requires an API key and none is configured (operators: set KVEDGE_API_KEYS, or KVEDGE_ACCESS=public).");
  }
  if (presented === null) {
    if (config.publicAccess) return { apiKey: null, admin: false };
    throw new AuthenticationError("Missing API key. Send 'Authorization: Bearer <key>'.");
  }
  const found = matchEncodedKey(presented, encodedKeys(keys));
  if (found === null) throw new AuthenticationError("Invalid API key.");
  return { apiKey: found, admin: false };
}

/** The configured key equal to `presented`, or null. Every key is compared, so timing does not reveal which one matched. */
export function matchApiKey(presented: string, keys: ReadonlySet<string>): string | null {
  return matchEncodedKey(utf8.encode(presented), encodedKeys(keys));
}

function matchEncodedKey(presented: Uint8Array, keys: readonly EncodedKey[]): string | null {
  let found: string | null = null;
  for (const k of keys) if (timingSafeEqualBytes(presented, k.bytes)) found = k.key;
  return found;
}

interface EncodedKey {
  key: string;
  bytes: Uint8Array;
}

/**
 * The configured credentials' UTF-8, encoded once instead of on every request: the keys by their
 * collection (the config's Set, never changed once parsed), the admin token by its string.
 */
const keyBytes = new WeakMap<object, readonly EncodedKey[]>();
let adminToken: { token: string; bytes: Uint8Array } | null = null;

function encodedKeys(keys: ReadonlySet<string>): readonly EncodedKey[] {
  let encoded = keyBytes.get(keys);
  if (encoded === undefined) {
    encoded = Array.from(keys, (key) => ({ key, bytes: utf8.encode(key) }));
    keyBytes.set(keys, encoded);
  }
  return encoded;
}

function adminTokenBytes(token: string): Uint8Array {
  if (adminToken?.token !== token) adminToken = { token, bytes: utf8.encode(token) };
  return adminToken.bytes;
}
