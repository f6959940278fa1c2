/**
 * SGLang's `--api-key` check as the simulator applies it (sgl-project/sglang
 * python/sglang/srt/utils/auth.py `decide_request_auth`, commit a343daaf, lines 97-112, 140-145):
 * OPTIONS and any path starting with /health or /metrics pass; everything else, unknown paths
 * included, needs `Authorization: <scheme> <key>` with the scheme "bearer" in any case, the header
 * split at its first space and the rest compared in constant time; otherwise 401 {"error":"Unauthorized"}.
 * The simulator's own /debug/* routes (no SGLang counterpart: instruments for tests) stay open.
 */
import { timingSafeEqual } from "node:crypto";

export function authorized(apiKey: string | null, method: string, path: string, authorization: string | undefined): boolean {
  if (apiKey === null || method === "OPTIONS") return true;
  if (path.startsWith("/health") || path.startsWith("/metrics") || path.startsWith("/debug/")) return true;
  if (!authorization) return false;
  const space = authorization.indexOf(" ");
  if (space < 0 || authorization.slice(0, space).toLowerCase() !== "bearer") return false;
  const given = Buffer.from(authorization.slice(space + 1), "utf8");
  const want = Buffer.from(apiKey, "utf8");
  // Time by the expected length only, as compare_digest: a length mismatch still runs one comparison.
  if (given.length !== want.length) return !timingSafeEqual(want, want);
  return timingSafeEqual(given, want);
}
