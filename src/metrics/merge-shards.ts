/**
 * Merges the metrics snapshots of a pool whose routing index is split across shard Durable
 * Objects into the one snapshot operators see. Index 0 is shard 0 (the pool object).
 *
 * Rules:
 * - One snapshot is returned unchanged; none is a programming error (throws).
 * - Every shard has the registry (relays say hello to each) and a replica of the pool's load, so
 *   worker identity, status, contract, epoch and load fields, the pool's `activeRequests`,
 *   `blockSize` and `cohort` come from shard 0. Per worker, `blocks` is summed (shards hold
 *   disjoint parts), `synced` only if every shard knows the worker and says so (a shard its relay
 *   has not reached cannot route to its cache), `lastSeen` is the max. Workers shard 0 does not
 *   know are appended with the first knowing shard's fields. `mergeShardWorkers` is this rule,
 *   shared with `/admin/workers`.
 * - `indexedBlocks` and `counters` (each numeric field, `dropReasons` per key) are summed.
 * - `drift`: per worker the entry with the largest driftEwma; drifting if any shard says so.
 * - `recentReceipts` and `recorder.recentDecisions`: merged newest first (by `at`), capped at
 *   what one index keeps (`RECENT_KEPT`), so sparse shards lose nothing one index would show.
 * - recorder: requests, fallbacks, decisions, receipts (field-wise) and retries summed;
 *   histograms summed bucket-wise (differing bounds throw); series points with the same `t`
 *   summed, ascending, capped at one series' capacity (`SERIES_CAPACITY`, newest kept).
 * - `at` is the max.
 * Inputs are never mutated.
 */
import type { HistogramSnapshot } from "./histogram.ts";
import { MAX_TENANTS_SHOWN, type AdmissionSnapshot, type RefusalReason } from "./admission-snapshot.ts";
import { RECENT_KEPT, type DecisionRecord, type RecorderSnapshot, type RoutingMode, type WorkerReceiptTotals } from "./pool-recorder.ts";
import type { DriftView, IndexCounters, PoolMetricsSnapshot, ReceiptView, WorkerView } from "./pool-snapshot.ts";
import { SERIES_CAPACITY, type SeriesPoint } from "./time-series.ts";

// Records typed over every numeric field: adding a field to the source type fails the typecheck
// here instead of silently dropping it from the merge.
const COUNTER_FIELDS: Record<Exclude<keyof IndexCounters, "dropReasons">, true> = {
  eventsApplied: true,
  blocksStored: true,
  blocksRemoved: true,
  eventsDropped: true,
  dumps: true,
  routed: true,
  settled: true,
  expired: true,
  receiptsRejected: true,
  approxResets: true,
};
const RECEIPT_FIELDS: Record<keyof WorkerReceiptTotals, true> = {
  ok: true,
  error: true,
  cancelled: true,
  unreported: true,
  promptTokens: true,
  predictedCachedTokens: true,
  actualCachedTokens: true,
};
const SERIES_FIELDS: Record<Exclude<keyof SeriesPoint, "t">, true> = {
  requests: true,
  errors: true,
  promptTokens: true,
  predictedCachedTokens: true,
  actualCachedTokens: true,
};

export function mergeShardSnapshots(snapshots: readonly PoolMetricsSnapshot[]): PoolMetricsSnapshot {
  const first = snapshots[0];
  if (!first) throw new Error("mergeShardSnapshots needs at least one snapshot");
  if (snapshots.length === 1) return first;
  return {
    at: Math.max(...snapshots.map((s) => s.at)),
    blockSize: first.blockSize,
    indexedBlocks: sum(snapshots.map((s) => s.indexedBlocks)),
    blockBudget: sum(snapshots.map((s) => s.blockBudget)),
    activeRequests: first.activeRequests,
    counters: mergeCounters(snapshots.map((s) => s.counters)),
    workers: mergeWorkers(snapshots.map((s) => s.workers)),
    drift: mergeDrift(snapshots.map((s) => s.drift)),
    cohort: { ...first.cohort },
    recentReceipts: newestFirst<ReceiptView>(snapshots.map((s) => s.recentReceipts)),
    recorder: mergeRecorders(snapshots.map((s) => s.recorder)),
    ...mergeAdmission(snapshots.flatMap((s) => (s.admission ? [s.admission] : []))),
    ...mergeTierLoadBack(snapshots),
  };
}

