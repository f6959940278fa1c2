/**
 * What the edge tells a pool's shard about its picks afterwards, as an ordered list: a
 * settlement (the request's tokens and outcome; frees its load) or a prefill-done mark (its first
 * output; its prefill stops queueing others). The edge queues them per shard (src/edge/chat/receipt-outbox.ts)
 * and sends them riding its next route or admit call to that shard, or in one `receipts` call;
 * the shard applies them in order, before the decision of the call that carries them. The schemas
 * here are the wire type: the index reads each entry through them and skips one that does not match
 * (RoutingCore.applyReceipts), since a mistyped entry would otherwise be applied as something else.
 */
import { z } from "zod";

/** Longest receipt id the index reads (its own are `r<time>-<seq>` in base 36, ~16 characters). */
export const MAX_RECEIPT_ID_LENGTH = 64;

const ReceiptIdSchema = z.string().min(1).max(MAX_RECEIPT_ID_LENGTH);
/** A token count the worker reported; null: none reported. */
const TokenCountSchema = z.number().finite().min(0).max(2 ** 31).nullable();

const SettleFields = {
  receiptId: ReceiptIdSchema,
  promptTokens: TokenCountSchema,
  cachedTokens: TokenCountSchema,
  outcome: z.enum(["ok", "error", "cancelled"]),
  /** The edge is retrying on another worker: this attempt is not the request's final outcome. */
  retrying: z.boolean().optional(),
  /** Edge time from request arrival until the upstream call, for the overhead histogram (ms). */
  edgeOverheadMs: z.number().finite().min(0).max(3_600_000).nullable().optional(),
};

/** A settlement: the request's tokens and outcome; frees its load. */
const SettleRequestSchema = z.object(SettleFields);
export type SettleRequest = z.infer<typeof SettleRequestSchema>;

const SettleEntrySchema = z.object({ kind: z.literal("settle"), ...SettleFields });

const PrefillDoneEntrySchema = z.object({
  kind: z.literal("prefill_done"),
  receiptId: ReceiptIdSchema,
  /**
   * How long the mark waited at the edge before it was sent (ms): the index dates the first output
   * this much before the mark's arrival, so the load-back measured from it (router.ts settle) does
   * not grow by the edge's batching wait.
   */
  ageMs: z.number().finite().min(0),
});

/** One entry of the edge's list, as the index reads it off the wire (unknown fields dropped). */
export const ReceiptEntrySchema = z.discriminatedUnion("kind", [SettleEntrySchema, PrefillDoneEntrySchema]);
export type ReceiptEntry = z.infer<typeof ReceiptEntrySchema>;

/**
 * Most entries one call carries (the edge sends its queue at this size, and the index reads no
 * more of a call): 64 entries of a few fixed-size fields and a receipt id of ~16 characters, a few KiB.
 */
export const MAX_RECEIPTS_PER_CALL = 64;

/**
 * Longest wait a prefill-done mark's age may claim (ms): a longer age is cut to it, so the first
 * output is dated at the later of the route and the mark's arrival less this.
 */
export const MAX_RECEIPT_AGE_MS = 60_000;

/** A route or admit call (`T`) with the receipts it carries, applied before its decision. */
export type CarryingReceipts<T> = T & { receipts?: readonly ReceiptEntry[] };
