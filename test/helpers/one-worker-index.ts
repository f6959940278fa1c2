/**
 * The routing index of the edge unit tests: a real RoutingCore in memory holding one worker `w1` at
 * `url` (block size 16, no processor contract, KV events unless `kvEvents` is false), and the chat
 * front door over it.
 */
import type { ChatFrontDoor } from "../../src/routing-index/front-door.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";

export function oneWorkerIndex(url: string, model: string, kvEvents = true): { core: RoutingCore; index: ChatFrontDoor } {
  const core = new RoutingCore({ blockSize: 16 });
  core.hello({ type: "hello", workerId: "w1", url, blockSize: 16, epoch: 1, modelName: model, contract: null, kvEvents }, "w1");
  const index: ChatFrontDoor = {
    route: async (r) => core.route(r),
    profile: async () => ({ blockSize: null, workers: 1, workersUp: 1, cohort: { ok: false, reason: "no_contract", detail: "" } }),
    settle: async (s) => void core.settle(s),
    quarantine: async () => undefined,
    markPrefillDone: async (id) => core.markPrefillDone(id),
    receipts: async (entries) => void core.applyReceipts(entries),
  };
  return { core, index };
}
