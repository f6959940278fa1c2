/**
 * Relay credentials. Two layers:
 *  - the per-worker key: hex HMAC-SHA256(secret, "relay:" + workerId). The edge derives it from the
 *    pool-wide RELAY_SECRET on demand, so nothing per worker is stored, and a relay host needs only
 *    its own key (it cannot sign for another worker id);
 *  - the connect token, minted fresh for every WebSocket connect and sent as `Authorization: Bearer`:
 *      v1.<workerId>.<unixSeconds>.<nonce>.<hex HMAC-SHA256(workerKey, "v1.<workerId>.<unixSeconds>.<nonce>\n<model>")>
 *    The model (the pool) is signed but not carried: the edge takes it from the `model` query
 *    parameter, so a token is good for one worker in one pool. The edge accepts it within ±maxSkew
 *    seconds of its own clock, and the pool's index accepts each nonce once (docs/reliability.md).
 * WebCrypto only (`crypto.subtle`, `crypto.getRandomValues`): runs in workerd and Node 22 alike.
 */

export const RELAY_TOKEN_VERSION = "v1";
/** How far a token's timestamp may be from the verifier's clock, either way. */
export const RELAY_TOKEN_MAX_SKEW_S = 60;

const encoder = new TextEncoder();
const WORKER_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const NONCE = /^[A-Za-z0-9_-]{16,64}$/;
const TAIL = /^(\d{1,12})\.([A-Za-z0-9_-]{16,64})\.([0-9a-f]{64})$/;

function hex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

function unhex(s: string): Uint8Array {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

async function hmacKey(secret: string, usage: "sign" | "verify"): Promise<CryptoKey> {
  return crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [usage]);
}

async function hmacHex(secret: string, message: string): Promise<string> {
  return hex(new Uint8Array(await crypto.subtle.sign("HMAC", await hmacKey(secret, "sign"), encoder.encode(message))));
}

/** The per-worker signing key a relay holds (64 lower-case hex digits). Never sent on the wire. */
export async function relayWorkerKey(secret: string, workerId: string): Promise<string> {
  if (secret.length === 0) throw new RangeError("relay secret must not be empty");
  return hmacHex(secret, "relay:" + workerId);
}

/**
 * @deprecated Old name of {@link relayWorkerKey}. Until v1 tokens this value was itself the
 * bearer token; the edge no longer accepts it (it never expires and can be replayed).
 */
export const relayToken = relayWorkerKey;

/** @deprecated Compares a presented value with the worker key in constant time (v0 tokens). */
export async function verifyRelayToken(secret: string, workerId: string, presented: string | null): Promise<boolean> {
  if (presented === null || secret.length === 0) return false;
  const token = presented.startsWith("Bearer ") ? presented.slice(7).trim() : presented.trim();
  const expected = await relayWorkerKey(secret, workerId);
  if (token.length !== expected.length) return false;
  let diff = 0;
  for (let i = 0; i < expected.length; i++) diff |= token.charCodeAt(i) ^ expected.charCodeAt(i);
  return diff === 0;
}

function signedMessage(workerId: string, issuedAt: number, nonce: string, model: string): string {
  return `${RELAY_TOKEN_VERSION}.${workerId}.${issuedAt}.${nonce}\n${model}`;
}

