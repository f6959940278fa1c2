/**
 * Slots (downloads, probes) shared by the decode service's clients. The edge names the client of
 * each call (an opaque label of its API key or network, `x-kvedge-client`). A call without a label
 * (an operator's own, or an edge that cannot tell its clients apart: a local fleet without
 * `cf-connecting-ip`) is not capped per client; it waits in line as the group "".
 *
 * Why not first come, first served: one client could hold every slot (a request with many stalled
 * URLs or hostile videos) for the length of the timeouts, and every other client's media waited or
 * was refused. Here a client holds at most `perClient` slots and queues at most `perClientQueue`
 * calls, so at least `limit − perClient` slots stay for the others; a freed slot goes to the
 * waiting client that holds the fewest slots (its oldest call; ties: the oldest call). Not
 * work-conserving on purpose: a running download cannot be taken back, so the share is what keeps
 * room for the next client.
 *
 * One piece of work can be wanted by several clients (a popular URL, the same video bytes): a
 * claim is joined by each of them and waits in each one's line, and whichever line reaches it
 * first takes the slot (charged to that client). So no client waits behind another client's share
 * for work it also asked for.
 */
import { QueueFullError } from "./concurrency.ts";

export interface FairSlotsOptions {
  /** Slots held at once across clients. */
  limit: number;
  /** Calls allowed to wait across clients. */
  maxQueue: number;
  /** Largest fraction of the slots (and of the queue) one labeled client may hold (no cap at 1). */
  share: number;
}

/** A wait for one slot, which other clients wanting the same work can join. */
export interface SlotClaim {
  /** The key the slot is charged to (pass it to release), once granted. Rejects with QueueFullError, or when every waiter's signal has aborted. */
  readonly granted: Promise<string>;
  /** Another client wants this work: it may also be granted the slot, from its own line. A no-op once granted, or when its line is full. */
  join(label: string | null, signal?: AbortSignal): void;
}

interface Ticket {
  done: boolean;
  entries: Waiter[];
  resolve: (key: string) => void;
  reject: (e: unknown) => void;
}

interface Waiter {
  /** The line's key: the label, or "" for unlabeled calls. */
  client: string;
  capped: boolean;
  seq: number;
  ticket: Ticket;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

/** The most one client may hold of `total` under `share` (at least one). */
function shareOf(total: number, share: number): number {
  return Math.max(1, Math.floor(total * share));
}

export class FairSlots {
  readonly limit: number;
  readonly maxQueue: number;
  readonly perClient: number;
  readonly perClientQueue: number;
  private active = 0;
  private peak = 0;
  private seq = 0;
  private readonly held = new Map<string, number>();
  /** Each client's waiting calls, oldest first. */
  private readonly queues = new Map<string, Waiter[]>();
  private queued = 0;

  constructor(o: FairSlotsOptions) {
    this.limit = Math.max(1, o.limit);
    this.maxQueue = Math.max(0, o.maxQueue);
    this.perClient = Math.min(this.limit, shareOf(this.limit, o.share));
    this.perClientQueue = this.maxQueue === 0 ? 0 : Math.min(this.maxQueue, shareOf(this.maxQueue, o.share));
  }

  get inUse(): number {
    return this.active;
  }
  get waiting(): number {
    return this.queued;
  }
  /** Most slots ever held at once. */
  get peakInUse(): number {
    return this.peak;
  }
  /** Clients holding or waiting for a slot. */
  get clients(): number {
    return new Set([...this.held.keys(), ...this.queues.keys()]).size;
  }
  private heldBy(client: string): number {
    return this.held.get(client) ?? 0;
  }

  /** Waits for a slot for `label` (null: unlabeled, no per-client cap); release(key) when the work is over. */
  claim(label: string | null, signal?: AbortSignal): SlotClaim {
    let ticket!: Ticket;
    const granted = new Promise<string>((resolve, reject) => {
      ticket = { done: false, entries: [], resolve, reject };
    });
    granted.catch(() => undefined);
    if (!this.offer(ticket, label, signal)) this.finish(ticket, null, new QueueFullError("queue full"));
    return { granted, join: (l, s) => void (!ticket.done && this.offer(ticket, l, s)) };
  }

  /** Gives back a slot taken under `key` (what `granted` resolved to). */
  release(key: string): void {
    this.active--;
    const n = this.heldBy(key) - 1;
    if (n > 0) this.held.set(key, n);
    else this.held.delete(key);
    // Fill every slot a waiting client may take (one release can unblock a client at its cap only).
    for (;;) {
      const next = this.nextWaiter();
      if (!next) return;
      this.take(next.client);
      this.finish(next.ticket, next.client, null);
    }
  }

  /** Takes a slot for the ticket under `label` at once, or queues it in that line; false when the line is full. */
  private offer(ticket: Ticket, label: string | null, signal?: AbortSignal): boolean {
    if (signal?.aborted) {
      if (ticket.entries.length === 0) this.finish(ticket, null, signal.reason);
      return true;
    }
    const client = label ?? "";
    const capped = label !== null;
    if (this.active < this.limit && (!capped || this.heldBy(client) < this.perClient)) {
      this.take(client);
      this.finish(ticket, client, null);
      return true;
    }
    const mine = this.queues.get(client) ?? [];
    if (this.queued >= this.maxQueue || (capped && mine.length >= this.perClientQueue)) return false;
    const w: Waiter = {
      client,
      capped,
      seq: this.seq++,
      ticket,
      signal,
      onAbort: () => {
        this.dequeue(w);
        ticket.entries.splice(ticket.entries.indexOf(w), 1);
        // The last waiter of the work gone: nobody wants it any more.
        if (ticket.entries.length === 0) this.finish(ticket, null, signal!.reason);
      },
    };
    signal?.addEventListener("abort", w.onAbort, { once: true });
    mine.push(w);
    this.queues.set(client, mine);
    this.queued++;
    ticket.entries.push(w);
    return true;
  }

  /** Ends a ticket: granted to `key`, or failed with `error`; its other waiters leave their lines. */
  private finish(ticket: Ticket, key: string | null, error: unknown): void {
    if (ticket.done) return;
    ticket.done = true;
    for (const w of ticket.entries) {
      w.signal?.removeEventListener("abort", w.onAbort);
      this.dequeue(w);
    }
    ticket.entries.length = 0;
    if (key !== null) ticket.resolve(key);
    else ticket.reject(error);
  }

  private take(client: string): void {
    this.active++;
    this.held.set(client, this.heldBy(client) + 1);
    this.peak = Math.max(this.peak, this.active);
  }

  private dequeue(w: Waiter): void {
    const q = this.queues.get(w.client);
    const i = q ? q.indexOf(w) : -1;
    if (i === -1) return;
    q!.splice(i, 1);
    if (q!.length === 0) this.queues.delete(w.client);
    this.queued--;
  }

  /** The oldest call of the waiting client under its cap holding the fewest slots; null when none may start. */
  private nextWaiter(): Waiter | null {
    if (this.active >= this.limit) return null;
    let best: Waiter | null = null;
    for (const [client, q] of this.queues) {
      const h = this.heldBy(client);
      const w = q[0]!;
      if (w.capped && h >= this.perClient) continue;
      if (!best || h < this.heldBy(best.client) || (h === this.heldBy(best.client) && w.seq < best.seq)) best = w;
    }
    return best;
  }
}
