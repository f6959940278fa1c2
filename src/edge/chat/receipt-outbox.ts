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
 * - at once, when the caller needs the room now (a sharded pool's release before reply; a request
 *   whose pool was short of room at its pick: route.ts roomWanted) or the queue holds MAX_RECEIPTS_PER_CALL.
 * A receipt waits even when no request of the isolate is on its way to the index: under load the
 * isolate's other requests starting within RECEIPT_FLUSH_MS carry it (so do the turns of a client
 * on the same host that loops without think time, as the bench's does). A client's own next turn
 * comes at least its round trip to the colo later, maybe in another isolate: in a quiet isolate the
 * receipt goes alone on its timer, one call as before, about RECEIPT_FLUSH_MS late (the index's
 * other signals lag as much; a timer can fire later behind the isolate's other work).
 * Each receipt's promise is held under its own request's waitUntil and is settled in that request's
 * context only: when the call that request made for it answered or failed, or, when another
 * request's call took it, by its own timer. A request whose waitUntil waits on a promise only
 * another request settles has nothing pending of its own: workerd judges it hung, cancels it, and
 * drops the continuations a later settle from the other request would run (its warning: "A promise
 * was resolved or rejected from a different request context …"; compatibility flag
 * handle_cross_request_promise_resolution, cloudflare/workerd src/workerd/io/compatibility-date.capnp).
 * The request that takes receipts for its call holds that call itself (it awaits it), and sends
 * them again when the call failed unanswered, from a waitUntil it registers as the call starts (a
 * request cancelled while its call waits runs none of its own path after): best-effort, like every
 * receipt call; a receipt applied twice changes nothing (routing-core.ts applyReceipts). Calls always use the stub of the request that makes them; only plain data crosses
 * requests.
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
  /** Settles the queuing request's promise: called in that request's context only. */
  release: () => void;
}

/** Receipts taken off a shard's queue to ride one call. */
export interface CarriedReceipts {
  /** As of the take: a prefill-done mark's age is how long it has waited. */
  entries: ReceiptEntry[];
  /**
   * Sends them in one `receipts` call of their own through `door`, each mark aged anew (after a
   * carrying call failed unanswered; the caller holds the promise under its own waitUntil).
   * Resolves when the call answered or failed.
   */
  sendAlone(door: ChatFrontDoor): Promise<void>;
}

export interface ReceiptOutboxOptions {
  flushMs?: number;
  now?: () => number;
  /** Runs `fn` after `ms` (setTimeout; tests step a fake clock). */
  setTimer?: (fn: () => void, ms: number) => void;
}

export class ReceiptOutbox {
  /** Keyed by the shard's object name (pool-address.ts shardObjectName): a shard's receipts go to that shard only. */
  readonly #queues = new Map<string, Queued[]>();
  readonly #flushMs: number;
  readonly #now: () => number;
  readonly #setTimer: (fn: () => void, ms: number) => void;

  constructor(opts: ReceiptOutboxOptions = {}) {
    this.#flushMs = opts.flushMs ?? RECEIPT_FLUSH_MS;
    this.#now = opts.now ?? Date.now;
    this.#setTimer = opts.setTimer ?? ((fn, ms) => void setTimeout(fn, ms));
  }

  /**
   * Queues a receipt for shard `shardKey`; `door` is that shard's stub in the calling request.
   * `sendNow`: send the queue at once (the room it frees is needed now); else it waits up to
   * RECEIPT_FLUSH_MS for a call to carry it. Resolves, in the calling request's context, once the
   * call this request made for it answered or failed, or once its timer found it taken by another
   * request's call.
   */
  queue(shardKey: string, door: ChatFrontDoor, entry: ReceiptEntry, sendNow: boolean): Promise<void> {
    let q = this.#queues.get(shardKey);
    if (!q) {
      q = [];
      this.#queues.set(shardKey, q);
    }
    let item!: Queued;
    const released = new Promise<void>((resolve) => (item = { entry, taken: false, at: this.#now(), release: resolve }));
    q.push(item);
    if (sendNow || q.length >= MAX_RECEIPTS_PER_CALL) void this.#send(shardKey, door, item);
    else
      this.#setTimer(() => {
        // Taken by another request's call, which that request holds: this request's part is done.
        if (item.taken) item.release();
        else void this.#send(shardKey, door, item);
      }, this.#flushMs);
    return released;
  }

  /** The shard's queued receipts, taken for a call to carry; null when none wait. */
  take(shardKey: string): CarriedReceipts | null {
    const q = this.#queues.get(shardKey);
    if (!q) return null;
    this.#queues.delete(shardKey);
    for (const x of q) x.taken = true;
    return {
      entries: this.#aged(q),
      sendAlone: (door) => door.receipts(this.#aged(q)).then(noop, noop),
    };
  }

  /** The entries to send now: a prefill-done mark with the time it has waited. */
  #aged(q: readonly Queued[]): ReceiptEntry[] {
    const now = this.#now();
    return q.map(({ entry, at }) => (entry.kind === "prefill_done" ? { ...entry, ageMs: Math.max(0, now - at) } : entry));
  }

  /** Sends the shard's queue, `own` in it, from `own`'s request; settles `own` only (the others' timers settle theirs). */
  async #send(shardKey: string, door: ChatFrontDoor, own: Queued): Promise<void> {
    await this.take(shardKey)?.sendAlone(door);
    own.release();
  }
}

function noop(): void {}
