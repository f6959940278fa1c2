/**
 * proxyOnce opens the upstream exchange (its watchdog timer and its listener on the client's
 * signal) only once the worker's credentials are in hand: a credential look-up that throws (here
 * the derivation's refusal of an empty secret) leaves nothing behind on the client's signal, which
 * every retry of the request shares. A PD pair whose decode answers anything but a success stops its
 * prefill at once (pd-dispatch.ts: a decode that fails aborts the prefill), so the prefill's
 * bootstrap room is not held until its deadline.
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

describe("proxyOnce with a PD pair whose decode does not succeed", () => {
  const pdInput = (decodeStatus: number, stream: boolean, prefill: { aborted: boolean }) =>
    ({
      config: { routing: parseEdgeConfig({ KVEDGE_ACCESS: "public" }).routing, workerAuth: { required: false, keySecret: null, keys: new Map(), access: null } },
      fetch: (url: string, init: RequestInit) =>
        url.startsWith("http://prefill.test")
          ? new Promise<Response>((_, reject) =>
              init.signal!.addEventListener("abort", () => {
                prefill.aborted = true;
                reject(init.signal!.reason);
              }),
            )
          : Promise.resolve(new Response(`{"error":"no"}`, { status: decodeStatus })),
      decision: { workerId: "p1", url: "http://prefill.test", pd: { decodeWorkerId: "d1", decodeUrl: "http://decode.test", decodeIncrementalStreaming: false, bootstrapPort: 8998, prefillDpSize: 1 } } as unknown as RouteDecision,
      body: new Blob(['{"text":"hi","sampling_params":{"max_new_tokens":4}}']),
      answer: {
        stream,
        complete: (status: number) => {
          throw new Error(`mapped ${status}`);
        },
      },
      receipt: { settle: () => Promise.resolve() },
      clientSignal: null,
      traceparent: "00-00000000000000000000000000000001-0000000000000001-01",
      releaseBeforeReply: false,
    }) as unknown as ProxyInput;

  for (const [status, stream, error] of [
    [503, false, /overloaded/],
    [400, false, /mapped 400/],
    [503, true, /overloaded/],
    [400, true, /mapped 400/],
    [401, false, /credential/],
  ] as const) {
    it(`decode ${status}${stream ? ", streamed" : ""}: the prefill is aborted`, async () => {
      const prefill = { aborted: false };
      await expect(proxyOnce(pdInput(status, stream, prefill))).rejects.toThrow(error);
      expect(prefill.aborted).toBe(true);
    });
  }
});
