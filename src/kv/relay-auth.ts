/**
 * Per-worker relay credentials: token = hex HMAC-SHA256(secret, "relay:" + workerId). The relay
 * sends it as `Authorization: Bearer <token>`; the index recomputes it with the same secret, so no
 * per-worker secret needs storing and one worker's token is useless for another worker id.
 * WebCrypto only (`crypto.subtle`): runs in workerd and Node 22 alike.
 */

const encoder = new TextEncoder();

async function hmacSha256(secret: string, message: string): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(message)));
}

/** The bearer token a relay for `workerId` presents (64 lower-case hex digits). */
export async function relayToken(secret: string, workerId: string): Promise<string> {
  if (secret.length === 0) throw new RangeError("relay secret must not be empty");
  const mac = await hmacSha256(secret, "relay:" + workerId);
  let hex = "";
  for (const b of mac) hex += b.toString(16).padStart(2, "0");
  return hex;
}

/** Constant-time check of a presented token (or a whole `Bearer …` header value). */
export async function verifyRelayToken(secret: string, workerId: string, presented: string | null): Promise<boolean> {
  if (presented === null || secret.length === 0) return false;
  const token = presented.startsWith("Bearer ") ? presented.slice(7).trim() : presented.trim();
  const expected = await relayToken(secret, workerId);
  if (token.length !== expected.length) return false;
  let diff = 0;
  for (let i = 0; i < expected.length; i++) diff |= token.charCodeAt(i) ^ expected.charCodeAt(i);
  return diff === 0;
}
