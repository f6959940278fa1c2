/** base64url without padding (RFC 4648 §5), the spelling of salts, key ids and tokens in URLs and headers. */
export function bytesToBase64url(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