/** Each shard calibrates from its own receipts: per tier, the shard with the most accepted samples speaks. */
function mergeTierLoadBack(snapshots: readonly PoolMetricsSnapshot[]): Pick<PoolMetricsSnapshot, "tierLoadBack"> {
  const all = snapshots.flatMap((s) => (s.tierLoadBack ? [s.tierLoadBack] : []));
  if (all.length === 0) return {};
  const best = (tier: "host" | "storage") => all.reduce((a, b) => (b[tier].accepted > a[tier].accepted ? b : a))[tier];
  return { tierLoadBack: { host: best("host"), storage: best("storage") } };
}

/** Each shard queues its own requests: depths and counters add up, band by band. */
function mergeAdmission(list: readonly AdmissionSnapshot[]): { admission?: AdmissionSnapshot } {
  const first = list[0];
  if (!first) return {};
  const bands = first.bands.map((b, k) => {
    const all = list.map((a) => a.bands[k]!);
    return {
      band: b.band,
      queued: sum(all.map((x) => x.queued)),
      admittedImmediately: sum(all.map((x) => x.admittedImmediately)),
      admittedAfterWait: sum(all.map((x) => x.admittedAfterWait)),
      refused: sumRecords(all.map((x) => x.refused)) as Record<RefusalReason, number>,
      left: sum(all.map((x) => x.left)),
      enqueued: sum(all.map((x) => x.enqueued)),
      waitSeconds: mergeHistograms(`admission wait (${b.band})`, all.map((x) => x.waitSeconds)),
    };
  });
  const tenants = Object.entries(sumRecords(list.map((a) => a.queuedByTenant)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, MAX_TENANTS_SHOWN);
  return { admission: { bands, queuedByTenant: Object.fromEntries(tenants) } };
}

function sum(xs: readonly number[]): number {
  let t = 0;
  for (const x of xs) t += x;
  return t;
}

function sumRecords(records: readonly Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) for (const [k, v] of Object.entries(r)) out[k] = (out[k] ?? 0) + v;
  return out;
}

function sumFields<T extends object>(fields: Record<string, true>, items: readonly T[]): T {
  const out = { ...items[0]! } as Record<string, number>;
  for (const k of Object.keys(fields)) out[k] = sum(items.map((i) => (i as Record<string, number>)[k] ?? 0));
  return out as T;
}

function mergeCounters(list: readonly IndexCounters[]): IndexCounters {
  return { ...sumFields(COUNTER_FIELDS, list), dropReasons: sumRecords(list.map((c) => c.dropReasons)) };
}

/** Per-shard worker lists → one row per worker with its blocks per shard (rules in the header). */
export function mergeShardWorkers<T extends { workerId: string; blocks: number; synced: boolean; lastSeen: number; approximate?: boolean; approximateReasons?: string[]; quarantined?: boolean; cacheFull?: boolean }>(
  perShard: readonly (readonly T[])[],
): (T & { blocksPerShard: number[] })[] {
  // Insertion order: shard 0's workers first, then others in the order shards first report them.
  const merged = new Map<string, T & { blocksPerShard: number[] }>();
  const seenIn = new Map<string, number>();
  perShard.forEach((workers, k) => {
    for (const w of workers) {
      seenIn.set(w.workerId, (seenIn.get(w.workerId) ?? 0) + 1);
      const m = merged.get(w.workerId);
      if (!m) {
        const blocksPerShard = new Array<number>(perShard.length).fill(0);
        blocksPerShard[k] = w.blocks;
        merged.set(w.workerId, { ...w, blocksPerShard });
        continue;
      }
      m.blocks += w.blocks;
      m.blocksPerShard[k] = w.blocks;
      m.synced &&= w.synced;
      // Approximate on any shard: the worker's view as a whole may be wrong.
      if (w.approximate) m.approximate = true;
      if (w.quarantined) m.quarantined = true;
      // Each shard judges fullness from its own chains' removals: full on any shard is full.
      if (w.cacheFull) m.cacheFull = true;
      if (w.approximateReasons?.length) m.approximateReasons = [...new Set([...(m.approximateReasons ?? []), ...w.approximateReasons])];
      m.lastSeen = Math.max(m.lastSeen, w.lastSeen);
    }
  });
  for (const m of merged.values()) if (seenIn.get(m.workerId)! < perShard.length) m.synced = false;
  return [...merged.values()];
}

