// KV events from simulated radix caches to a real RoutingCore, as the relays carry them: each cache's
// events go through the relay's own translation (services/relay/worker-block-set.ts) and reach the
// index `lagMs` later, on the target the relay's hello named (a worker, or one DP rank of it).
import { WorkerBlockSet } from "../../services/relay/worker-block-set.ts";
import { relayKvEvent } from "../lib/kv-event.mjs";

export class RelayFeed {
  /** `now()`: the simulation clock. */
  constructor(core, pageSize, lagMs, now) {
    Object.assign(this, { core, pageSize, lagMs, now });
    this.queues = new Map(); // target id → [{ at, events }]
    this.seq = 0;
  }

  /** A cache event sink whose events reach `targetId` (null: the events are dropped, as an unsubscribed port's are). */
  sink(targetId) {
    if (targetId === null) return () => {};
    this.core.applyDump(targetId, { type: "dump", epoch: 1, seq: -1, blocks: [] });
    const blockSet = new WorkerBlockSet(this.pageSize);
    const queue = [];
    this.queues.set(targetId, queue);
    return (ev) => {
      const out = blockSet.apply([relayKvEvent(ev)]);
      if (out.events.length) queue.push({ at: this.now() + this.lagMs, events: out.events });
    };
  }

  /** Applies every batch whose propagation delay has passed. */
  deliver() {
    const now = this.now();
    for (const [id, queue] of this.queues) {
      let k = 0;
      while (k < queue.length && queue[k].at <= now) {
        const r = this.core.applyEvents(id, { type: "events", epoch: 1, seq: this.seq++, events: queue[k].events });
        if (!r.ok) throw new Error(`relay apply failed on ${id}: ${r.reason}`);
        k++;
      }
      if (k) queue.splice(0, k);
    }
  }
}

/** A relay hello for the simulated pool (role and DP rank as the relay reads them from /server_info). */
export function hello(core, { workerId, targetId = workerId, kvEvents = true, disaggregationMode, dpSize, dpRank }, pageSize) {
  const msg = { type: "hello", workerId, url: `http://sim/${workerId}`, blockSize: pageSize, epoch: 1, modelName: "m", contract: null, kvEvents };
  if (disaggregationMode) Object.assign(msg, { disaggregationMode, ...(disaggregationMode === "prefill" ? { bootstrapPort: 8998 } : {}) });
  if (dpSize) Object.assign(msg, { dpSize, dpRank });
  const r = core.hello(msg, targetId);
  if (!r.ok) throw new Error(`hello ${targetId}: ${r.reason}`);
}
