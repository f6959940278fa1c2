/**
 * Data-parallel ranks of one simulated worker (`--dp-size N`, with or without
 * `--enable-dp-attention`): one scheduler per rank, each with its own radix cache, KV pool and
 * event publisher, as SGLang runs them. Requests are dispatched as SGLang's DataParallelController
 * does (sgl-project/sglang @9d147fd python/sglang/srt/managers/data_parallel_controller.py): a
 * request's `routed_dp_rank` first (L605-610), else the load-balance method; `--load-balance-method
 * auto` resolves to round_robin on a worker that is not a PD prefill (server_args.py L3086-3101),
 * which hands ranks out in turn. The serving rank goes back in meta_info.dp_rank.
 */
import type { RequestSnapshot, SimEngine, SubmitInput } from "./engine.ts";
import { KvEventPublisher, type KvPublisherOptions } from "./kv-publisher.ts";

/** What the HTTP front end needs of the worker's schedulers. */
export type SimScheduler = Pick<
  SimEngine,
  "cache" | "runningCount" | "waitingCount" | "idle" | "freeTokens" | "throughput" | "submit" | "abort" | "abortAll" | "flushCache"
>;

export class DpSimEngines implements SimScheduler {
  /** Rank r's scheduler at index r. */
  readonly ranks: readonly SimEngine[];
  /** Whether snapshots name their rank (a worker with one scheduler reports its configured rank itself). */
  readonly #reportRank: boolean;
  #nextRank = 0;

  constructor(ranks: readonly SimEngine[]) {
    if (ranks.length === 0) throw new RangeError("a worker has at least one DP rank");
    this.ranks = ranks;
    this.#reportRank = ranks.length > 1;
  }

  get dpSize(): number {
    return this.ranks.length;
  }

  /** Rank 0's cache (the single cache of a one-rank worker). */
  get cache(): SimEngine["cache"] {
    return this.ranks[0]!.cache;
  }

  get runningCount(): number {
    return this.ranks.reduce((n, e) => n + e.runningCount, 0);
  }

  get waitingCount(): number {
    return this.ranks.reduce((n, e) => n + e.waitingCount, 0);
  }

  get idle(): boolean {
    return this.ranks.every((e) => e.idle);
  }

  get freeTokens(): number {
    return this.ranks.reduce((n, e) => n + e.freeTokens, 0);
  }

  get throughput(): number {
    return this.ranks.reduce((n, e) => n + e.throughput, 0);
  }

  /** The rank a request goes to: its routed rank (checked in range by the caller), else the next in turn. */
  rankFor(routed: number | null | undefined): number {
    if (routed !== null && routed !== undefined) return routed;
    const rank = this.#nextRank;
    this.#nextRank = (rank + 1) % this.ranks.length;
    return rank;
  }

  submit(input: SubmitInput): Promise<RequestSnapshot> {
    const rank = this.rankFor(input.routedDpRank);
    if (!this.#reportRank) return this.ranks[rank]!.submit(input);
    const onFrame = input.onFrame;
    const ranked = { ...input, ...(onFrame ? { onFrame: (s: RequestSnapshot) => onFrame({ ...s, dpRank: rank }) } : {}) };
    return this.ranks[rank]!.submit(ranked).then((s) => ({ ...s, dpRank: rank }));
  }

  abort(rid: string, all: boolean): number {
    return this.ranks.reduce((n, e) => n + e.abort(rid, all), 0);
  }

  abortAll(): void {
    for (const e of this.ranks) e.abortAll();
  }

  /** flush_cache on every rank; only when all are idle, as SGLang's. */
  flushCache(): boolean {
    if (!this.idle) return false;
    return this.ranks.every((e) => e.flushCache());
  }
}

/**
 * One KV event publisher per rank, rank r on kvPort + r and replayPort + r as SGLang binds them
 * (kv_events.py `ZmqEventPublisher.__init__`, `offset_endpoint_port`), each stamping its rank into
 * its batches (`attn_dp_rank`). With ephemeral base ports the ranges are retried until both fit.
 */
export async function startRankPublishers(base: Omit<KvPublisherOptions, "dpRank">, firstRank: number, dpSize: number): Promise<KvEventPublisher[]> {
  if (dpSize === 1) return [await KvEventPublisher.start({ ...base, dpRank: firstRank })];
  const ephemeral = base.port === 0 || base.replayPort === 0;
  for (let attempt = 0; ; attempt++) {
    const pubs: KvEventPublisher[] = [];
    try {
      const first = await KvEventPublisher.start({ ...base, dpRank: 0 });
      pubs.push(first);
      for (let rank = 1; rank < dpSize; rank++) pubs.push(await KvEventPublisher.start({ ...base, port: first.port + rank, replayPort: first.replayPort + rank, dpRank: rank }));
      return pubs;
    } catch (err) {
      for (const p of pubs) p.kill();
      if (!ephemeral || attempt >= 20) throw err;
    }
  }
}
