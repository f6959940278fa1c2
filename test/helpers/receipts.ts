/** The settlements among the edge's receipts (carried by a route or sent in a `receipts` call), in order. */
import type { ReceiptEntry, SettleRequest } from "../../src/routing-index/front-door.ts";

export function settlementsOf(entries: readonly ReceiptEntry[] | undefined): SettleRequest[] {
  return (entries ?? []).filter((e) => e.kind === "settle");
}

/** The receipt ids of the prefill-done marks among them, in order. */
export function prefillMarksOf(entries: readonly ReceiptEntry[] | undefined): string[] {
  return (entries ?? []).flatMap((e) => (e.kind === "prefill_done" ? [e.receiptId] : []));
}
