/**
 * Short-lived signed URLs into the regional media store, each for one worker:
 * `/v1/media/<digest>?exp=<unix s>&w=<worker id>&sig=<hex>` where
 * sig = HMAC-SHA256(key, "kvedge/media-url/v2\n" + digest + "\n" + exp + "\n" + worker id). The key is
 * shared by the edge (which signs what it verified, for the worker it routes to) and the store
 * (which verifies); workers do not hold it and can fetch only what the edge signed, only until it
 * expires. The worker named in the URL proves it is that worker with its own media credential,
 * HMAC-SHA256(key, "kvedge/media-worker/v1\n" + worker id), sent as HTTP Basic auth (login = worker
 * id): derived from the same key, so the store needs no list of workers, and SGLang sends it with
 * no change of its own: it fetches media URLs with `requests.get` (sgl-project/sglang
 * python/sglang/srt/utils/common.py @004f0c7 load_image, load_video), and python-requests adds a
 * ~/.netrc entry for the host as Basic auth when no other auth is set (psf/requests
 * src/requests/sessions.py Session.prepare_request, get_netrc_auth under trust_env). A URL
 * that leaks (logs, another worker) is useless without that worker's credential. WebCrypto in both
 * runtimes: `crypto.subtle.verify` compares in constant time.
 */
import { z } from "zod";
import { bytesToHex, hexToBytes } from "../util/hex.ts";

const enc = new TextEncoder();
const LABEL = "kvedge/media-url/v2";
const WORKER_LABEL = "kvedge/media-worker/v1";

/** Worker ids as relays register them (relay-protocol.ts). */
const WORKER_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** 64 lower-case hex digits: the SHA-256 of the stored bytes. */
export const MediaDigestSchema = z.string().regex(/^[0-9a-f]{64}$/);

/** Key material: at least 32 characters (hex or random text from a secret store). */
export const MediaUrlKeySchema = z.string().min(32, "the media URL key must be at least 32 characters");

export async function importMediaUrlKey(secret: string): Promise<CryptoKey> {
  MediaUrlKeySchema.parse(secret);
  return crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

function message(digest: string, exp: number, workerId: string): Uint8Array {
  return enc.encode(`${LABEL}\n${digest}\n${exp}\n${workerId}`);
}

/** A signature is exactly 64 lower-case hex digits. */
function unhex(s: string): Uint8Array | null {
  return s.length === 64 ? hexToBytes(s) : null;
}

/** The store-relative path worker `workerId` fetches: `/v1/media/<digest>?exp=…&w=…&sig=…`. */
export async function signMediaPath(key: CryptoKey, digest: string, exp: number, workerId: string): Promise<string> {
  if (!MediaDigestSchema.safeParse(digest).success) throw new TypeError("media digest must be 64 lower-case hex digits");
  if (!Number.isSafeInteger(exp) || exp <= 0) throw new TypeError("exp must be a positive integer (unix seconds)");
  if (!WORKER_ID.test(workerId)) throw new TypeError("worker id must be 1-128 characters of [A-Za-z0-9._:-]");
  const sig = bytesToHex(new Uint8Array(await crypto.subtle.sign("HMAC", key, message(digest, exp, workerId) as BufferSource)));
  return `/v1/media/${digest}?exp=${exp}&w=${workerId}&sig=${sig}`;
}

/** Worker `workerId`'s media credential (64 hex digits): what it presents to the store as its Basic password. */
export async function workerMediaCredential(key: CryptoKey, workerId: string): Promise<string> {
  if (!WORKER_ID.test(workerId)) throw new TypeError("worker id must be 1-128 characters of [A-Za-z0-9._:-]");
  return bytesToHex(new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(`${WORKER_LABEL}\n${workerId}`) as BufferSource)));
}

/**
 * Does an `Authorization` header carry `workerId`'s media credential? Basic, login = worker id (a
 * worker id may hold ':'; the credential never does, so the password starts after the last one).
 */
export async function presentsWorkerCredential(key: CryptoKey, authorization: string | undefined, workerId: string): Promise<boolean> {
  const m = /^Basic\s+([A-Za-z0-9+/]{1,400}={0,2})\s*$/i.exec(authorization ?? "");
  if (!m) return false;
  let pair: string;
  try {
    pair = atob(m[1]!);
  } catch {
    return false;
  }
  const cut = pair.lastIndexOf(":");
  const sig = cut < 0 ? null : unhex(pair.slice(cut + 1));
  if (!sig || pair.slice(0, cut) !== workerId) return false;
  return crypto.subtle.verify("HMAC", key, sig as BufferSource, enc.encode(`${WORKER_LABEL}\n${workerId}`) as BufferSource);
}

export type MediaUrlCheck = { ok: true; digest: string; workerId: string } | { ok: false; reason: "bad_path" | "bad_signature" | "expired" | "too_long" };

/**
 * Checks one request for `/v1/media/...` against the key and the clock. `maxTtlSec` refuses
 * signatures that claim to live longer than the store allows (a leaked key is still bounded).
 */
export async function verifyMediaUrl(key: CryptoKey, pathname: string, search: URLSearchParams, nowSec: number, maxTtlSec: number): Promise<MediaUrlCheck> {
  const m = /^\/v1\/media\/([0-9a-f]{64})$/.exec(pathname);
  const expText = search.get("exp") ?? "";
  const workerId = search.get("w") ?? "";
  const sig = unhex(search.get("sig") ?? "");
  if (!m || !/^[0-9]{1,12}$/.test(expText) || !WORKER_ID.test(workerId) || !sig) return { ok: false, reason: "bad_path" };
  const digest = m[1]!;
  const exp = Number(expText);
  const valid = await crypto.subtle.verify("HMAC", key, sig as BufferSource, message(digest, exp, workerId) as BufferSource);
  if (!valid) return { ok: false, reason: "bad_signature" };
  if (exp < nowSec) return { ok: false, reason: "expired" };
  if (exp > nowSec + maxTtlSec) return { ok: false, reason: "too_long" };
  return { ok: true, digest, workerId };
}
