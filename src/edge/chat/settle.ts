/**
 * Stage 9, settle: what the edge tells the pool about a pick afterwards. The receipt's settlement
 * (tokens, outcome, edge overhead) frees the request's load; prefill done stops counting it against
 * others' start; both go through the isolate's receipt queue, which holds them a few ms for a route
 * call to carry (receipt-outbox.ts). A worker the edge cannot reach is quarantined on every shard at
 * once. All under waitUntil: the client never waits on the index, except a sharded pool's complete answer.
 */
import type { ChatFrontDoor, RouteDecision, SettleRequest } from "../../routing-index/front-door.ts";
import type { ReceiptOutbox } from "./receipt-outbox.ts";
import type { RouteTarget } from "./route.ts";

export type Settlement = Omit<SettleRequest, "receiptId" | "edgeOverheadMs">;

export interface Receipt {
  /** Settles the pick (once per attempt); the promise is for callers that must wait (releaseBeforeReply). */
  settle(s: Settlement): Promise<void>;
  /** The worker produced its first output: the request's prefill no longer queues others. */
  prefillDone(): void;
}

export interface SettleDeps {
  index(model: string, shard?: number): ChatFrontDoor;
  waitUntil(p: Promise<unknown>): void;
  /** The isolate's receipt queue (one per isolate: functions/index.ts). */
  receiptOutbox: ReceiptOutbox;
}

/**
 * A settlement is sent at once where its room is needed now: the caller awaits it
 * (`releaseBeforeReply`, a sharded pool), or the pool was short of room at the request's first
 * pick (route.ts roomWanted: others likely wait behind it), retrying or not (media recovery settles
 * its failed attempt before the downloads, long before its retry's pick); else it waits for a route
 * call to carry it.
 */
export function openReceipt(deps: SettleDeps, target: RouteTarget, decision: RouteDecision, edgeOverheadMs: number, releaseBeforeReply: boolean): Receipt {
  const { receiptId } = decision;
  return {
    settle(s) {
      const p = deps.receiptOutbox.queue(target.shardKey, target.index, { kind: "settle", receiptId, edgeOverheadMs, ...s }, releaseBeforeReply || target.roomWanted);
      deps.waitUntil(p);
      return p;
    },
    prefillDone() {
      deps.waitUntil(deps.receiptOutbox.queue(target.shardKey, target.index, { kind: "prefill_done", receiptId, ageMs: 0 }, false));
    },
  };
}

/**
 * Every shard routes to this worker: tell them all. A quarantine, not "down": a lost pooled
 * connection or a blip says little, and a dead worker is reported down by its relay.
 */
export function quarantineEverywhere(deps: SettleDeps, model: string, shards: number, workerId: string, reason: string): void {
  for (let k = 0; k < shards; k++) deps.waitUntil(deps.index(model, k).quarantine(workerId, reason).catch(() => undefined));
}
