/**
 * The isolate's queue of receipts for each shard of a pool (src/routing-index/receipt-entries.ts):
 * settlements and prefill-done marks wait here a few ms so that one index call carries many. A
 * queue goes to its shard, in the order it was filled, with whichever comes first:
 * - the next route or admit call to that shard (route.ts), which the index answers after applying
 *   them, so its pick sees the load they free;
 * - a timer RECEIPT_FLUSH_MS after each receipt was queued, in the context of the request that
 *   queued it (workerd runs a timer's callback and its I/O there), as one `receipts` call, only
 *   while that receipt still waits: its request is then alive (its waitUntil holds the receipt),
 *   where one whose receipt went already may be ending, and a call made there can be cut;
 * - at once, when the caller waits for delivery (a sharded pool's release before reply) or the
 *   queue holds MAX_RECEIPTS_PER_CALL.
 * Each receipt's promise resolves once its call answered or failed: the request that queued it
 * holds it under waitUntil, so its isolate lives until then. workerd runs a promise's reactions
 * in the context that made it when another request's call resolves it (compatibility flag
 * handle_cross_request_promise_resolution, on since 2024-10-14: cloudflare/workerd
 * src/workerd/io/compatibility-date.capnp, field 62). Calls always use the stub of the request
 * that makes them; only plain data crosses requests. A carrying call that fails sends its
 * receipts on their own, best-effort like every receipt call.
 */
import { MAX_RECEIPTS_PER_CALL, type ChatFrontDoor, type ReceiptEntry } from "../../routing-index/front-door.ts";

/**
 * How long a receipt may wait for a call to carry it (ms). The index's other signals already lag
 * this much: a relay sends KV events every 5 ms (flushIntervalMs) and shards exchange load every
 * 5 ms (loadSyncMs); an admission queue's shortest band wait is 1 s.
 */
export const RECEIPT_FLUSH_MS = 5;

interface Queued {
  entry: ReceiptEntry;
  /** Taken for a call: its timer sends nothing. */
  taken: boolean;
  /** When it was queued (the edge's clock): a prefill-done mark is sent with its age. */
  at: number;
  delivered: () => void;
}

/** Receipts taken off a shard's queue to ride one call. */
export interface CarriedReceipts {
  entries: ReceiptEntry[];
  /** The carrying call answered: the index applied them. */
  delivered(): void;
  /** Sends them in one `receipts` call of their own through `door` (a timer's flush, or after a carrying call failed; the caller holds the promise under waitUntil). */
  sendAlone(door: ChatFrontDoor): Promise<void>;
}

export interface ReceiptOutboxOptions {
  flushMs?: number;
  now?: () => number;
}

export class ReceiptOutbox {
  /** Keyed by the shard's object name (pool-address.ts shardObjectName): a shard's receipts go to that shard only. */
  readonly #queues = new Map<string, Queued[]>();
  readonly #flushMs: number;
  readonly #now: () => number;

  constructor(opts: ReceiptOutboxOptions = {}) {
    this.#flushMs = opts.flushMs ?? RECEIPT_FLUSH_MS;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Queues a receipt for shard `shardKey`; `door` is that shard's stub in the calling request.
   * `now`: send the queue at once (the caller awaits the promise). Resolves once it reached the
   * index, or its call failed.
   */
  queue(shardKey: string, door: ChatFrontDoor, entry: ReceiptEntry, now: boolean): Promise<void> {
    let q = this.#queues.get(shardKey);
    if (!q) {
      q = [];
      this.#queues.set(shardKey, q);
    }
    const queue = q;
    let item!: Queued;
    const delivered = new Promise<void>((resolve) => queue.push((item = { entry, taken: false, at: this.#now(), delivered: resolve })));
    if (now || queue.length >= MAX_RECEIPTS_PER_CALL) void this.#send(shardKey, door);
    else
      setTimeout(() => {
        if (!item.taken) void this.#send(shardKey, door);
      }, this.#flushMs);
    return delivered;
  }

  /** The shard's queued receipts, taken for a call to carry; null when none wait. */
  take(shardKey: string): CarriedReceipts | null {
    const q = this.#queues.get(shardKey);
    if (!q) return null;
    this.#queues.delete(shardKey);
    for (const x of q) x.taken = true;
    const now = this.#now();
    const entries = q.map(({ entry, at }) => (entry.kind === "prefill_done" ? { ...entry, ageMs: Math.max(0, now - at) } : entry));
    const delivered = (): void => {
      for (const x of q) x.delivered();
    };
    return {
      entries,
      delivered,
      sendAlone: (door) => door.receipts(entries).then(delivered, delivered),
    };
  }

  async #send(shardKey: string, door: ChatFrontDoor): Promise<void> {
    await this.take(shardKey)?.sendAlone(door);
  }
}
