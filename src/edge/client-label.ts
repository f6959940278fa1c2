/**
 * How the edge names a client to the services behind it (the media store shares its slots by this
 * label, docs/media.md Fair shares): one label per API key, else per client network (rate-limit.ts
 * clientNetwork), as a digest, so neither the key nor the address leaves the edge.
 */
import { sha256 } from "../util/hash.ts";
import { bytesToHex } from "../util/hex.ts";

/** A client as the edge tells clients apart. */
export type ClientRef = { apiKey: string } | { network: string };

/** `c-` and 32 hex digits of SHA-256 over the key or network. Requires initHashing(). */
export function clientLabel(client: ClientRef): string {
  const name = "apiKey" in client ? `key\n${client.apiKey}` : `net\n${client.network}`;
  return `c-${bytesToHex(sha256(new TextEncoder().encode(`kvedge-client\n${name}`))).slice(0, 32)}`;
}
