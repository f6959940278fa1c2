/**
 * Relay credentials (docs/relay.md §Credentials). Three layers:
 *  - the relay key: issued per worker by an operator (`kvedge relay-key issue`, or
 *    `POST /admin/relay-keys`), bound to one pool, one worker id and one worker URL, revocable. The
 *    edge derives it on demand as hex HMAC-SHA256(RELAY_SECRET, JSON [v, keyId, model, workerId, url])
 *    from the registry row the pool's index keeps (key id, binding, revoked?), so neither the index
 *    nor any relay host ever holds the pool secret, and a stolen key signs for one worker at one URL;
 *  - the credential a relay host holds: `kvr1.<keyId>.<key hex>` (env var or file, never argv);
 *  - the connect token, minted fresh for every WebSocket connect and sent as `Authorization: Bearer`:
 *      v3.<keyId>.<workerId>.<url>.<unixSeconds>.<nonce>.<hex HMAC-SHA256(key, "v3.<keyId>.<workerId>.<url>.<unixSeconds>.<nonce>\n<audience>")>
 *    with <url> the worker URL the key is bound to, base64url. The audience (the pool's shard
 *    object) is signed but not carried. The token names the whole binding, so the edge derives the
 *    key and checks the signature before it asks the pool's index anything (a forged connect never
 *    reaches a Durable Object of the pool). The edge accepts a token within ±maxSkew seconds of its
 *    own clock, and the pool's index accepts each nonce once.
 * WebCrypto only (`crypto.subtle`, `crypto.getRandomValues`): runs in workerd and Node 22 alike.
 */
import { bytesToBase64url } from "../util/base64url.ts";
import { bytesToHex, hexToBytes } from "../util/hex.ts";
import { hmacSha256, hmacSha256Verify } from "../util/hmac.ts";
import { stripTrailing } from "../util/strip-trailing.ts";

export const RELAY_TOKEN_VERSION = "v3";
export const RELAY_CREDENTIAL_PREFIX = "kvr1";
/** How far a token's timestamp may be from the verifier's clock, either way. */
export const RELAY_TOKEN_MAX_SKEW_S = 60;

const encoder = new TextEncoder();
export const WORKER_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
const KEY_ID = /^[A-Za-z0-9_-]{22}$/;
const NONCE = /^[A-Za-z0-9_-]{16,64}$/;
const KEY_HEX = /^[0-9a-f]{64}$/;
/** After `v3.<keyId>.<workerId>.`: the URL (2048 characters at most, base64url), time, nonce, MAC. */
const TAIL = /^([A-Za-z0-9_-]{1,2731})\.(\d{1,12})\.([A-Za-z0-9_-]{16,64})\.([0-9a-f]{64})$/;

async function hmacHex(secret: string, message: string): Promise<string> {
  return bytesToHex(await hmacSha256(secret, message));
}

/** base64url (no padding) → UTF-8 text, or null when it is not valid UTF-8. */
function fromBase64url(s: string): string | null {
  try {
    const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch {
    return null;
  }
}

// ---- worker URLs ----

export type WorkerUrlCheck = { ok: true; url: string } | { ok: false; reason: string };

/**
 * The one spelling of a worker's base URL that keys are bound to and hellos are compared with:
 * `https:` (plain `http:` only when `allowHttp`, a development setting), no credentials, query or
 * fragment, no trailing slash (the edge appends `/generate`).
 */
export function normalizeWorkerUrl(raw: string, opts: { allowHttp: boolean }): WorkerUrlCheck {
  if (raw.length > 2048) return { ok: false, reason: "worker URL longer than 2048 characters" };
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return { ok: false, reason: "worker URL is not a URL" };
  }
  if (u.protocol !== "https:" && !(u.protocol === "http:" && opts.allowHttp))
    return { ok: false, reason: `worker URL must be https:${opts.allowHttp ? " or http:" : ""} (got ${u.protocol})` };
  if (u.username !== "" || u.password !== "") return { ok: false, reason: "worker URL must not carry credentials" };
  if (u.search !== "" || u.hash !== "") return { ok: false, reason: "worker URL must not carry a query or fragment" };
  if (u.hostname === "") return { ok: false, reason: "worker URL has no host" };
  return { ok: true, url: u.origin + stripTrailing(u.pathname, "/") };
}

