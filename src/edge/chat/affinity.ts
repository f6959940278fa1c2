/**
 * The conversation key of a chat request, for session affinity in the pool object
 * (src/routing-index/session-affinity.ts): OpenAI's `prompt_cache_key` (coding agents send one per
 * conversation), else an `x-session-id` header, else `safety_identifier`, else `user`. Digested with
 * the tenant's label, so one tenant's key never steers another's requests and no raw value leaves
 * the edge. null: no key (routing alone decides).
 */
import { sha256 } from "../../util/hash.ts";
import { bytesToHex } from "../../util/hex.ts";

/** The longest x-session-id taken (longer ones are ignored, not cut: a cut key could merge sessions). */
export const MAX_SESSION_ID_CHARS = 256;

export interface AffinitySources {
  promptCacheKey?: string | undefined;
  sessionHeader: string | null;
  safetyIdentifier?: string | undefined;
  user?: string | undefined;
}

/** `a-` and 32 hex digits of SHA-256 over the tenant and the first source present. Requires initHashing(). */
export function affinityKeyOf(tenant: string, s: AffinitySources): string | null {
  const header = s.sessionHeader !== null && s.sessionHeader.length > 0 && s.sessionHeader.length <= MAX_SESSION_ID_CHARS ? s.sessionHeader : undefined;
  const [source, value] =
    s.promptCacheKey ? ["prompt_cache_key", s.promptCacheKey] : header ? ["x-session-id", header] : s.safetyIdentifier ? ["safety_identifier", s.safetyIdentifier] : s.user ? ["user", s.user] : [null, null];
  if (source === null) return null;
  return `a-${bytesToHex(sha256(new TextEncoder().encode(`kvedge-affinity\n${tenant}\n${source}\n${value}`))).slice(0, 32)}`;
}