/** 128 random bits, base64url without padding (22 characters). */
export function newRelayNonce(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  let bin = "";
  for (const x of b) bin += String.fromCharCode(x);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export interface MintOptions {
  /** Issue time in Unix seconds (default: now). */
  nowSeconds?: number;
  /** Default: a fresh random nonce. */
  nonce?: string;
}

/** A fresh single-use connect token for `workerId` in pool `model`, signed with the worker key. */
export async function mintRelayToken(workerKey: string, workerId: string, model: string, opts: MintOptions = {}): Promise<string> {
  if (workerKey.length === 0) throw new RangeError("relay worker key must not be empty");
  if (!WORKER_ID.test(workerId)) throw new RangeError(`bad worker id ${JSON.stringify(workerId)}`);
  const issuedAt = opts.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (!Number.isSafeInteger(issuedAt) || issuedAt < 0) throw new RangeError(`bad issue time ${issuedAt}`);
  const nonce = opts.nonce ?? newRelayNonce();
  if (!NONCE.test(nonce)) throw new RangeError("nonce must be 16-64 characters of [A-Za-z0-9_-]");
  const mac = await hmacHex(workerKey, signedMessage(workerId, issuedAt, nonce, model));
  return `${RELAY_TOKEN_VERSION}.${workerId}.${issuedAt}.${nonce}.${mac}`;
}

export type RelayTokenRefusal = "missing" | "malformed" | "worker_mismatch" | "expired" | "not_yet_valid" | "bad_signature";

export type RelayTokenCheck =
  | { ok: true; nonce: string; issuedAt: number; /** Unix seconds after which the token is refused anyway. */ expiresAt: number }
  | { ok: false; reason: RelayTokenRefusal };

export interface RelayTokenExpectation {
  /** The worker id the connection claims (the `worker` query parameter). */
  workerId: string;
  /** The pool it connects to (the `model` query parameter). */
  model: string;
  nowSeconds: number;
  maxSkewSeconds?: number;
}

/**
 * Stateless check of a presented connect token (a bare token or a `Bearer …` value): format,
 * worker id, freshness and signature (constant time, via WebCrypto verify). Replay protection
 * needs the caller to claim `nonce` once until `expiresAt`.
 */
export async function checkRelayToken(secret: string, presented: string | null, expect: RelayTokenExpectation): Promise<RelayTokenCheck> {
  if (presented === null || presented.trim() === "") return { ok: false, reason: "missing" };
  if (secret.length === 0) return { ok: false, reason: "bad_signature" };
  const token = /^Bearer\s+/i.test(presented) ? presented.replace(/^Bearer\s+/i, "").trim() : presented.trim();
  const skew = expect.maxSkewSeconds ?? RELAY_TOKEN_MAX_SKEW_S;
  if (!token.startsWith(`${RELAY_TOKEN_VERSION}.`)) return { ok: false, reason: "malformed" };
  // The worker id may itself contain dots: match the expected one as a prefix, parse the rest.
  const prefix = `${RELAY_TOKEN_VERSION}.${expect.workerId}.`;
  if (!WORKER_ID.test(expect.workerId) || !token.startsWith(prefix)) {
    return { ok: false, reason: TAIL.test(token.split(".").slice(-3).join(".")) ? "worker_mismatch" : "malformed" };
  }
  const m = TAIL.exec(token.slice(prefix.length));
  if (!m) return { ok: false, reason: "malformed" };
  const issuedAt = Number(m[1]);
  const nonce = m[2]!;
  if (issuedAt < expect.nowSeconds - skew) return { ok: false, reason: "expired" };
  if (issuedAt > expect.nowSeconds + skew) return { ok: false, reason: "not_yet_valid" };
  const workerKey = await relayWorkerKey(secret, expect.workerId);
  const ok = await crypto.subtle.verify(
    "HMAC",
    await hmacKey(workerKey, "verify"),
    unhex(m[3]!),
    encoder.encode(signedMessage(expect.workerId, issuedAt, nonce, expect.model)),
  );
  if (!ok) return { ok: false, reason: "bad_signature" };
  return { ok: true, nonce, issuedAt, expiresAt: issuedAt + skew };
}

/** The parts of a v1 token, for diagnostics (the greedy worker id takes any dots). */
export function parseRelayToken(token: string): { workerId: string; issuedAt: number; nonce: string } | null {
  const m = /^v1\.([A-Za-z0-9._:-]{1,128})\.(\d{1,12})\.([A-Za-z0-9_-]{16,64})\.[0-9a-f]{64}$/.exec(token);
  return m ? { workerId: m[1]!, issuedAt: Number(m[2]), nonce: m[3]! } : null;
}
