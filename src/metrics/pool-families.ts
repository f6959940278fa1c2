/**
 * Maps pool snapshots onto Prometheus families. Naming: `kvedge_` prefix, base units (seconds,
 * tokens, blocks), `_total` for counters; labels `model`, `worker`, `reason`, `outcome`, `mode`,
 * `state`. Each configured model contributes its samples to the same families.
 */
import { ExpositionBuilder, type FamilyWriter, type Labels } from "./exposition.ts";
import { COHORT_STATES, type PoolMetricsSnapshot } from "./pool-snapshot.ts";
import { REFUSAL_REASONS, type AdmissionSnapshot } from "./admission-snapshot.ts";

export interface PoolScrape {
  model: string;
  /** null when the pool's index did not answer (kvedge_pool_up 0). */
  snapshot: PoolMetricsSnapshot | null;
}

const WORKER_STATES = ["up", "down", "draining"] as const;

/** The answering isolate's sampled exactness checks and mismatches, by kind (src/edge/exactness.ts). */
export type IsolateChecks = Readonly<Record<string, { checks: number; mismatches: number }>>;

export function renderMetrics(pools: readonly PoolScrape[], checks: IsolateChecks | null = null): string {
  const b = new ExpositionBuilder();
  const poolUp = b.gauge("kvedge_pool_up", "1 if the pool's routing index answered this scrape.");
  for (const p of pools) poolUp.set({ model: p.model }, p.snapshot ? 1 : 0);
  for (const p of pools) if (p.snapshot) writePool(b, p.model, p.snapshot);
  if (checks) writeIsolateChecks(b, checks);
  return b.render();
}

/**
 * Per isolate (no `model` label): counts since the isolate that answered the scrape started. Gauges,
 * not counters: successive scrapes may read different isolates, so rate() and increase() over them
 * are meaningless; max_over_time() is not.
 */
function writeIsolateChecks(b: ExpositionBuilder, checks: IsolateChecks): void {
  const made = b.gauge("kvedge_edge_exactness_checks", "Sampled checks of an incremental stage against the full path, by kind, since the isolate that answered this scrape started (per isolate: not for rate()).");
  const found = b.gauge("kvedge_edge_exactness_mismatches", "Sampled checks that found the incremental result different (the full result was used and the cache entries dropped), by kind, since the isolate that answered this scrape started (per isolate: not for rate()).");
  for (const [kind, c] of Object.entries(checks)) {
    made.set({ kind }, c.checks);
    found.set({ kind }, c.mismatches);
  }
}