// ---- keys and credentials ----

export interface RelayKeyBinding {
  keyId: string;
  /** The pool (model id) the key is good for. */
  model: string;
  workerId: string;
  /** The worker URL (normalizeWorkerUrl) its hello must announce. */
  url: string;
}

/**
 * What a relay key allows its worker besides the binding, set by the operator at issue: neither is
 * in the derived key (the registry row is the authority, like `revokedAt`), and the edge hands both
 * to the shard with every connect it verified.
 */
export interface RelayKeyGrant {
  /**
   * The worker's attention-DP ranks (`--dp-size`): a connect's `rank` must be below it and a
   * hello's `dpSize` at most it, so one key opens at most this many rank targets. 1: a single-rank
   * worker, whose connects carry no `rank`.
   */
  dpSize: number;
  /**
   * The HiCache storage group the worker's storage view is shared in (src/routing-index/storage-views.ts):
   * workers whose keys name the same group and whose hellos name the same backend share one view.
   * null: the view is the worker's own (its DP ranks share it).
   */
  storageGroup: string | null;
}

/** A storage group's name, as a key grants it. */
export const STORAGE_GROUP_PATTERN = /^[A-Za-z0-9._:-]{1,64}$/;

/** A registry row (kept by the pool's index; no key material). */
export interface RelayKeyRecord extends RelayKeyBinding, RelayKeyGrant {
  createdAt: number;
  /** Unix seconds; null while the key is valid. */
  revokedAt: number | null;
}

/** 128 random bits, base64url without padding (22 characters). */
export function newRelayKeyId(): string {
  return bytesToBase64url(crypto.getRandomValues(new Uint8Array(16)));
}

/** The relay key of `binding` (64 lower-case hex digits). Edge only: needs the pool secret. */
export async function deriveRelayKey(secret: string, binding: RelayKeyBinding): Promise<string> {
  if (secret.length === 0) throw new RangeError("relay secret must not be empty");
  return hmacHex(secret, JSON.stringify(["kvedge-relay-key-v1", binding.keyId, binding.model, binding.workerId, binding.url]));
}

export function formatRelayCredential(keyId: string, keyHex: string): string {
  if (!KEY_ID.test(keyId) || !KEY_HEX.test(keyHex)) throw new RangeError("bad relay key id or key");
  return `${RELAY_CREDENTIAL_PREFIX}.${keyId}.${keyHex}`;
}

/** `kvr1.<keyId>.<key hex>` (surrounding whitespace ignored, e.g. a file's trailing newline) → parts. */
export function parseRelayCredential(s: string): { keyId: string; key: string } | null {
  const m = /^kvr1\.([A-Za-z0-9_-]{22})\.([0-9a-f]{64})$/.exec(s.trim());
  return m ? { keyId: m[1]!, key: m[2]! } : null;
}

// ---- connect tokens ----

function signedMessage(keyId: string, workerId: string, url64: string, issuedAt: number, nonce: string, audience: string): string {
  return `${RELAY_TOKEN_VERSION}.${keyId}.${workerId}.${url64}.${issuedAt}.${nonce}\n${audience}`;
}

/** 128 random bits, base64url without padding (22 characters). */
export function newRelayNonce(): string {
  return bytesToBase64url(crypto.getRandomValues(new Uint8Array(16)));
}

export interface MintOptions {
  /** The worker URL the credential's key is bound to (what the relay's hello announces). */
  url: string;
  /** Issue time in Unix seconds (default: now). */
  nowSeconds?: number;
  /** Default: a fresh random nonce. */
  nonce?: string;
}