function mergeWorkers(perShard: readonly (readonly WorkerView[])[]): WorkerView[] {
  return mergeShardWorkers(perShard).map(({ blocksPerShard: _perShard, ...w }) => w);
}

function mergeDrift(perShard: readonly (readonly DriftView[])[]): DriftView[] {
  const merged = new Map<string, DriftView>();
  for (const list of perShard) {
    for (const d of list) {
      const m = merged.get(d.workerId);
      if (!m) merged.set(d.workerId, { ...d });
      else merged.set(d.workerId, { workerId: d.workerId, driftEwma: d.driftEwma > m.driftEwma ? d.driftEwma : m.driftEwma, drifting: m.drifting || d.drifting });
    }
  }
  return [...merged.values()];
}

/** Lists that are each newest first, merged newest first; ties keep shard order (sort is stable). */
function newestFirst<T extends { at: number }>(lists: readonly (readonly T[])[]): T[] {
  const cap = Math.max(RECENT_KEPT, ...lists.map((l) => l.length));
  const all = lists.flatMap((l) => l.map((x) => ({ ...x })));
  all.sort((a, b) => b.at - a.at);
  return all.slice(0, cap);
}

function mergeRecorders(list: readonly RecorderSnapshot[]): RecorderSnapshot {
  const decisions: Record<string, Record<RoutingMode, number>> = {};
  for (const r of list) {
    for (const [worker, byMode] of Object.entries(r.decisions)) {
      const m = (decisions[worker] ??= { exact: 0, text_prefix: 0 });
      m.exact += byMode.exact;
      m.text_prefix += byMode.text_prefix;
    }
  }
  const receipts: Record<string, WorkerReceiptTotals> = {};
  const workers = new Set(list.flatMap((r) => Object.keys(r.receipts)));
  for (const w of workers) {
    receipts[w] = sumFields(RECEIPT_FIELDS, list.map((r) => r.receipts[w]).filter((t): t is WorkerReceiptTotals => t !== undefined));
  }
  return {
    requests: sumRecords(list.map((r) => r.requests)),
    decisions,
    fallbacks: sumRecords(list.map((r) => r.fallbacks)),
    retries: sum(list.map((r) => r.retries)),
    overlapBlocks: mergeHistograms("overlapBlocks", list.map((r) => r.overlapBlocks)),
    requestBlocks: mergeHistograms("requestBlocks", list.map((r) => r.requestBlocks)),
    overlapRatio: mergeHistograms("overlapRatio", list.map((r) => r.overlapRatio)),
    tierBlocks: { gpu: sum(list.map((r) => r.tierBlocks.gpu)), host: sum(list.map((r) => r.tierBlocks.host)), storage: sum(list.map((r) => r.tierBlocks.storage)) },
    edgeOverheadSeconds: mergeHistograms("edgeOverheadSeconds", list.map((r) => r.edgeOverheadSeconds)),
    receipts,
    series: mergeSeries(list.map((r) => r.series)),
    recentDecisions: newestFirst<DecisionRecord>(list.map((r) => r.recentDecisions)),
  };
}

function mergeHistograms(name: string, list: readonly HistogramSnapshot[]): HistogramSnapshot {
  const bounds = list[0]!.bounds;
  const counts = new Array<number>(bounds.length).fill(0);
  for (const h of list) {
    // Shards run the same code, so different buckets mean a deploy or programming error.
    if (h.bounds.length !== bounds.length || h.bounds.some((b, i) => b !== bounds[i]) || h.counts.length !== bounds.length)
      throw new Error(`histogram ${name}: bucket bounds differ between shards`);
    for (let i = 0; i < counts.length; i++) counts[i]! += h.counts[i]!;
  }
  return { bounds: [...bounds], counts, sum: sum(list.map((h) => h.sum)), count: sum(list.map((h) => h.count)) };
}

function mergeSeries(list: readonly (readonly SeriesPoint[])[]): SeriesPoint[] {
  const cap = Math.max(SERIES_CAPACITY, ...list.map((s) => s.length));
  const byT = new Map<number, SeriesPoint[]>();
  for (const s of list) {
    for (const p of s) {
      const same = byT.get(p.t);
      if (same) same.push(p);
      else byT.set(p.t, [p]);
    }
  }
  const points = [...byT.values()].map((ps) => sumFields(SERIES_FIELDS, ps));
  points.sort((a, b) => a.t - b.t);
  return points.slice(Math.max(0, points.length - cap));
}