function writePool(b: ExpositionBuilder, model: string, s: PoolMetricsSnapshot): void {
  const r = s.recorder;
  const m = { model };

  // Requests and routing decisions.
  writeByKey(b.counter("kvedge_requests_total", "Routed chat requests by final outcome (ok, error, cancelled by the client, no_worker). Requests rejected before routing are not counted."), model, "outcome", r.requests);
  const decisions = b.counter("kvedge_routing_decisions_total", "Routing decisions by chosen worker and mode (exact token sequence or text-prefix fallback).");
  for (const [worker, byMode] of Object.entries(r.decisions))
    for (const [mode, n] of Object.entries(byMode)) decisions.set({ model, worker, mode }, n);
  writeByKey(b.counter("kvedge_routing_fallbacks_total", "Requests routed on a text prefix instead of the exact sequence, by reason."), model, "reason", r.fallbacks);
  b.counter("kvedge_routing_retries_total", "Routing decisions made after a worker failed before answering.").set(m, r.retries);
  b.histogram("kvedge_routing_overlap_blocks", "Leading prompt blocks the chosen worker already held, per decision.").histogram(m, r.overlapBlocks);
  b.histogram("kvedge_routing_request_blocks", "Full blocks in the routed prompt, per decision.").histogram(m, r.requestBlocks);
  b.histogram("kvedge_routing_overlap_ratio", "Overlap blocks / request blocks, per decision with at least one block.").histogram(m, r.overlapRatio);
  // Hit rate per tier: this counter's rate over kvedge_routing_request_blocks_sum's.
  writeByKey(b.counter("kvedge_routing_matched_blocks_total", "Overlap blocks of routing decisions by the tier they were credited in: gpu, host (HiCache host memory) or storage (a shared storage backend, approximate)."), model, "tier", r.tierBlocks);
  if (s.tierLoadBack) writeTierLoadBack(b, model, s.tierLoadBack);
  b.histogram("kvedge_edge_overhead_seconds", "Edge time from request arrival to the upstream call (validation, prompt, tokenizer, hashing, index round trip).").histogram(m, r.edgeOverheadSeconds);

  // Receipts: predicted vs actual cached tokens.
  const receipts = b.counter("kvedge_receipts_total", "Settled routing receipts by worker and outcome.");
  const byWorker = Object.entries(r.receipts).map(([worker, t]) => ({ labels: { model, worker }, row: t }));
  for (const { labels, row: t } of byWorker) {
    receipts.set({ ...labels, outcome: "ok" }, t.ok).set({ ...labels, outcome: "error" }, t.error).set({ ...labels, outcome: "cancelled" }, t.cancelled ?? 0);
  }
  writeColumns(b, "counter", byWorker, [
    ["kvedge_receipts_unreported_total", "Successful receipts without a cached-token report (worker lacks --enable-cache-report).", (t) => t.unreported],
    ["kvedge_receipt_prompt_tokens_total", "Prompt tokens of receipts with a cached-token report.", (t) => t.promptTokens],
    ["kvedge_receipt_predicted_cached_tokens_total", "Cached tokens the index predicted (overlap blocks × block size, capped at the prompt).", (t) => t.predictedCachedTokens],
    ["kvedge_receipt_actual_cached_tokens_total", "Cached tokens the worker reported.", (t) => t.actualCachedTokens],
  ]);
  const drift = b.gauge("kvedge_worker_drift_ratio", "EWMA of (predicted − actual cached) / predicted; > 0 means the index over-predicts.");
  const drifting = b.gauge("kvedge_worker_drifting", "1 while the worker's receipts show sustained drift.");
  for (const d of s.drift) {
    drift.set({ model, worker: d.workerId }, d.driftEwma);
    drifting.set({ model, worker: d.workerId }, d.drifting ? 1 : 0);
  }

  // Workers.
  const byState = b.gauge("kvedge_workers", "Registered workers by state.");
  for (const st of WORKER_STATES) byState.set({ model, state: st }, s.workers.filter((w) => w.status === st).length);
  const workers = s.workers.map((w) => ({ labels: { model, worker: w.workerId }, row: w }));
  writeColumns(b, "gauge", workers, [
    ["kvedge_worker_up", "1 if the worker is up.", (w) => (w.status === "up" ? 1 : 0)],
    ["kvedge_worker_synced", "1 if the worker's relay has delivered a full dump this index life.", (w) => (w.synced ? 1 : 0)],
    ["kvedge_worker_approximate", "1 while the index's blocks for the worker may be wrong (relay lost history, or an index object full); routed in approximate mode.", (w) => (w.approximate ? 1 : 0)],
    ["kvedge_worker_quarantined", "1 while routing avoids the worker because an edge could not connect to it (RoutingCore.quarantine).", (w) => (w.quarantined ? 1 : 0)],
    ["kvedge_worker_blocks", "Blocks the index holds for the worker.", (w) => w.blocks],
    ["kvedge_worker_active_requests", "Requests routed to the worker and not yet settled.", (w) => w.activeRequests],
    ["kvedge_worker_active_prefill_tokens", "Uncached prompt tokens of the worker's requests still in prefill.", (w) => w.activePrefillTokens],
    ["kvedge_worker_active_decode_blocks", "Blocks of the worker's running requests.", (w) => w.activeDecodeBlocks],
    ["kvedge_worker_last_seen_timestamp_seconds", "Last message from the worker's relay, Unix time.", (w) => w.lastSeen / 1000],
  ]);
  const info = b.gauge("kvedge_worker_info", "Worker metadata; value is always 1.");
  for (const { labels, row: w } of workers) info.set({ ...labels, contract_digest: w.contractDigest ?? "", kv_events: String(w.kvEvents) }, 1);

  // Cohort contract.
  const cohort = s.cohort;
  b.gauge("kvedge_cohort_exact_media", "1 if every up worker publishes the same valid processor contract (exact media routing allowed).").set(m, cohort.exactMedia ? 1 : 0);
  b.gauge("kvedge_cohort_contract_digests", "Distinct contract digests among up workers.").set(m, cohort.digests);
  const cs = b.gauge("kvedge_cohort_state", "Cohort contract state (one-hot).");
  for (const st of COHORT_STATES) cs.set({ model, state: st }, cohort.state === st ? 1 : 0);

  // Index.
  const c = s.counters;
  b.gauge("kvedge_pool_block_size_tokens", "The pool's KV block size (= SGLang page size).").set(m, s.blockSize ?? 0);
  b.gauge("kvedge_index_blocks", "(worker, block) entries in the index.").set(m, s.indexedBlocks);
  b.gauge("kvedge_index_block_budget", "Most (worker, block) entries the index objects may hold (summed over shards); beyond it blocks are refused (drop reason block_budget).").set(m, s.blockBudget);
  b.gauge("kvedge_index_active_requests", "Requests with load held in the index.").set(m, s.activeRequests);
  b.counter("kvedge_index_events_applied_total", "KV events applied to the index.").set(m, c.eventsApplied);
  writeByKey(b.counter("kvedge_index_events_dropped_total", "KV events or relay messages dropped, by reason."), model, "reason", c.dropReasons);
  b.counter("kvedge_index_gaps_total", "Event batches whose parent block was unknown (a gap in the stream); each triggers a resync.").set(m, c.dropReasons["parent_not_found"] ?? 0);
  b.counter("kvedge_index_blocks_stored_total", "Blocks added to the index (events and dumps).").set(m, c.blocksStored);
  b.counter("kvedge_index_blocks_removed_total", "Blocks removed from the index by events.").set(m, c.blocksRemoved);
  b.counter("kvedge_index_dumps_total", "Full block-set dumps applied (relay connects and resyncs).").set(m, c.dumps);
  b.counter("kvedge_index_load_expired_total", "Routed requests whose load expired because the edge never settled them.").set(m, c.expired);
  b.counter("kvedge_index_receipts_rejected_total", "Receipt entries (settlements, prefill-done marks) skipped: not matching their wire schema, or past the most one call carries.").set(m, c.receiptsRejected);
  b.counter("kvedge_index_approx_resets_total", "Times the approximate index forgot every assumed block after an internal error (a bug; routing goes on with approximate overlaps of 0 until routes refill them).").set(m, c.approxResets);

  if (s.admission) writeAdmission(b, model, s.admission);
}

