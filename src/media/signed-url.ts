/**
 * Short-lived signed URLs into the regional media store: `/v1/media/<digest>?exp=<unix s>&sig=<hex>`
 * where sig = HMAC-SHA256(key, "kvedge/media-url/v1\n" + digest + "\n" + exp). The key is shared by
 * the edge (which signs what it verified) and the store (which verifies); workers hold neither and
 * can fetch only what the edge signed, only until it expires. WebCrypto in both runtimes:
 * `crypto.subtle.verify` compares in constant time.
 */
import { z } from "zod";
import { bytesToHex, hexToBytes } from "../util/hex.ts";

const enc = new TextEncoder();
const LABEL = "kvedge/media-url/v1";

/** 64 lower-case hex digits: the SHA-256 of the stored bytes. */
export const MediaDigestSchema = z.string().regex(/^[0-9a-f]{64}$/);

/** Key material: at least 32 characters (hex or random text from a secret store). */
export const MediaUrlKeySchema = z.string().min(32, "the media URL key must be at least 32 characters");

export async function importMediaUrlKey(secret: string): Promise<CryptoKey> {
  MediaUrlKeySchema.parse(secret);
  return crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

function message(digest: string, exp: number): Uint8Array {
  return enc.encode(`${LABEL}\n${digest}\n${exp}`);
}

/** A signature is exactly 64 lower-case hex digits. */
function unhex(s: string): Uint8Array | null {
  return s.length === 64 ? hexToBytes(s) : null;
}

/** The store-relative path a worker fetches: `/v1/media/<digest>?exp=…&sig=…`. */
export async function signMediaPath(key: CryptoKey, digest: string, exp: number): Promise<string> {
  if (!MediaDigestSchema.safeParse(digest).success) throw new TypeError("media digest must be 64 lower-case hex digits");
  if (!Number.isSafeInteger(exp) || exp <= 0) throw new TypeError("exp must be a positive integer (unix seconds)");
  const sig = bytesToHex(new Uint8Array(await crypto.subtle.sign("HMAC", key, message(digest, exp) as BufferSource)));
  return `/v1/media/${digest}?exp=${exp}&sig=${sig}`;
}

export type MediaUrlCheck = { ok: true; digest: string } | { ok: false; reason: "bad_path" | "bad_signature" | "expired" | "too_long" };

/**
 * Checks one request for `/v1/media/...` against the key and the clock. `maxTtlSec` refuses
 * signatures that claim to live longer than the store allows (a leaked key is still bounded).
 */
export async function verifyMediaUrl(key: CryptoKey, pathname: string, search: URLSearchParams, nowSec: number, maxTtlSec: number): Promise<MediaUrlCheck> {
  const m = /^\/v1\/media\/([0-9a-f]{64})$/.exec(pathname);
  const expText = search.get("exp") ?? "";
  const sig = unhex(search.get("sig") ?? "");
  if (!m || !/^[0-9]{1,12}$/.test(expText) || !sig) return { ok: false, reason: "bad_path" };
  const digest = m[1]!;
  const exp = Number(expText);
  const valid = await crypto.subtle.verify("HMAC", key, sig as BufferSource, message(digest, exp) as BufferSource);
  if (!valid) return { ok: false, reason: "bad_signature" };
  if (exp < nowSec) return { ok: false, reason: "expired" };
  if (exp > nowSec + maxTtlSec) return { ok: false, reason: "too_long" };
  return { ok: true, digest };
}
