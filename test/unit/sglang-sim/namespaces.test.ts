/**
 * The simulator's /generate with SGLang's cache_salt, and a `--speculative-algorithm EAGLE` worker,
 * over real HTTP and ZMQ: a salt reuses only its own cached prefix; salted blocks are published as
 * BlockStoredWithMetadata (the relay's decoder reads the salt back); an EAGLE worker publishes its
 * pages as token pairs that the decoder maps back to the prompt's tokens.
 */
import * as zmq from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeKvEventMessage, type BlockStoredEvent } from "../../../src/engine-events/event-decode.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

const PROMPT = Array.from({ length: 80 }, (_, i) => 1000 + i);

async function generate(w: SimulatedWorker, body: Record<string, unknown>): Promise<{ status: number; cached: number; json: Record<string, any> }> {
  const r = await fetch(`${w.url}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ input_ids: PROMPT, sampling_params: { max_new_tokens: 1 }, ...body }) });
  const json = (await r.json()) as Record<string, any>;
  return { status: r.status, cached: json.meta_info?.cached_tokens ?? -1, json };
}

/** Collects the BlockStored events the worker publishes until `count` arrived. */
async function storedEvents(sub: zmq.Subscriber, count: number): Promise<BlockStoredEvent[]> {
  const out: BlockStoredEvent[] = [];
  while (out.length < count) {
    const frames = (await sub.receive()) as Buffer[];
    const m = decodeKvEventMessage(frames.map((f) => new Uint8Array(f)));
    expect(m.dropped).toEqual([]);
    for (const e of m.events) if (e.type === "BlockStored") out.push(e);
  }
  return out;
}

describe("simulated SGLang: cache_salt and EAGLE", () => {
  let plain: SimulatedWorker;
  let eagle: SimulatedWorker;
  const subs: zmq.Subscriber[] = [];

  beforeAll(async () => {
    plain = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
    eagle = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16, eagle: true });
  });
  afterAll(async () => {
    for (const s of subs) s.close();
    await plain.close();
    await eagle.close();
  });

  async function subscribe(w: SimulatedWorker): Promise<zmq.Subscriber> {
    const sub = new zmq.Subscriber({ linger: 0 });
    sub.connect(w.kvEndpoint!);
    sub.subscribe();
    subs.push(sub);
    // PUB/SUB drops what is sent before the subscription lands: publish throwaway batches (another
    // prompt, flushed from the cache) until one arrives, then drain.
    sub.receiveTimeout = 300;
    for (let attempt = 0; ; attempt++) {
      await fetch(`${w.url}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ input_ids: [7, 8, 9, 10], sampling_params: { max_new_tokens: 1 } }) });
      await fetch(`${w.url}/flush_cache`, { method: "POST" });
      try {
        await sub.receive();
        break;
      } catch (e) {
        if (attempt >= 20) throw e;
      }
    }
    for (;;) {
      try {
        await sub.receive();
      } catch {
        break;
      }
    }
    sub.receiveTimeout = 10_000;
    return sub;
  }

  it("a salt reuses only its own prefix and its blocks carry the salt", async () => {
    const sub = await subscribe(plain);
    expect((await generate(plain, { cache_salt: "tenant-a" })).cached).toBe(0);
    const published = await storedEvents(sub, 5);
    expect(published.every((e) => e.cacheSalt === "tenant-a")).toBe(true);
    expect(published.flatMap((e) => e.tokenIds)).toEqual(PROMPT);
    expect((await generate(plain, { cache_salt: "tenant-a" })).cached).toBe(64);
    expect((await generate(plain, { cache_salt: "tenant-b" })).cached).toBe(0);
    expect((await generate(plain, {})).cached).toBe(0);
    const list = await generate(plain, { cache_salt: ["a", "b"] });
    expect(list.status).toBe(400);
  });

  it("an EAGLE worker publishes bigram pages that decode to the prompt's tokens", async () => {
    const sub = await subscribe(eagle);
    expect((await generate(eagle, {})).cached).toBe(0);
    // 80 tokens → 79 pairs → 4 whole pages of 16 pairs: tokens 0..63 (pair 63 looks ahead to token 64).
    const published = await storedEvents(sub, 4);
    expect(published.every((e) => e.bigram === true)).toBe(true);
    expect(published.flatMap((e) => e.tokenIds)).toEqual(PROMPT.slice(0, 64));
    const again = await generate(eagle, {});
    expect(again.cached).toBe(64);
  });
});
