/**
 * proxyOnce opens the upstream exchange (its watchdog timer and its listener on the client's
 * signal) only once the worker's credentials are in hand: a credential look-up that throws (here
 * the derivation's refusal of an empty secret) leaves nothing behind on the client's signal, which
 * every retry of the request shares.
 */
import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { proxyOnce, type ProxyInput } from "../../../src/edge/chat/proxy.ts";
import type { RouteDecision } from "../../../src/routing-index/front-door.ts";

describe("proxyOnce before the worker is called", () => {
  it("a credential look-up that throws leaves no exchange listening on the client's signal", async () => {
    const client = new AbortController();
    let fetched = false;
    const input = {
      config: { routing: parseEdgeConfig({ KVEDGE_ACCESS: "public" }).routing, workerAuth: { required: true, keySecret: "", keys: new Map(), access: null } },
      fetch: () => ((fetched = true), Promise.reject(new Error("not called"))),
      decision: { workerId: "w1", url: "http://127.0.0.1:9" } as unknown as RouteDecision,
      body: new Blob(["{}"]),
      clientSignal: client.signal,
      traceparent: "00-00000000000000000000000000000001-0000000000000001-01",
      releaseBeforeReply: false,
    } as unknown as ProxyInput;
    await expect(proxyOnce(input)).rejects.toThrow(RangeError);
    expect(fetched).toBe(false);
    expect(getEventListeners(client.signal, "abort")).toHaveLength(0);
  });
});