/** A fresh single-use connect token for `workerId` at `opts.url` towards `audience`, signed with the credential's key. */
export async function mintRelayToken(credential: string, workerId: string, audience: string, opts: MintOptions): Promise<string> {
  const cred = parseRelayCredential(credential);
  if (!cred) throw new RangeError("relay credential must look like kvr1.<key id>.<64 hex digits>");
  if (!WORKER_ID_PATTERN.test(workerId)) throw new RangeError(`bad worker id ${JSON.stringify(workerId)}`);
  const issuedAt = opts.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (!Number.isSafeInteger(issuedAt) || issuedAt < 0) throw new RangeError(`bad issue time ${issuedAt}`);
  const nonce = opts.nonce ?? newRelayNonce();
  if (!NONCE.test(nonce)) throw new RangeError("nonce must be 16-64 characters of [A-Za-z0-9_-]");
  if (opts.url.length > 2048) throw new RangeError("worker URL longer than 2048 characters");
  const url64 = bytesToBase64url(encoder.encode(opts.url));
  const mac = await hmacHex(cred.key, signedMessage(cred.keyId, workerId, url64, issuedAt, nonce, audience));
  return `${RELAY_TOKEN_VERSION}.${cred.keyId}.${workerId}.${url64}.${issuedAt}.${nonce}.${mac}`;
}

function bare(presented: string): string {
  return /^Bearer\s+/i.test(presented) ? presented.replace(/^Bearer\s+/i, "").trim() : presented.trim();
}

/** The key id a presented token names (the verifier looks its binding up), or null when malformed. */
export function relayTokenKeyId(presented: string | null): string | null {
  if (presented === null) return null;
  const m = /^v3\.([A-Za-z0-9_-]{22})\./.exec(bare(presented));
  return m ? m[1]! : null;
}

export type RelayTokenRefusal =
  | "missing"
  | "malformed"
  | "unknown_key"
  | "revoked"
  | "worker_mismatch"
  | "insecure_url"
  | "expired"
  | "not_yet_valid"
  | "bad_signature";

export type RelayTokenCheck =
  | {
      ok: true;
      nonce: string;
      issuedAt: number;
      /** Unix seconds after which the token is refused anyway. */
      expiresAt: number;
      /** The worker URL the token names (as the relay wrote it). */
      url: string;
    }
  | { ok: false; reason: RelayTokenRefusal };

export interface RelayTokenExpectation {
  /** The worker id the connection claims (the `worker` query parameter). */
  workerId: string;
  /** What the token must be signed for (the pool's shard object name). */
  audience: string;
  nowSeconds: number;
  maxSkewSeconds?: number;
}

interface TokenParts {
  url64: string;
  /** The worker URL the token names, decoded. */
  url: string;
  issuedAt: number;
  nonce: string;
  mac: string;
}

/** The parts of a token after `v3.<keyId>.<workerId>.` (format only: nothing is verified). */
function tokenParts(token: string, keyId: string, workerId: string): TokenParts | RelayTokenRefusal {
  if (!token.startsWith(`${RELAY_TOKEN_VERSION}.${keyId}.`)) return "malformed";
  // The worker id may itself contain dots: match the expected one as a prefix, parse the rest.
  const prefix = `${RELAY_TOKEN_VERSION}.${keyId}.${workerId}.`;
  if (!WORKER_ID_PATTERN.test(workerId) || !token.startsWith(prefix)) return TAIL.test(token.split(".").slice(-4).join(".")) ? "worker_mismatch" : "malformed";
  const m = TAIL.exec(token.slice(prefix.length));
  if (!m) return "malformed";
  const url = fromBase64url(m[1]!);
  if (url === null) return "malformed";
  return { url64: m[1]!, url, issuedAt: Number(m[2]), nonce: m[3]!, mac: m[4]! };
}

