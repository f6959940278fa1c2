/**
 * The per-file reset of the shared-runtime `workers` project (reset-objects.ts) leaves no Durable
 * Object state behind: what an earlier file left (an open relay session with its hello and dump,
 * relay keys, an evicted object's storage, a rate bucket's alarm) is gone for the next file.
 */
import { SELF, env, evictDurableObject, listDurableObjectIds, runInDurableObject } from "cloudflare:test";
import { expect, it } from "vitest";
import { issueRelayKey, openRelay } from "./ws-helpers.ts";
import { resetAllObjects } from "./reset-objects.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const OTHER = "Qwen/Qwen2.5-VL-7B-Instruct";
const ADMIN = { authorization: "Bearer test-admin-token-0123456789" };
const fetchEdge = (u: string, i?: RequestInit) => SELF.fetch(u, i);
const adminJson = async <T>(path: string): Promise<T> => (await SELF.fetch(`https://edge${path}`, { headers: ADMIN })).json() as Promise<T>;
const chat = (model: string) =>
  SELF.fetch("https://edge/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", "cf-connecting-ip": "198.51.100.201" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
  });

it("what an earlier file left in Durable Objects is gone after the per-file reset", async () => {
  // An earlier file's state: a relay session left open (hello + dump accepted), a key in another
  // pool whose object was then evicted, a rate bucket (with its expiry alarm) from a chat.
  const ws = await openRelay(fetchEdge, "reset-w1", { model: MODEL, emptyDump: true });
  await issueRelayKey(fetchEdge, "reset-w2", { model: OTHER });
  await evictDurableObject(env.ROUTING_INDEX.getByName(OTHER));
  expect((await chat(MODEL)).status).toBe(502); // routed to the session's worker (nothing listens)
  const closed = new Promise<number>((resolve) => ws.addEventListener("close", (e) => resolve(e.code)));

  await resetAllObjects();

  for (const ns of [env.ROUTING_INDEX, env.RATE_LIMITER, env.RESPONSE_STORE] as DurableObjectNamespace[]) {
    for (const id of await listDurableObjectIds(ns)) {
      const left = await runInDurableObject(ns.get(id), async (_o, state) => ({ keys: (await state.storage.list()).size, alarm: await state.storage.getAlarm() }));
      expect(left, `${id.toString()} after the reset`).toEqual({ keys: 0, alarm: null });
    }
  }
  for (const model of [MODEL, OTHER]) {
    const q = `?model=${encodeURIComponent(model)}`;
    expect((await adminJson<{ keys: unknown[] }>(`/admin/relay-keys${q}`)).keys).toEqual([]);
    expect((await adminJson<{ workers: unknown[] }>(`/admin/workers${q}`)).workers).toEqual([]);
  }
  expect((await chat(MODEL)).status).toBe(503);
  expect(await closed).toBe(1001);
});
