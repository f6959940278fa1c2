/**
 * ShardFanout's own rules with stand-in sessions (no sockets): which sessions exist when, what a
 * welcome may change, and how the fan-out recovers when its router stops mirroring the block set
 * (which the relay never lets happen, so the socket tests cannot reach it).
 */
import { describe, expect, it } from "vitest";
import type { RelayEvent } from "../../../src/relay-wire/relay-protocol.ts";
import { shardOfHex } from "../../../src/relay-wire/chain-shards.ts";
import type { DumpBlock } from "../../../services/relay/worker-block-set.ts";
import type { IndexSessionStats, WelcomeInfo } from "../../../services/relay/index-session.ts";
import { ShardFanout, type ShardSession, type ShardSessionHooks } from "../../../services/relay/shard-fanout.ts";

interface Stub extends ShardSession {
  shard: number;
  hooks: ShardSessionHooks;
  calls: string[];
  pushed: RelayEvent[][];
}

function stub(shard: number, hooks: ShardSessionHooks): Stub {
  const s: Stub = {
    shard,
    hooks,
    calls: [],
    pushed: [],
    start: () => void s.calls.push("start"),
    close: async () => void s.calls.push("close"),
    pushEvents: (_e, _s, events) => void s.pushed.push(events),
    resync: (reason) => void s.calls.push(`resync:${reason}`),
    restart: () => void s.calls.push("restart"),
    sendStatus: (status, reason) => void s.calls.push(`status:${status}:${reason ?? ""}`),
    stats: () => ({ state: "streaming" }) as IndexSessionStats,
  };
  return s;
}

/** Local hashes whose roots fall in shards 0 and 1 of 2. */
const CANDIDATES = Array.from({ length: 64 }, (_, i) => (i + 1).toString(16).padStart(16, "0"));
const L0 = CANDIDATES.find((l) => shardOfHex(l, 2) === 0)!;
const L1 = CANDIDATES.find((l) => shardOfHex(l, 2) === 1)!;

