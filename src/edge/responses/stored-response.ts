/**
 * Stored responses (`store: true`, OpenAI's default): what is kept, for whom and for how long. One
 * Durable Object per tenant holds that tenant's responses (durable-objects/response-store.ts), so an
 * id is only ever looked up inside its owner's object: another tenant's id is simply unknown (404).
 * The tenant is the caller's API key, the admin callers, or — keyless on a public endpoint — the
 * client network (/64, /32), each named by a digest (client-label.ts), never by the key or address.
 */
import type { ChatMessage } from "../../api/responses-schema.ts";
import type { CacheTenant } from "../cache-salt.ts";
import { clientLabel } from "../client-label.ts";

/** How long a stored response stays retrievable and continuable (previous_response_id). */
export const STORED_RESPONSE_TTL_MS = 24 * 60 * 60 * 1000;
/** Bytes of stored responses per tenant; past it the oldest are dropped first. */
export const STORED_BYTES_PER_TENANT = 64 * 1024 * 1024;
/** One record's cap (a Durable Object SQLite value holds at most 2 MB); a larger one is not stored. */
export const MAX_STORED_RECORD_BYTES = 1024 * 1024;

/** What a stored response carries: the response object, and the conversation a continuation prepends. */
export interface StoredResponse {
  response: Record<string, unknown>;
  /** Every turn so far as chat messages (without `instructions`, which are per request), this response's output included. */
  conversation: ChatMessage[];
  /** The worker that served it (its KV holds the conversation's prefix); null when unknown. */
  worker: string | null;
}

/** The storage a handler talks to (the tenant's Durable Object stub satisfies it). */
export interface ResponseStoreClient {
  put(id: string, body: string, nowMs: number, ttlMs: number, tenantBudgetBytes: number): Promise<boolean>;
  get(id: string, nowMs: number): Promise<string | null>;
  delete(id: string): Promise<boolean>;
}

/** The object name of a tenant's store. Requires initHashing(). */
export function storeNameOf(tenant: CacheTenant): string {
  if (tenant === null || "admin" in tenant) return "responses:admin";
  return `responses:${clientLabel("apiKey" in tenant ? { apiKey: tenant.apiKey } : { network: tenant.network })}`;
}

/** Ids this edge issues: `resp_` and 32 hex digits. Anything else cannot be stored here. */
export function isResponseId(id: string): boolean {
  return /^resp_[0-9a-f]{32}$/.test(id);
}
