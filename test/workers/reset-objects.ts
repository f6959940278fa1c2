/**
 * Empties every Durable Object of the Worker's namespaces (wrangler.toml: ROUTING_INDEX,
 * RATE_LIMITER, RESPONSE_STORE) for the `workers` project's files, which share workerd runtimes.
 * `reset()` of @cloudflare/vitest-pool-workers 0.19.1 alone is not enough: an object holding an
 * open hibernatable WebSocket (a relay session) kept its relay keys and its worker "up", and an
 * object evicted before it kept its storage. So each object listed is first emptied from inside
 * (its WebSockets closed, its alarm deleted, storage.deleteAll), then evicted (in-memory state
 * gone), then reset() ends whatever else runs. Object ids stay listed (listDurableObjectIds), empty.
 */
import { env, evictDurableObject, listDurableObjectIds, reset, runInDurableObject } from "cloudflare:test";

const NAMESPACES = [env.ROUTING_INDEX, env.RATE_LIMITER, env.RESPONSE_STORE] as DurableObjectNamespace[];

export async function resetAllObjects(): Promise<void> {
  for (const ns of NAMESPACES) {
    for (const id of await listDurableObjectIds(ns)) {
      const stub = ns.get(id);
      await runInDurableObject(stub, async (_instance, state) => {
        for (const ws of state.getWebSockets()) ws.close(1001, "test file reset");
        await state.storage.deleteAlarm();
        await state.storage.deleteAll();
      });
      await evictDurableObject(stub, { webSockets: "close" });
    }
  }
  await reset();
}
