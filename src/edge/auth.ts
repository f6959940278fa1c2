/** Credential checks shared by the edge routes. Constant-time comparison avoids timing leaks. */
import { AuthenticationError } from "../api/errors.ts";

export function timingSafeEqualString(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  const n = Math.max(ea.length, eb.length);
  for (let i = 0; i < n; i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}

export function bearerToken(request: Request): string | null {
  const h = request.headers.get("authorization");
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1]! : null;
}

/** Admin endpoints: refused outright when no admin token is configured. */
export function requireAdmin(request: Request, adminToken: string | null): void {
  const t = bearerToken(request);
  if (!adminToken || !t || !timingSafeEqualString(t, adminToken)) throw new AuthenticationError("Admin token required.");
}

/** Client API keys are optional: when none are configured the API is open. */
export function requireApiKey(request: Request, keys: Set<string> | null): void {
  matchApiKey(request, keys);
}

/**
 * The configured API key the request presents (its rate-limit identity), or null when no keys are
 * configured; throws when keys are configured and none matches. Every key is compared, so timing
 * does not reveal which one (or how much of one) matched.
 */
export function matchApiKey(request: Request, keys: Set<string> | null): string | null {
  if (!keys) return null;
  const t = bearerToken(request);
  if (!t) throw new AuthenticationError("Missing API key. Send 'Authorization: Bearer <key>'.");
  let found: string | null = null;
  for (const k of keys) if (timingSafeEqualString(t, k)) found = k;
  if (found === null) throw new AuthenticationError("Invalid API key.");
  return found;
}
