/**
 * What the edge tells a pool's shard about its picks afterwards, as an ordered list: a
 * settlement (the request's tokens and outcome; frees its load) or a prefill-done mark (its first
 * output; its prefill stops queueing others). The edge queues them per shard (src/edge/chat/receipt-outbox.ts)
 * and sends them riding its next route or admit call to that shard, or in one `receipts` call;
 * the shard applies them in order, before the decision of the call that carries them.
 */
import type { RouteRequest, SettleRequest } from "./router.ts";

export type ReceiptEntry = SettleEntry | PrefillDoneEntry;

export type SettleEntry = { kind: "settle" } & SettleRequest;

export interface PrefillDoneEntry {
  kind: "prefill_done";
  receiptId: string;
  /**
   * How long the mark waited at the edge before it was sent (ms): the index dates the first output
   * this much before the mark's arrival, so the load-back measured from it (router.ts settle) does
   * not grow by the edge's batching wait.
   */
  ageMs: number;
}

/**
 * Most entries one call carries (the edge sends its queue at this size, and the index reads no
 * more of a call): 64 entries of a few fixed-size fields and a receipt id of ~16 characters, a few KiB.
 */
export const MAX_RECEIPTS_PER_CALL = 64;

/** Longest wait a prefill-done mark's age may claim (ms); beyond it the mark is dated at the route. */
export const MAX_RECEIPT_AGE_MS = 60_000;

/** A route or admit call with the receipts it carries, applied before its decision. */
export type CarryingReceipts<T extends RouteRequest = RouteRequest> = T & { receipts?: readonly ReceiptEntry[] };
