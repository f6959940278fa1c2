/**
 * Index shares are per worker, not per DP-rank target (src/routing-index/block-shares.ts): one
 * relay key names one worker, and its `&rank=` sessions are not signed per rank, so a single key
 * claiming `dpSize` 1024 must not multiply its share of the object's block budget by 1024 and leave
 * the honest worker a sliver of it.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex, RelayHelloSchema, type RelayHello } from "../../../src/relay-wire/relay-protocol.ts";
import { relayConnectTarget } from "../../../src/routing-index/front-door.ts";

beforeAll(() => initHashing());

const BS = 4;

function chain(n: number, base: number, salt: number) {
  const toks = Array.from({ length: n * BS }, (_, i) => salt * 1_000_000 + i + 1);
  return localBlockHashes(toks, BS).map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
}

function sayHello(core: RoutingCore, extra: Partial<RelayHello> & { workerId: string }) {
  const msg = RelayHelloSchema.parse({ type: "hello", url: `http://${extra.workerId}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...extra });
  const target = relayConnectTarget(msg.workerId, (msg.dpSize ?? 1) > 1 ? String(msg.dpRank ?? 0) : null, msg.dpSize ?? 1);
  if (!target.ok) throw new Error(target.message);
  const r = core.hello(msg, target.targetId);
  expect(r.ok).toBe(true);
  return target.targetId;
}

const row = (core: RoutingCore, id: string) => core.workers().find((w) => w.workerId === id)!;

describe("one relay key's DP ranks share one worker's part of the index", () => {
  it("64 rank sessions of one key flooding leave the honest worker its half of the budget", () => {
    const core = new RoutingCore({ blockSize: BS, blockBudget: 6_400 });
    sayHello(core, { workerId: "honest", kvCapacityTokens: 40_000 }); // 10 000 blocks of KV
    const RANKS = 64;
    for (let r = 0; r < RANKS; r++) {
      const t = sayHello(core, { workerId: "flood", dpSize: RANKS, dpRank: r, kvCapacityTokens: 2 ** 34 });
      core.applyDump(t, { type: "dump", epoch: 1, seq: 0, blocks: chain(200, 100_000 + r * 1_000, 10 + r) });
    }
    // The honest worker's dump of 3 000 blocks (under half of the budget) is indexed whole.
    core.applyDump("honest", { type: "dump", epoch: 1, seq: 0, blocks: chain(3_000, 1, 1) });
    expect(row(core, "honest")).toMatchObject({ blocks: 3_000, approximate: false, synced: true });
  });
});
