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
 * - at once, when no request of this isolate preparing a route may go to that shard (no carrier can
 *   come soon), when the caller waits for delivery (a sharded pool's release before reply) or the
 *   queue holds MAX_RECEIPTS_PER_CALL.
 * A request counts as preparing a route from its generate handler's start (chat, completions,
 * responses) until its first route or admit call starts, or the handler ends without one. One that
 * ends so (an error, a refusal, its client gone) leaves what waits to the receipts' own timers: it
 * holds no stub of theirs, and sending them would make it the carrier of other requests' receipts
 * for at most RECEIPT_FLUSH_MS saved. It may go to any shard until its mark learns the one it goes
 * to (`goesTo`: a one-shard pool's, once its model is resolved, markPoolShard); from then on only
 * that shard's new receipts wait for it. Another shard's receipts waiting already keep their timers,
 * for the same reason.
 * Each receipt's promise is held under its own request's waitUntil and is settled in that request's
 * context only: when the call that request made for it answered or failed, or, when another
 * request's call took it, by its own timer. A request whose waitUntil waits on a promise only
 * another request settles has nothing pending of its own: workerd judges it hung, cancels it, and
 * drops the continuations a later settle from the other request would run (its warning: "A promise
 * was resolved or rejected from a different request context …"; compatibility flag
 * handle_cross_request_promise_resolution, cloudflare/workerd src/workerd/io/compatibility-date.capnp).
 * The request that takes receipts for its call holds that call itself (it awaits it), and sends
 * them again from its own waitUntil when the call failed unanswered: best-effort, like every
 * receipt call. Calls always use the stub of the request that makes them; only plain data crosses
 * requests.
 */
import { MAX_RECEIPTS_PER_CALL, type ChatFrontDoor, type ReceiptEntry } from "../../routing-index/front-door.ts";
import { shardObjectName } from "../../routing-index/pool-address.ts";

/**
 * How long a receipt may wait for a call to carry it (ms). The index's other signals already lag
 * this much: a relay sends KV events every 5 ms (flushIntervalMs) and shards exchange load every
 * 5 ms (loadSyncMs); an admission queue's shortest band wait is 1 s.
 */
export const RECEIPT_FLUSH_MS = 5;

/**
 * Longest a request counts as preparing a route: past it, receipts no longer wait for its route
 * (a slow media fetch then just rides nothing; a cancelled request's mark stops counting).
 */
export const PREPARING_MARK_MAX_MS = 2_000;

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
}

/** A request preparing a route, as its outbox counts it. */
export interface PreparingRoute {
  /**
   * Its route goes to shard `shardKey`: receipts queued for other shards stop waiting for it. A
   * request that routes several times (a batch's prompts) may name several shards; each counts.
   */
  goesTo(shardKey: string): void;
  /** Stops counting it (its first index call starts); later calls do nothing. */
  release(): void;
}

/**
 * A pool of one shard: the route can go nowhere but its one object, known once the handler has
 * resolved the model, so other pools' receipts stop waiting for this request from then on. A
 * sharded pool's shard comes from the routed hashes, which exist only in the same synchronous turn
 * as the pick (route.ts): no other request runs in between, so it is not marked.
 */
export function markPoolShard(preparing: PreparingRoute, model: string, shards: number): void {
  if (shards === 1) preparing.goesTo(shardObjectName(model, 0));
}

/** A preparing request as the outbox keeps it. */
interface PreparingMark {
  /** When it started preparing (the edge's clock). */
  at: number;
  /** The shards its route may go to; null: not known yet (any shard). */
  shardKeys: string[] | null;
}

export class ReceiptOutbox {
  /** Keyed by the shard's object name (pool-address.ts shardObjectName): a shard's receipts go to that shard only. */
  readonly #queues = new Map<string, Queued[]>();
  /**
   * Requests of this isolate preparing a route, by start time: their route or admit call may carry
   * a queue soon. A mark older than PREPARING_MARK_MAX_MS no longer counts: workerd cancels a request
   * whose client left without running its `finally`, and such a mark must not keep every later
   * receipt waiting for the isolate's life.
   */
  readonly #preparing = new Set<PreparingMark>();
  readonly #flushMs: number;
  readonly #now: () => number;

  constructor(opts: ReceiptOutboxOptions = {}) {
    this.#flushMs = opts.flushMs ?? RECEIPT_FLUSH_MS;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Runs `prepare` counted as a request preparing a route, until the mark's release (route.ts, as
   * its first index call starts) or `prepare` settles, whichever comes first.
   */
  async whilePreparingRoute<T>(prepare: (mark: PreparingRoute) => Promise<T>): Promise<T> {
    const started: PreparingMark = { at: this.#now(), shardKeys: null };
    // Marks of cancelled requests are dropped here too, so they stay bounded where no receipt is queued.
    this.#dropStaleMarks(started.at);
    this.#preparing.add(started);
    const mark: PreparingRoute = {
      goesTo: (shardKey) => {
        if (started.shardKeys === null) started.shardKeys = [shardKey];
        else if (!started.shardKeys.includes(shardKey)) started.shardKeys.push(shardKey);
      },
      release: () => void this.#preparing.delete(started),
    };
    try {
      return await prepare(mark);
    } finally {
      mark.release();
    }
  }

  /**
   * Whether a request preparing a route (started within PREPARING_MARK_MAX_MS) may go to shard
   * `shardKey`: its shard is not known yet, or is this one.
   */
  #carrierPreparing(shardKey: string): boolean {
    this.#dropStaleMarks(this.#now());
    for (const m of this.#preparing) if (m.shardKeys === null || m.shardKeys.includes(shardKey)) return true;
    return false;
  }

  /** Drops marks older than PREPARING_MARK_MAX_MS (the set is in start order: the oldest come first). */
  #dropStaleMarks(now: number): void {
    for (const m of this.#preparing) {
      if (now - m.at < PREPARING_MARK_MAX_MS) return;
      this.#preparing.delete(m);
    }
  }

  /**
   * Queues a receipt for shard `shardKey`; `door` is that shard's stub in the calling request.
   * `sendNow`: send the queue at once (the caller awaits the promise); it goes at once too when no
   * request preparing a route may go to this shard. Resolves, in the calling
   * request's context, once the call this request made for it answered or failed, or once its
   * timer found it taken by another request's call.
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
    if (sendNow || !this.#carrierPreparing(shardKey) || q.length >= MAX_RECEIPTS_PER_CALL) void this.#send(shardKey, door, item);
    else
      setTimeout(() => {
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
