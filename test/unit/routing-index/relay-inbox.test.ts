/**
 * What the index decides about one relay frame (src/routing-index/relay-inbox.ts), on a real
 * RoutingCore: frame checks and their drop counts, the session check, hello fencing and the URL the
 * relay key is bound to. The Durable Object only carries these verdicts out.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { HELLO_REFUSED_CLOSE, relayFrame, type RelaySocketView } from "../../../src/routing-index/relay-inbox.ts";
import { normalizeWorkerUrl } from "../../../src/relay-wire/relay-auth.ts";
import { MAX_RELAY_MESSAGE_BYTES } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const PLACE = { shards: 2, shard: 1 };

function boundUrl(id: string): string {
  const n = normalizeWorkerUrl(`http://${id}.test:30000`, { allowHttp: true });
  if (!n.ok) throw new Error(n.reason);
  return n.url;
}

function socket(id: string, opts: { current?: boolean; liveSession?: boolean; dpSize?: number } = {}): RelaySocketView {
  return { workerId: id, boundUrl: boundUrl(id), grant: { dpSize: opts.dpSize ?? 1, storageGroup: null }, isCurrent: () => opts.current ?? true, hasLiveSession: () => opts.liveSession ?? false };
}

function hello(id: string, epoch: number, over: Record<string, unknown> = {}): string {
  return JSON.stringify({ type: "hello", workerId: id, url: `http://${id}.test:30000`, blockSize: 4, epoch, modelName: "m", contract: null, kvEvents: true, ...over });
}

const dump = (epoch: number) => JSON.stringify({ type: "dump", epoch, seq: 3, blocks: [{ h: "1", p: null, l: "00000000000000aa" }] });

describe("relay frames the index refuses", () => {
  it("counts a too large, malformed or invalid frame as bad_message and answers an error", () => {
    const core = new RoutingCore({ blockSize: 4 });
    const big = relayFrame(core, "x".repeat(MAX_RELAY_MESSAGE_BYTES + 1), socket("a"), PLACE);
    expect(big.replies).toEqual([{ type: "error", message: "message too large" }]);
    expect(relayFrame(core, "{not json", socket("a"), PLACE).replies).toEqual([{ type: "error", message: "malformed JSON" }]);
    const invalid = relayFrame(core, JSON.stringify({ type: "dump", epoch: -1 }), socket("a"), PLACE);
    expect(invalid.replies[0]).toMatchObject({ type: "error", message: expect.stringMatching(/^invalid message: /) });
    expect(core.metricsSnapshot().counters).toMatchObject({ eventsDropped: 3, dropReasons: { bad_message: 3 } });
  });

  it("drops a frame from a superseded session (counted apart) and has the socket refused, applying nothing", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(relayFrame(core, hello("a", 1), socket("a"), PLACE).startSession).toBe(true);
    const v = relayFrame(core, dump(1), socket("a", { current: false }), PLACE);
    expect(v).toMatchObject({ superseded: true, heardAt: null, replies: [{ type: "error", message: "superseded by a newer relay session" }] });
    expect(core.metricsSnapshot().counters).toMatchObject({ eventsDropped: 1, dropReasons: { superseded_session: 1 }, dumps: 0 });
  });
});

describe("relay hello", () => {
  it("welcomes an accepted hello under the key's URL, with the pool's block size and this shard's place", () => {
    const core = new RoutingCore({ blockSize: 4 });
    const v = relayFrame(core, hello("a", 7, { url: "http://A.test:30000/" }), socket("a"), PLACE);
    expect(v).toMatchObject({ startSession: true, close: null, replies: [{ type: "welcome", workerId: "a", epoch: 7, poolBlockSize: 4, shards: 2, shard: 1 }] });
    expect(v.persist).toEqual([expect.objectContaining({ workerId: "a", epoch: 7, url: boundUrl("a") })]);
  });

  it("closes a hello that announces another URL than the relay key's, registering nothing", () => {
    const core = new RoutingCore({ blockSize: 4 });
    const v = relayFrame(core, hello("a", 1, { url: "http://elsewhere.test:30000" }), socket("a"), PLACE);
    expect(v.close).toEqual({ code: HELLO_REFUSED_CLOSE, reason: "hello url not bound to relay key" });
    expect(v.startSession).toBe(false);
    expect(core.worker("a")).toBeUndefined();
  });

  it("closes a hello claiming more DP ranks than the relay key grants, registering nothing; up to the grant is welcome", () => {
    const core = new RoutingCore({ blockSize: 4 });
    const v = relayFrame(core, hello("a", 1, { dpSize: 8, dpRank: 0 }), { ...socket("a", { dpSize: 4 }), workerId: "a#0" }, PLACE);
    expect(v.close).toEqual({ code: HELLO_REFUSED_CLOSE, reason: "dp size 8 is more than the 4 rank(s) this relay key grants" });
    expect(v.replies).toEqual([{ type: "error", message: "worker a: dp size 8 is more than the 4 rank(s) this relay key grants: issue its key with the worker's dpSize" }]);
    expect(v.startSession).toBe(false);
    expect(core.workers()).toEqual([]);
    const ok = relayFrame(core, hello("a", 1, { dpSize: 4, dpRank: 0 }), { ...socket("a", { dpSize: 4 }), workerId: "a#0" }, PLACE);
    expect(ok.startSession).toBe(true);
  });

  it("a refused older life fences the registered one when no session of it is open, and names the epoch to climb past", () => {
    const core = new RoutingCore({ blockSize: 4 });
    relayFrame(core, hello("a", 10), socket("a"), PLACE);
    relayFrame(core, dump(10), socket("a"), PLACE);
    const v = relayFrame(core, hello("a", 9), socket("a", { liveSession: false }), PLACE);
    expect(v.replies).toEqual([{ type: "error", message: "stale epoch 9 < 10", indexEpoch: 10 }]);
    expect(v.persist).toEqual([expect.objectContaining({ workerId: "a", status: "down" })]);
    expect(v.warn).toMatchObject({ event: "worker_down", workerId: "a" });
    expect(v.close?.code).toBe(HELLO_REFUSED_CLOSE);
    expect(core.worker("a")?.status).toBe("down");
  });

  it("never fences past a live relay: the refusal names no epoch and the worker stays up", () => {
    const core = new RoutingCore({ blockSize: 4 });
    relayFrame(core, hello("a", 10), socket("a"), PLACE);
    const v = relayFrame(core, hello("a", 9), socket("a", { liveSession: true }), PLACE);
    expect(v.replies).toEqual([{ type: "error", message: "stale epoch 9 < 10" }]);
    expect(v.persist).toEqual([]);
    expect(core.worker("a")?.status).toBe("up");
  });

  it("a live session whose relay has been silent past the limit is a half-open socket: the life is fenced", () => {
    let now = 1_000_000;
    const core = new RoutingCore({ blockSize: 4, now: () => now, relaySilentMs: 90_000 });
    relayFrame(core, hello("a", 10), socket("a"), PLACE);
    now += 90_001;
    const v = relayFrame(core, hello("a", 9), socket("a", { liveSession: true }), PLACE);
    expect(v.replies[0]).toMatchObject({ indexEpoch: 10 });
    expect(core.worker("a")?.status).toBe("down");
  });
});

describe("frames of the current session", () => {
  it("a dump is acked and may end prefills (load changed); before a hello it asks for one", () => {
    const core = new RoutingCore({ blockSize: 4 });
    expect(relayFrame(core, dump(1), socket("a"), PLACE).replies).toEqual([{ type: "resync", reason: "say hello first" }]);
    relayFrame(core, hello("a", 1), socket("a"), PLACE);
    const v = relayFrame(core, dump(1), socket("a"), PLACE);
    expect(v).toMatchObject({ replies: [{ type: "ack", seq: 3 }], heardAt: expect.any(Number) });
  });

  it("a status of another epoch is ignored; of this one it is applied and persisted", () => {
    const core = new RoutingCore({ blockSize: 4 });
    relayFrame(core, hello("a", 2), socket("a"), PLACE);
    expect(relayFrame(core, JSON.stringify({ type: "status", epoch: 1, status: "draining" }), socket("a"), PLACE).persist).toEqual([]);
    expect(core.worker("a")?.status).toBe("up");
    const v = relayFrame(core, JSON.stringify({ type: "status", epoch: 2, status: "draining" }), socket("a"), PLACE);
    expect(v.persist).toEqual([expect.objectContaining({ status: "draining" })]);
    expect(relayFrame(core, JSON.stringify({ type: "ping", t: 5 }), socket("a"), PLACE).replies).toEqual([{ type: "pong", t: 5 }]);
  });
});