/**
 * Stateless check of a presented connect token against one key: format, key id, worker id,
 * freshness and signature (constant time, via WebCrypto verify). Replay protection needs the
 * caller to claim `nonce` once until `expiresAt`.
 */
export async function checkRelayToken(
  key: { keyId: string; key: string },
  presented: string | null,
  expect: RelayTokenExpectation,
): Promise<RelayTokenCheck> {
  if (presented === null || presented.trim() === "") return { ok: false, reason: "missing" };
  const skew = expect.maxSkewSeconds ?? RELAY_TOKEN_MAX_SKEW_S;
  const t = tokenParts(bare(presented), key.keyId, expect.workerId);
  if (typeof t === "string") return { ok: false, reason: t };
  if (t.issuedAt < expect.nowSeconds - skew) return { ok: false, reason: "expired" };
  if (t.issuedAt > expect.nowSeconds + skew) return { ok: false, reason: "not_yet_valid" };
  const ok = await hmacSha256Verify(
    key.key,
    signedMessage(key.keyId, expect.workerId, t.url64, t.issuedAt, t.nonce, expect.audience),
    hexToBytes(t.mac)!, // TAIL matched 64 hex digits
  );
  if (!ok) return { ok: false, reason: "bad_signature" };
  return { ok: true, nonce: t.nonce, issuedAt: t.issuedAt, expiresAt: t.issuedAt + skew, url: t.url };
}

export interface RelayConnectCheckInput extends RelayTokenExpectation {
  /** The pool (model id): keys are bound to it. */
  model: string;
  /** Whether plain-http worker URLs are allowed (development). */
  allowHttp: boolean;
}

export type RelayConnectCheck = (RelayTokenCheck & { ok: false }) | (RelayTokenCheck & { ok: true; record: RelayKeyRecord });

/**
 * The edge's whole check of a relay connect. First without any I/O: the token names its key id,
 * worker and URL, so the key is derived from the secret for this pool and the signature, worker,
 * audience, freshness and URL policy are checked. Only a token that passes reaches `lookup` (the
 * pool index's registry: a Durable Object), which must hold that key unrevoked with the same
 * binding.
 */
export async function verifyRelayConnect(
  secret: string | null,
  presented: string | null,
  expect: RelayConnectCheckInput,
  lookup: (keyId: string) => Promise<RelayKeyRecord | null>,
): Promise<RelayConnectCheck> {
  if (presented === null || presented.trim() === "") return { ok: false, reason: "missing" };
  if (!secret) return { ok: false, reason: "unknown_key" };
  const keyId = relayTokenKeyId(presented);
  if (keyId === null) return { ok: false, reason: "malformed" };
  const parts = tokenParts(bare(presented), keyId, expect.workerId);
  if (typeof parts === "string") return { ok: false, reason: parts };
  const url = normalizeWorkerUrl(parts.url, { allowHttp: expect.allowHttp });
  if (!url.ok) return { ok: false, reason: "insecure_url" };
  const key = await deriveRelayKey(secret, { keyId, model: expect.model, workerId: expect.workerId, url: url.url });
  const check = await checkRelayToken({ keyId, key }, presented, expect);
  if (!check.ok) return check;
  const record = await lookup(keyId);
  // A signature that verifies for a binding the registry does not hold was made with the secret itself.
  if (!record || record.model !== expect.model || record.workerId !== expect.workerId || record.url !== url.url) return { ok: false, reason: "unknown_key" };
  if (record.revokedAt !== null) return { ok: false, reason: "revoked" };
  return { ...check, record };
}

/** Whether a hello's `url` is the URL the connect's key is bound to (same normalised spelling). */
export function helloUrlMatchesKey(helloUrl: string, boundUrl: string | undefined): boolean {
  if (boundUrl === undefined) return false;
  const n = normalizeWorkerUrl(helloUrl, { allowHttp: true });
  return n.ok && n.url === boundUrl;
}
