/** HMAC-SHA256 with Web Crypto (the Workers runtime and Node both have it). */
const encoder = new TextEncoder();

/** The MAC of `message` under `secret`, both as UTF-8. */
export async function hmacSha256(secret: string, message: string): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(message)));
}
