/**
 * Stage 9, settle: what the edge tells the pool about a pick afterwards. The receipt's settlement
 * (tokens, outcome, edge overhead) frees the request's load; prefill done stops counting it against
 * others' start; a worker the edge cannot reach is quarantined on every shard. All fire-and-forget
 * under waitUntil: the client never waits on the index, except a sharded pool's complete answer.
 */
import type { ChatFrontDoor, RouteDecision, SettleRequest } from "../../routing-index/front-door.ts";

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
}

export function openReceipt(deps: SettleDeps, shardIndex: ChatFrontDoor, decision: RouteDecision, edgeOverheadMs: number): Receipt {
  return {
    settle(s) {
      const p = shardIndex.settle({ receiptId: decision.receiptId, edgeOverheadMs, ...s }).catch(() => undefined);
      deps.waitUntil(p);
      return p;
    },
    prefillDone() {
      deps.waitUntil(shardIndex.markPrefillDone(decision.receiptId).catch(() => undefined));
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