function setup(blocks: DumpBlock[] = []) {
  const made: Stub[] = [];
  const logs: { level: string; msg: string; f: Record<string, unknown> | undefined }[] = [];
  const at = (level: string) => (msg: string, f?: Record<string, unknown>) => void logs.push({ level, msg, f });
  const state = { blocks };
  const fanout = new ShardFanout({
    newSession: (k, hooks) => {
      const s = stub(k, hooks);
      made.push(s);
      return s;
    },
    blocks: () => state.blocks,
    position: () => ({ epoch: 7, seq: 3 }),
    log: { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") },
  });
  const welcome = (s: Stub, w: Partial<WelcomeInfo>): void => s.hooks.onWelcome({ shards: w.shards, shard: w.shard });
  return { fanout, made, logs, state, welcome };
}

describe("ShardFanout", () => {
  it("starts with shard 0 alone and passes batches through unchanged while unsharded", () => {
    const { fanout, made, welcome } = setup([{ h: "1", p: null, l: L1 }]);
    fanout.start();
    expect(made.map((s) => s.shard)).toEqual([0]);
    expect(made[0]!.calls).toEqual(["start"]);
    welcome(made[0]!, {}); // an unsharded index says nothing
    expect(made).toHaveLength(1);
    const events: RelayEvent[] = [{ t: "stored", parent: "1", blocks: [{ h: "2", l: L0 }] }];
    fanout.pushEvents(7, 4, events);
    expect(made[0]!.pushed).toEqual([events]);
    expect(made[0]!.hooks.snapshot()).toEqual({ epoch: 7, seq: 3, blocks: [{ h: "1", p: null, l: L1 }] });
  });

  it("opens shards only on shard 0's welcome; ignores bad counts and closed sessions", () => {
    const { fanout, made, logs, welcome } = setup();
    fanout.start();
    for (const bad of [0, 2000, 1.5]) welcome(made[0]!, { shards: bad });
    expect(logs.filter((l) => l.msg === "bad_shard_count")).toHaveLength(3);
    expect(made).toHaveLength(1);

    welcome(made[0]!, { shards: 3, shard: 1 });
    expect(logs.find((l) => l.msg === "shard_mismatch")).toMatchObject({ level: "warn", f: { socket: 0, welcome: 1 } });
    expect(made.map((s) => [s.shard, s.calls[0]])).toEqual([[0, "start"], [1, "start"], [2, "start"]]);
    expect(fanout.stats().shards).toBe(3);

    welcome(made[0]!, { shards: 2 });
    expect(made[2]!.calls).toContain("close");
    expect(made[1]!.calls.at(-1)).toBe("resync:shards 3 → 2");
    // The closed shard 2 cannot re-shard anything, nor be counted.
    welcome(made[2]!, { shards: 9 });
    expect(logs.filter((l) => l.msg === "shard_count_disagrees")).toHaveLength(0);
    expect(fanout.stats().sessions).toHaveLength(2);
    // A live shard k ≥ 1 that disagrees is only logged.
    welcome(made[1]!, { shards: 4, shard: 1 });
    expect(logs.find((l) => l.msg === "shard_count_disagrees")).toMatchObject({ f: { shard: 1, says: 4, shard0: 2 } });
    expect(fanout.shardCount).toBe(2);
    expect(logs.filter((l) => l.msg === "shards_changed").map((l) => l.f)).toEqual([{ from: 1, to: 3 }, { from: 3, to: 2 }]);
  });

  it("announces a drain to every shard's session (the relay's SIGTERM)", () => {
    const { fanout, made, welcome } = setup();
    fanout.start();
    welcome(made[0]!, { shards: 3, shard: 0 });
    fanout.announce("draining", "relay received SIGTERM");
    expect(made.map((s) => s.calls.filter((c) => c.startsWith("status:")))).toEqual([0, 1, 2].map(() => ["status:draining:relay received SIGTERM"]));
  });

  it("does not start new shard sessions before start() or after close()", async () => {
    const { fanout, made, welcome } = setup();
    welcome(made[0]!, { shards: 2 });
    expect(made[1]!.calls).toEqual([]);
    fanout.start();
    expect(made[1]!.calls).toEqual(["start"]);
    await fanout.close();
    welcome(made[0]!, { shards: 4 });
    expect(made).toHaveLength(2);
  });

  it("splits batches by root shard and rebuilds + resyncs all when the router lost a parent", () => {
    const { fanout, made, logs, state, welcome } = setup([{ h: "1", p: null, l: L0 }]);
    fanout.start();
    welcome(made[0]!, { shards: 2 });
    fanout.pushEvents(7, 4, [
      { t: "stored", parent: "1", blocks: [{ h: "2", l: L1 }] },
      { t: "stored", parent: null, blocks: [{ h: "3", l: L1 }] },
    ]);
    expect(made[0]!.pushed).toEqual([[{ t: "stored", parent: "1", blocks: [{ h: "2", l: L1 }] }]]);
    expect(made[1]!.pushed).toEqual([[{ t: "stored", parent: null, blocks: [{ h: "3", l: L1 }] }]]);

    // A parent the router never placed (the block set would never emit this).
    state.blocks = [{ h: "1", p: null, l: L0 }, { h: "2", p: "1", l: L1 }];
    fanout.pushEvents(7, 5, [{ t: "stored", parent: "99", blocks: [{ h: "4", l: L0 }] }]);
    expect(logs.find((l) => l.msg === "shard_split_resync")).toMatchObject({ level: "warn" });
    for (const s of made) expect(s.calls.at(-1)).toBe("resync:shard router out of sync");
    expect(made[0]!.pushed).toHaveLength(1);
    // Rebuilt from the set: block 3 is gone, 1 and 2 sit in shard 0.
    expect(made[0]!.hooks.snapshot().blocks.map((b) => b.h)).toEqual(["1", "2"]);
    expect(made[1]!.hooks.snapshot().blocks).toEqual([]);
  });

  it("a dump from a router that drifted from the set is logged and cut from a rebuilt router", () => {
    const { made, logs, state, welcome } = setup([{ h: "1", p: null, l: L0 }]);
    welcome(made[0]!, { shards: 2 });
    state.blocks = [{ h: "1", p: null, l: L0 }, { h: "5", p: null, l: L1 }, { h: "6", p: "5", l: L0 }];
    expect(made[1]!.hooks.snapshot().blocks.map((b) => b.h)).toEqual(["5", "6"]);
    expect(logs.filter((l) => l.msg === "shard_router_out_of_sync")).toHaveLength(1);
    expect(made[0]!.hooks.snapshot().blocks.map((b) => b.h)).toEqual(["1"]);
    expect(logs.filter((l) => l.msg === "shard_router_out_of_sync")).toHaveLength(1);
  });
});
