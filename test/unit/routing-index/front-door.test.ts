/**
 * The relay connect as it crosses from the edge to the shard's object (src/routing-index/front-door.ts):
 * what the edge sends is what the object reads, and a connect missing its worker or nonce is refused
 * with the status the edge maps (401: the token is refused).
 */
import { describe, expect, it } from "vitest";
import { readRelayConnect, relayConnectRequest, type RelayConnect } from "../../../src/routing-index/front-door.ts";

const CONNECT: RelayConnect = {
  workerId: "gpu-1",
  nonce: "n-0123456789abcdef",
  expiresAt: 1_900_000_000,
  keyId: "rk_abc",
  url: "http://gpu-1.test:30000",
  pool: "Qwen/Qwen2.5-VL-7B-Instruct",
  shard: 3,
  blockSize: 16,
  dpSize: 4,
  storageGroup: "rack-1",
};

describe("relay connect", () => {
  it("reads back every field the edge sends, as a WebSocket upgrade", () => {
    const req = relayConnectRequest(CONNECT);
    expect(req.headers.get("upgrade")).toBe("websocket");
    expect(readRelayConnect(req.headers)).toEqual({ ok: true, ...CONNECT });
  });

  it("refuses a request that is no upgrade (426), has no worker (400) or no usable nonce (401)", () => {
    const without = (name: string, value?: string): Headers => {
      const h = new Headers(relayConnectRequest(CONNECT).headers);
      if (value === undefined) h.delete(name);
      else h.set(name, value);
      return h;
    };
    expect(readRelayConnect(without("upgrade"))).toEqual({ ok: false, status: 426, message: "expected websocket" });
    expect(readRelayConnect(without("x-kvedge-worker"))).toEqual({ ok: false, status: 400, message: "missing worker" });
    expect(readRelayConnect(without("x-kvedge-relay-nonce"))).toEqual({ ok: false, status: 401, message: "relay token nonce missing" });
    expect(readRelayConnect(without("x-kvedge-relay-expires", "soon"))).toMatchObject({ ok: false, status: 401 });
  });

  it("leaves the pool, shard and block size as hints: absent, they are skipped, not refused", () => {
    const h = new Headers(relayConnectRequest(CONNECT).headers);
    for (const name of ["x-kvedge-pool", "x-kvedge-shard", "x-kvedge-block-size", "x-kvedge-relay-key-id", "x-kvedge-relay-url", "x-kvedge-relay-dp-size", "x-kvedge-relay-storage-group"]) h.delete(name);
    const r = readRelayConnect(h);
    // Block size 0: not a size, so the object adopts none. No grant read: one rank, no storage group.
    expect(r).toEqual({ ok: true, workerId: "gpu-1", nonce: CONNECT.nonce, expiresAt: CONNECT.expiresAt, pool: null, shard: 0, keyId: undefined, url: undefined, blockSize: 0, dpSize: 1, storageGroup: null });
  });

  it("reads a malformed grant as the least it can be", () => {
    const h = new Headers(relayConnectRequest({ ...CONNECT, storageGroup: null }).headers);
    expect(h.has("x-kvedge-relay-storage-group")).toBe(false);
    h.set("x-kvedge-relay-dp-size", "4096");
    h.set("x-kvedge-relay-storage-group", "a\tb");
    expect(readRelayConnect(h)).toMatchObject({ ok: true, dpSize: 1, storageGroup: null });
  });
});
