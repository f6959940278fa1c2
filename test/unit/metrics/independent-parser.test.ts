/**
 * The Prometheus exposition checked by a parser we did not write (parse-prometheus-text-format),
 * so a bug shared by our writer and our strict test parser (test/helpers/prom-parser.ts) cannot hide:
 * every family, type, help text, label (escapes included) and value must read back the same.
 */
import { createRequire } from "node:module";
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { renderMetrics } from "../../../src/metrics/pool-families.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { parsePrometheusText } from "../../helpers/prom-parser.ts";

interface IndependentFamily {
  name: string;
  help: string;
  type: string;
  metrics: Array<{ value?: string; labels?: Record<string, string>; buckets?: Record<string, string>; count?: string; sum?: string }>;
}
const parseIndependently = createRequire(import.meta.url)("parse-prometheus-text-format") as (text: string) => IndependentFamily[];

beforeAll(async () => {
  await initHashing();
});

/** A pool whose worker ids need label escaping (quote, backslash, newline). */
function exposition(): string {
  const core = new RoutingCore({ blockSize: 4 });
  const ids = ['w"quoted"', "w\\back", "w\nline"];
  for (const id of ids)
    core.hello({ type: "hello", workerId: id, url: `http://w${ids.indexOf(id)}`, blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
  const hashes = localBlockHashes(Array.from({ length: 16 }, (_, i) => i + 1), 4);
  core.applyDump(ids[0]!, { type: "dump", epoch: 1, seq: 0, blocks: hashes.map((l, i) => ({ h: String(i + 1), p: i ? String(i) : null, l: localHashToHex(l) })) });
  for (const id of ids.slice(1)) core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
  for (let i = 0; i < 5; i++) {
    const d = core.route({ localHashes: hashes, isl: 18, fallbackReason: null })!;
    core.settle({ receiptId: d.receiptId, promptTokens: 18, cachedTokens: 16 - i, outcome: "ok", edgeOverheadMs: 1 + i * 7 });
  }
  core.setStatus(ids[2]!, "down");
  return renderMetrics([
    { model: "m", snapshot: core.metricsSnapshot() },
    { model: "cold", snapshot: null },
  ]);
}

describe("Prometheus exposition read by an independent parser", () => {
  it("agrees with our strict parser on every family, label and value", () => {
    const text = exposition();
    const ours = parsePrometheusText(text);
    const theirs = parseIndependently(text);
    expect(theirs.map((f) => f.name).sort()).toEqual([...ours.keys()].sort());
    let compared = 0;
    for (const fam of theirs) {
      const mine = ours.get(fam.name)!;
      expect(fam.type.toLowerCase(), fam.name).toBe(mine.type);
      expect(fam.help, fam.name).toBe(mine.help);
      if (fam.type === "HISTOGRAM") {
        // This parser flattens a histogram into one bucket map and drops the labels, _count and
        // _sum of labelled series, so only single-series histograms can be compared, bucket by bucket.
        const series = new Set(mine.samples.filter((s) => s.name.endsWith("_count")).map((s) => JSON.stringify(s.labels)));
        if (series.size !== 1) continue;
        const labels = JSON.parse([...series][0]!) as Record<string, string>;
        for (const m of fam.metrics) {
          for (const [le, v] of Object.entries(m.buckets ?? {})) {
            const own = mine.samples.find((s) => s.name === `${fam.name}_bucket` && sameLabels(s.labels, { ...labels, le }));
            expect(Number(v), `${fam.name} le=${le}`).toBe(own?.value);
            compared++;
          }
        }
        continue;
      }
      expect(fam.metrics.length, fam.name).toBe(mine.samples.length);
      for (const m of fam.metrics) {
        const own = mine.samples.find((s) => sameLabels(s.labels, m.labels ?? {}));
        expect(own, `${fam.name} ${JSON.stringify(m.labels)}`).toBeDefined();
        expect(Number(m.value)).toBe(own!.value);
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(50);
    // The escaped worker ids come back intact through the independent parser.
    const decisions = theirs.find((f) => f.name === "kvedge_worker_blocks")!;
    expect(decisions.metrics.map((m) => m.labels!.worker).sort()).toEqual(['w"quoted"', "w\nline", "w\\back"].sort());
  });
});

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => a[k] === b[k]);
}
