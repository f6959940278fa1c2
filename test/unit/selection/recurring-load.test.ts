/**
 * Recurring load (src/selection/recurring-load.ts): the sum of continuation turns' uncached tokens,
 * decayed over tau, and its cost; through a real RoutingCore, a worker whose conversations keep
 * coming back stops winning new conversations on a shared system prompt alone, while one-off
 * prompts (a cold document, a first turn) leave no trace.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { DEFAULT_RECURRING_LOAD, RecurringLoad } from "../../../src/selection/recurring-load.ts";

beforeAll(() => initHashing());

const B = 16;
const text = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
/** A system prompt of 4 blocks that every conversation starts with. */
const SYSTEM = text(1, 4 * B);

function pool(now: () => number) {
  const core = new RoutingCore({ blockSize: B, random: () => 0, now });
  for (const id of ["a", "b"]) {
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: B, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
    core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
  }
  // Only a holds the system prompt.
  const blocks = localBlockHashes(SYSTEM, B).map((l, i) => ({ h: String(1000 + i), p: i === 0 ? null : String(999 + i), l: localHashToHex(l) }));
  core.applyDump("a", { type: "dump", epoch: 1, seq: 1, blocks });
  return core;
}

/** Routes and settles at once (nothing stays in flight), returning the chosen worker. */
function serve(core: RoutingCore, tokens: number[]): string {
  const d = core.route({ localHashes: localBlockHashes(tokens, B), isl: tokens.length })!;
  core.settle({ receiptId: d.receiptId, promptTokens: tokens.length, cachedTokens: d.overlapBlocks * B, outcome: "ok" });
  return d.workerId;
}

describe("RecurringLoad", () => {
  it("counts only continuations, their uncached tokens, decayed by e per tau", () => {
    const r = new RecurringLoad(DEFAULT_RECURRING_LOAD);
    r.record(0, 10_000, 4_000, 0); // a first turn / one-off prompt: under half cached
    expect(r.tokens(0, 0)).toBe(0);
    r.record(0, 10_000, 6_000, 0);
    expect(r.tokens(0, 0)).toBe(4_000);
    expect(r.tokens(0, DEFAULT_RECURRING_LOAD.tauMs)).toBeCloseTo(4_000 / Math.E, 6);
    expect(r.tokens(1, 0)).toBe(0);
    // 4 000 tokens at 10 000 tokens/s: 400 ms of prefill within tau (10 s) = 4 % of the worker's time → 4 % of the 1 s horizon.
    expect(r.costMs(0, 0, 10_000)).toBeCloseTo(40, 6);
    expect(new RecurringLoad({ ...DEFAULT_RECURRING_LOAD, horizonMs: 0 }).costMs(0, 0, 10_000)).toBe(0);
  });

  it("a worker busy with returning conversations loses a new one that only shares its system prompt", () => {
    let t = 0;
    const core = pool(() => t);
    // A conversation on a: each turn appends 2 000 tokens to the history it keeps there.
    let history = [...SYSTEM, ...text(10_000, 2_000)];
    expect(serve(core, history)).toBe("a");
    for (let turn = 1; turn <= 4; turn++) {
      t += 2_000;
      history = [...history, ...text(10_000 + turn * 2_000, 2_000)];
      expect(serve(core, history)).toBe("a");
    }
    // Nothing is in flight: the in-flight load sees a and b alike, and a holds the system prompt.
    t += 1_000;
    const fresh = [...SYSTEM, ...text(50_000, 500)];
    const preview = core.peek({ localHashes: localBlockHashes(fresh, B), isl: fresh.length });
    expect(preview.candidates.map((c) => [c.workerId, c.activePrefillTokens])).toEqual([["a", 0], ["b", 0]]);
    expect(preview.workerId).toBe("b");
    // The conversation itself stays where its history is.
    history = [...history, ...text(90_000, 2_000)];
    expect(serve(core, history)).toBe("a");
  });

  it("one-off prompts leave no recurring load: the next question on a cold document goes to its holder", () => {
    let t = 0;
    const core = pool(() => t);
    const doc = [...SYSTEM, ...text(20_000, 8_000)];
    expect(serve(core, [...doc, ...text(60_000, 40)])).toBe("a");
    t += 2_000;
    expect(serve(core, [...doc, ...text(61_000, 40)])).toBe("a");
  });

  it("the term fades: long after its conversations went quiet, the system prompt's holder wins again", () => {
    let t = 0;
    const core = pool(() => t);
    let history = [...SYSTEM, ...text(10_000, 2_000)];
    serve(core, history);
    for (let turn = 1; turn <= 4; turn++) {
      t += 2_000;
      history = [...history, ...text(10_000 + turn * 2_000, 2_000)];
      serve(core, history);
    }
    t += 10 * DEFAULT_RECURRING_LOAD.tauMs;
    const fresh = [...SYSTEM, ...text(50_000, 500)];
    expect(core.peek({ localHashes: localBlockHashes(fresh, B), isl: fresh.length }).workerId).toBe("a");
  });
});
