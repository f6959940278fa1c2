/**
 * The cost bound of streaming logprobs from cumulative-frame workers (src/proxy/stream-cost.ts)
 * and the router's incremental-only selection it relies on.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { cumulativeLogprobBytes, MAX_CUMULATIVE_LOGPROB_BYTES, maxCumulativeLogprobTokens } from "../../../src/proxy/stream-cost.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

describe("cumulative logprob bytes", () => {
  it("grow with the square of the answer; the token bound is the largest answer within the byte bound", () => {
    expect(cumulativeLogprobBytes(1000, 20, 1)).toBe(((1000 * 1001) / 2) * 32 * 21);
    expect(cumulativeLogprobBytes(2000, 20, 1) / cumulativeLogprobBytes(1000, 20, 1)).toBeCloseTo(4, 2);
    expect(cumulativeLogprobBytes(1000, 20, 3)).toBe(3 * cumulativeLogprobBytes(1000, 20, 1));
    for (const [top, n] of [[0, 1], [20, 1], [5, 4]] as const) {
      const k = maxCumulativeLogprobTokens(top, n);
      expect(cumulativeLogprobBytes(k, top, n)).toBeLessThanOrEqual(MAX_CUMULATIVE_LOGPROB_BYTES);
      expect(cumulativeLogprobBytes(k + 1, top, n)).toBeGreaterThan(MAX_CUMULATIVE_LOGPROB_BYTES);
    }
    // A 1 000-token stream with top_logprobs 20 is past it (~336 MB of cumulative frames).
    expect(cumulativeLogprobBytes(1000, 20, 1)).toBeGreaterThan(MAX_CUMULATIVE_LOGPROB_BYTES);
  });
});

describe("incremental-only routing", () => {
  function hello(core: RoutingCore, id: string, incrementalStreaming: boolean) {
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: 16, epoch: 1, modelName: "m", contract: null, kvEvents: false, incrementalStreaming }, id);
  }
  it("picks only workers that stream increments, and none when there is none", () => {
    const core = new RoutingCore({ blockSize: 16 });
    hello(core, "cumulative", false);
    const req = { localHashes: [1n, 2n], isl: 32 };
    expect(core.route({ ...req, incrementalOnly: true })).toBeNull();
    expect(core.route(req)?.workerId).toBe("cumulative");
    hello(core, "incremental", true);
    for (let i = 0; i < 10; i++) expect(core.route({ ...req, incrementalOnly: true })?.workerId).toBe("incremental");
  });
});