/** A sample per key of `counts`, the key in label `label`. */
function writeByKey(family: FamilyWriter, model: string, label: string, counts: Readonly<Record<string, number>>): void {
  for (const [key, n] of Object.entries(counts)) family.set({ model, [label]: key }, n);
}

/** Families of one sample per row, each column's family in turn: a family's samples in row order. */
function writeColumns<T>(b: ExpositionBuilder, type: "gauge" | "counter", rows: readonly { labels: Labels; row: T }[], columns: readonly (readonly [name: string, help: string, value: (row: T) => number])[]): void {
  for (const [name, help, value] of columns) {
    const family = b[type](name, help);
    for (const { labels, row } of rows) family.set(labels, value(row));
  }
}

/** Load-back calibration (src/selection/tier-calibration.ts): the bandwidth the TTFT cost uses per tier, and how far its predictions are from receipts. */
function writeTierLoadBack(b: ExpositionBuilder, model: string, t: NonNullable<PoolMetricsSnapshot["tierLoadBack"]>): void {
  const bw = b.gauge("kvedge_tier_loadback_bytes_per_second", "Load-back bandwidth of a lower tier (host, storage) to the GPU: configured, and in_use by the TTFT cost (the receipts' estimate once it has enough samples).");
  const ratio = b.gauge("kvedge_tier_loadback_estimate_ratio", "EWMA of measured / predicted load-back time over settled receipts, by tier; 1 is exact, > 1 the cost underestimates load-back.");
  const samples = b.counter("kvedge_tier_loadback_samples_total", "Receipts that calibrated a tier's load-back (accepted) or were refused as bad or outlying samples (rejected).");
  for (const tier of ["host", "storage"] as const) {
    const v = t[tier];
    bw.set({ model, tier, source: "configured" }, v.configuredGbps * 1e9).set({ model, tier, source: "in_use" }, v.gbps * 1e9);
    if (v.measuredOverPredicted !== null) ratio.set({ model, tier }, v.measuredOverPredicted);
    samples.set({ model, tier, result: "accepted" }, v.accepted).set({ model, tier, result: "rejected" }, v.rejected);
  }
}

/**
 * Admission (src/admission/), named for autoscalers: scale on kvedge_admission_queue_depth (KEDA's
 * Prometheus scaler, or an HPA external metric) and on the wait it causes.
 */
function writeAdmission(b: ExpositionBuilder, model: string, a: AdmissionSnapshot): void {
  const depth = b.gauge("kvedge_admission_queue_depth", "Requests waiting in the pool's admission queue now, by band.");
  const admitted = b.counter("kvedge_admission_admitted_total", "Requests admitted, by band and whether they waited (queued) or not (immediate).");
  const refused = b.counter("kvedge_admission_refused_total", "Requests refused with 429, by band and reason (queue_full, deadline, evicted).");
  const left = b.counter("kvedge_admission_left_total", "Clients that left the queue before admission, by band.");
  const enqueued = b.counter("kvedge_admission_enqueued_total", "Requests that entered the queue, by band.");
  const wait = b.histogram("kvedge_admission_wait_seconds", "Time waited in the queue by requests admitted after waiting, by band.");
  for (const x of a.bands) {
    const l = { model, band: x.band };
    depth.set(l, x.queued);
    admitted.set({ ...l, wait: "immediate" }, x.admittedImmediately).set({ ...l, wait: "queued" }, x.admittedAfterWait);
    for (const reason of REFUSAL_REASONS) refused.set({ ...l, reason }, x.refused[reason]);
    left.set(l, x.left);
    enqueued.set(l, x.enqueued);
    wait.histogram(l, x.waitSeconds);
  }
  writeByKey(b.gauge("kvedge_admission_tenant_queue_depth", "Requests waiting now per tenant (a digest of the API key or client network), for the tenants with most waiting."), model, "tenant", a.queuedByTenant);
}
