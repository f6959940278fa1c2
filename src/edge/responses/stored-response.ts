/**
 * Stored responses (`store: true`, OpenAI's default): what is kept, for whom and for how long. One
 * Durable Object per tenant holds that tenant's responses (durable-objects/response-store.ts), so an
 * id is only ever looked up inside its owner's object: another tenant's id is simply unknown (404).
 * The tenant is the caller's API key, the admin callers, or — keyless on a public endpoint — the
 * client network (/64, /32), each named by a digest (client-label.ts), never by the key or address.
 */
import type { ChatMessage } from "../../api/responses-schema.ts";
import type { PromptPiece } from "./conversation-state.ts";
import type { StoredMedia } from "./stored-media.ts";
import type { CacheTenant } from "../cache-salt.ts";
import { clientLabel } from "../client-label.ts";

/** How long a stored response stays retrievable and continuable (previous_response_id). */
export const STORED_RESPONSE_TTL_MS = 24 * 60 * 60 * 1000;
/** Bytes of stored responses per tenant; past it the oldest are dropped first. */
export const STORED_BYTES_PER_TENANT = 64 * 1024 * 1024;
/** One record's cap (a Durable Object SQLite value holds at most 2 MB); a larger one is kept without its prompt state, or not at all. */
export const MAX_STORED_RECORD_BYTES = 1024 * 1024;
/** Records in one conversation (a continuation of a longer chain is not stored). */
export const MAX_CONVERSATION_RECORDS = 1024;
/** Bytes of one conversation's records together (a longer one cannot be continued: 400). */
export const MAX_CONVERSATION_BYTES = 16 * 1024 * 1024;

/**
 * One stored response. Records form chains: a continuation's record holds only its own turn and
 * names its parent (the response it continued; the store keeps the link), so a conversation of n
 * turns costs its own size once, not n times. The store keeps a record's ancestors while it lives
 * (durable-objects/response-store.ts), so a chain is whole or the newest record is gone too.
 */
export interface StoredResponse {
  response: Record<string, unknown>;
  /** This turn's chat messages: its input items, then its output (without `instructions`, which are per request). */
  messages: ChatMessage[];
  /** The worker that served it (its KV holds the conversation's prefix); null when unknown. */
  worker: string | null;
  /** The conversation's prompt state after this turn (conversation-state.ts); null when not kept. */
  prompt: PromptPiece | null;
  /** This turn's media items as the edge verified them (stored-media.ts). */
  media: StoredMedia[];
}

/** The storage a handler talks to (the tenant's Durable Object stub satisfies it). */
export interface ResponseStoreClient {
  /** Stores `body` as the child of `parent` (which must still be stored); false when not stored. */
  put(id: string, parent: string | null, body: string, nowMs: number, ttlMs: number, tenantBudgetBytes: number): Promise<boolean>;
  /** A response's own record, as long as it has not expired or been deleted. */
  get(id: string, nowMs: number): Promise<string | null>;
  /** The bodies of `id`'s conversation, root first, ending with `id`'s; null when `id` is not stored; "too_large" past `maxBytes`. */
  chain(id: string, nowMs: number, maxBytes: number): Promise<string[] | null | "too_large">;
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
