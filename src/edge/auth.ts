/**
 * Credential checks shared by the edge routes. Constant-time comparison avoids timing leaks.
 * `/v1` is closed by default: without configured API keys it serves nobody unless the operator set
 * KVEDGE_ACCESS=public (src/config/config.ts). The admin token is also accepted on `/v1`: an admin
 * caller sees the `x-kvedge-*` routing headers.
 */
import type { EdgeConfig } from "../config/config.ts";
import { AuthenticationError } from "../api/errors.ts";
import { timingSafeEqualString } from "../util/constant-time.ts";

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
  if (t !== null && config.adminToken !== null && timingSafeEqualString(t, config.adminToken)) return { apiKey: null, admin: true };
  const keys = config.apiKeys;
  if (!keys) {
    if (config.publicAccess) return { apiKey: null, admin: false };
    throw new AuthenticationError("This endpoint requires an API key and none is configured (operators: set KVEDGE_API_KEYS, or KVEDGE_ACCESS=public).");
  }
  if (t === null) {
    if (config.publicAccess) return { apiKey: null, admin: false };
    throw new AuthenticationError("Missing API key. Send 'Authorization: Bearer <key>'.");
  }
  const found = matchApiKey(t, keys);
  if (found === null) throw new AuthenticationError("Invalid API key.");
  return { apiKey: found, admin: false };
}

/** The configured key equal to `presented`, or null. Every key is compared, so timing does not reveal which one matched. */
export function matchApiKey(presented: string, keys: Iterable<string>): string | null {
  let found: string | null = null;
  for (const k of keys) if (timingSafeEqualString(presented, k)) found = k;
  return found;
}
