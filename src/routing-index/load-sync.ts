/**
 * The pool's in-flight load as this object changes it, and its replication between the shards of a
 * sharded pool (src/load/load-replica.ts): local changes are applied to the LoadTracker and queued
 * for the other shards; their changes are applied here under ids namespaced by the sending shard.
 */
import type { ActiveRequest, LoadTracker } from "../load/load-tracker.ts";
import { LagWindow, replicaReceiptId, Tombstones, type LoadOp, type LoadSyncStats } from "../load/load-replica.ts";
import type { WorkerRegistry } from "./worker-registry.ts";

export class LoadSync {
  readonly #load: LoadTracker;
  readonly #registry: WorkerRegistry;
  readonly #now: () => number;
  /** One shard of a sharded pool: queue local changes for the other shards. */
  readonly #replicate: boolean;
  #outbox: LoadOp[] = [];
  /** Called when the outbox stops being empty: its owner sends it (takeOps) soon. */
  readonly #onQueued: () => void;
  readonly #stats = { opsSent: 0, batchesSent: 0, sendFailures: 0, opsReceived: 0, opsApplied: 0, opsSkipped: 0 };
  readonly #lag = new LagWindow();
  readonly #releasedBeforeAdd = new Tombstones(60_000, 10_000);

  constructor(load: LoadTracker, registry: WorkerRegistry, replicate: boolean, now: () => number = Date.now, onQueued: () => void = () => {}) {
    this.#load = load;
    this.#registry = registry;
    this.#replicate = replicate;
    this.#now = now;
    this.#onQueued = onQueued;
  }

  /**
   * Queues a change for the other shards; the first one in an empty outbox tells the owner to
   * schedule a send. Changes also arise outside routes and settles (a stored block, a watched
   * prefill given up on at a peek or a stats read, an admission another shard's release let in),
   * and must not wait for the next one.
   */
  #queue(op: LoadOp): void {
    this.#outbox.push(op);
    if (this.#outbox.length === 1) this.#onQueued();
  }

  /** A request routed here to the worker. */
  add(r: ActiveRequest & { chainKeys: number[] }, workerId: string): void {
    this.#load.add(r);
    if (this.#replicate)
      this.#queue({ op: "add", id: r.receiptId, workerId, prefillTokens: r.prefillTokens, decodeBlocks: r.decodeBlocks, chainKeys: r.chainKeys, at: r.startedAt });
  }

  markPrefillDone(receiptId: string): void {
    // Read before marking: the tracker marks the same record, and only the first mark goes out.
    const wasPending = this.#load.get(receiptId)?.prefillDone === false;
    this.#load.markPrefillDone(receiptId);
    if (this.#replicate && wasPending) this.#queue({ op: "done", id: receiptId, at: this.#now() });
  }

  /** Frees a request routed here; the released request, if it was still active. */
  release(receiptId: string): ActiveRequest | undefined {
    const released = this.#load.release(receiptId);
    if (this.#replicate && released) this.#queue({ op: "release", id: receiptId, at: this.#now() });
    return released;
  }

  /** Load changes made here since the last call, for the other shards (empty unless replicating). */
  takeOps(): LoadOp[] {
    const ops = this.#outbox;
    this.#outbox = [];
    if (ops.length > 0) {
      this.#stats.opsSent += ops.length;
      this.#stats.batchesSent++;
    }
    return ops;
  }

  get pendingOps(): number {
    return this.#outbox.length;
  }

  /** A batch could not be delivered to one peer shard. */
  sendFailed(): void {
    this.#stats.sendFailures++;
  }

  /** Applies another shard's load changes to this shard's replica of the pool's load. */
  applyRemote(fromShard: number, ops: readonly LoadOp[]): { applied: number; skipped: number } {
    const now = this.#now();
    let applied = 0;
    for (const op of ops) {
      const id = replicaReceiptId(fromShard, op.id);
      let ok = false;
      if (op.op === "add") {
        const w = this.#registry.get(op.workerId);
        // A worker that is down has no load to carry; one this shard has not met yet is skipped.
        if (w && w.status !== "down" && !this.#load.get(id) && !this.#releasedBeforeAdd.take(id)) {
          this.#load.add({ receiptId: id, slot: w.slot, prefillTokens: op.prefillTokens, decodeBlocks: op.decodeBlocks, chainKeys: op.chainKeys, startedAt: now, prefillDone: false });
          ok = true;
        }
      } else if (op.op === "done") {
        const r = this.#load.get(id);
        if (r) {
          this.#load.markPrefillDone(id);
          ok = true;
        }
      } else {
        ok = this.#load.release(id) !== undefined;
        // A release that overtook its add (or follows a skipped one) must not let the add in later.
        if (!ok) this.#releasedBeforeAdd.add(id, now);
      }
      if (ok) applied++;
      this.#lag.record(now - op.at);
    }
    this.#stats.opsReceived += ops.length;
    this.#stats.opsApplied += applied;
    this.#stats.opsSkipped += ops.length - applied;
    return { applied, skipped: ops.length - applied };
  }

  stats(): LoadSyncStats {
    return { ...this.#stats, lag: this.#lag.summary() };
  }
}
