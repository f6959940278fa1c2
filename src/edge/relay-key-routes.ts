/**
 * Relay keys, operator side (src/relay-wire/relay-auth.ts; docs/relay.md §Credentials). Called by the admin
 * routes after the admin check (RELAY_KEY_ROUTES):
 *   POST /admin/relay-keys                 {model?, workerId, url, dpSize?, storageGroup?} → 201 {keyId, …, credential, workerApiKey}
 *   GET  /admin/relay-keys?model=M         → {model, keys: [records without key material]}
 *   POST /admin/relay-keys/<keyId>/revoke?model=M → {key, closedSockets}
 * The credential (and, with KVEDGE_WORKER_KEY_SECRET, the worker's SGLang API key: worker-auth.ts) is returned once, to the admin caller, with `cache-control: no-store`; the edge
 * keeps only the registry row (in the pool object) and derives the key again on every connect.
 */
import { z } from "zod";
import { InvalidRequestError, NotFoundError } from "../api/errors.ts";
import type { EdgeConfig } from "../config/config.ts";
import { readBodyText } from "../api/validate.ts";
import {
  deriveRelayKey,
  formatRelayCredential,
  newRelayKeyId,
  normalizeWorkerUrl,
  STORAGE_GROUP_PATTERN,
  WORKER_ID_PATTERN,
  type RelayKeyRecord,
} from "../relay-wire/relay-auth.ts";
import { deriveWorkerApiKey } from "./worker-auth.ts";
import { MAX_DP_SIZE, type RelayKeyFrontDoor } from "../routing-index/front-door.ts";
import type { Route } from "./route-table.ts";

export interface RelayKeyDeps {
  config: EdgeConfig;
  /** Shard 0 keeps the pool's key registry; every shard closes the sockets of a revoked key. */
  index(model: string, shard?: number): RelayKeyFrontDoor;
}

const IssueSchema = z.object({
  /** Default: the first configured model. */
  model: z.string().min(1).max(256).optional(),
  workerId: z.string().regex(WORKER_ID_PATTERN, "workerId must be 1-128 characters of [A-Za-z0-9._:-]"),
  url: z.string().min(1).max(2048),
  /** The worker's attention-DP ranks the key may connect (relay-auth.ts RelayKeyGrant); default 1. */
  dpSize: z.number().int().min(1).max(MAX_DP_SIZE).default(1),
  /** The HiCache storage group the worker shares a storage view in; absent: its own view. */
  storageGroup: z.string().regex(STORAGE_GROUP_PATTERN, "storageGroup must be 1-64 characters of [A-Za-z0-9._:-]").optional(),
});

const MAX_ISSUE_BODY_BYTES = 8 * 1024;

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", "cache-control": "no-store" } });
}

function poolOf(config: EdgeConfig, model: string | null): string {
  const m = model ?? config.models[0]!.id;
  if (!config.models.some((x) => x.id === m)) throw new NotFoundError(`Unknown model '${m}'.`, "model", "model_not_found");
  return m;
}

/** A relay-key call: the admin routes checked the caller's token before. */
export interface RelayKeyCall {
  request: Request;
  url: URL;
  deps: RelayKeyDeps;
}

/** `/admin/relay-keys…` (src/edge/route-table.ts), behind the admin token (admin-routes.ts). */
export const RELAY_KEY_ROUTES: readonly Route<RelayKeyCall>[] = [
  { path: "/admin/relay-keys", methods: { GET: list, POST: (c) => issue(c.request, c.deps) } },
  { path: /^\/admin\/relay-keys\/([A-Za-z0-9_-]{22})\/revoke$/, methods: { POST: (c, [keyId]) => revoke(c, keyId!) } },
];

async function list(c: RelayKeyCall): Promise<Response> {
  const model = poolOf(c.deps.config, c.url.searchParams.get("model"));
  return json({ model, keys: await c.deps.index(model).relayKeys() });
}

async function revoke({ url, deps }: RelayKeyCall, keyId: string): Promise<Response> {
  const model = poolOf(deps.config, url.searchParams.get("model"));
  const key = await deps.index(model).revokeRelayKey(keyId);
  if (!key) throw new NotFoundError(`No relay key '${keyId}' in pool '${model}'.`, "keyId", "relay_key_not_found");
  // Every shard drops the sockets that connected with it (a relay feeds each shard separately).
  const closed = await Promise.all(Array.from({ length: deps.config.shards }, (_, k) => deps.index(model, k).closeRelayKey(key.keyId)));
  return json({ key, closedSockets: closed.reduce((a, b) => a + b, 0) });
}

async function issue(request: Request, deps: RelayKeyDeps): Promise<Response> {
  const secret = deps.config.relaySecret;
  if (!secret) throw new InvalidRequestError("RELAY_SECRET is not configured: relay keys cannot be issued.", null, "relay_secret_missing");
  let raw: unknown;
  try {
    raw = JSON.parse(await readBodyText(request, { maxBodyBytes: MAX_ISSUE_BODY_BYTES }));
  } catch (e) {
    if (e instanceof SyntaxError) throw new InvalidRequestError("Body is not valid JSON.");
    throw e;
  }
  const parsed = IssueSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidRequestError(issue.message, issue.path.join(".") || null);
  }
  const model = poolOf(deps.config, parsed.data.model ?? null);
  const u = normalizeWorkerUrl(parsed.data.url, { allowHttp: deps.config.relayAllowHttp });
  if (!u.ok) throw new InvalidRequestError(`${u.reason}.`, "url", "invalid_worker_url");
  const rec: RelayKeyRecord = {
    keyId: newRelayKeyId(),
    model,
    workerId: parsed.data.workerId,
    url: u.url,
    dpSize: parsed.data.dpSize,
    storageGroup: parsed.data.storageGroup ?? null,
    createdAt: Math.floor(Date.now() / 1000),
    revokedAt: null,
  };
  if (!(await deps.index(model).issueRelayKey(rec))) throw new InvalidRequestError("Relay-key registry is full.", null, "relay_keys_full");
  const credential = formatRelayCredential(rec.keyId, await deriveRelayKey(secret, rec));
  // The worker's SGLang --api-key (and its relay's), bound to the same URL; only when the edge derives it.
  const explicit = deps.config.workerAuth.keys.has(rec.url);
  const workerApiKey = !explicit && deps.config.workerAuth.keySecret ? await deriveWorkerApiKey(deps.config.workerAuth.keySecret, rec.url) : null;
  return json({ ...rec, credential, workerApiKey }, 201);
}
