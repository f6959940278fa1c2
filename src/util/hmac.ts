/** HMAC-SHA256 with Web Crypto (the Workers runtime and Node both have it). */
const encoder = new TextEncoder();

const keyOf = (secret: string, usage: "sign" | "verify"): Promise<CryptoKey> => crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [usage]);

/** The MAC of `message` under `secret`, both as UTF-8. */
export async function hmacSha256(secret: string, message: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", await keyOf(secret, "sign"), encoder.encode(message)));
}

/** Whether `mac` is the MAC of `message` under `secret` (Web Crypto's comparison, constant time). */
export async function hmacSha256Verify(secret: string, message: string, mac: Uint8Array): Promise<boolean> {
  return crypto.subtle.verify("HMAC", await keyOf(secret, "verify"), mac, encoder.encode(message));
}
