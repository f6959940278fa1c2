/**
 * The relay beside one SGLang worker: follows the worker's KV events (KvFeed), keeps its current
 * block set (WorkerBlockSet), and mirrors it to the pool's routing index (IndexSession). Watches
 * the worker's health: a dead worker's cache is gone (status down + empty dump); a new process is
 * a new epoch (hello again, fresh dump).
 *
 * History: with a state file (state-keeper.ts) a restarted relay resumes its saved view and replays
 * only the batches after it. Whenever history is really lost (the replay buffer no longer reaches
 * back) the relay keeps its view, which may now hold blocks the worker evicted meanwhile, and says
 * so: its dumps are marked `approximate` and the index shows and routes the worker as approximate
 * until the view is exact again (AllBlocksCleared, e.g. after `--on-history-lost flush`, or a new
 * worker life). The index is never told "synced" about a view that may be wrong.
 *
 * Without KV events (`kvEvents: "off"`, or `"auto"` on a worker whose /server_info has none) the
 * relay opens no ZMQ socket: hello says `kvEvents: false` (the index then assumes what it routes
 * there is cached, approximate mode), every dump is empty, and health, down/up and epochs work as
 * with events.
 *
 * A sharded index (shard 0's welcome says `shards: N`) gets one session per shard, each fed the
 * part of the set whose chain roots hash to it (ShardFanout, docs/scale.md §3).
 */
import type { ModelDirFiles } from "../../src/layout/index.ts";
import type { RelayHello } from "../../src/relay-wire/relay-protocol.ts";
import { TieredBlockSet } from "./tiered-block-set.ts";
import type { WorkerBlockSet } from "./worker-block-set.ts";
import { initHashing } from "../../src/util/hash.ts";
import { readModelDir, resolveContract, type ContractResolution } from "./contract.ts";
import { KvFeed, emptyFeedStats, type FeedBatch, type KvFeedStats } from "./kv-feed.ts";
import { createLogger, errorMessage, withFields, type Logger } from "./log.ts";
import { RelayOptionsSchema, type RelayOptions, type RelayOptionsInput } from "./options.ts";
import { IndexSession, relayUrl, type IndexSessionStats } from "./index-session.ts";
import { ShardFanout } from "./shard-fanout.ts";
import { StateKeeper, type Resume, type StateKeeperStats } from "./state-keeper.ts";
import { flushWorkerCache } from "./flush-cache.ts";
import { Serial } from "./serial.ts";
import {
  fetchServerInfo,
  nextEpoch,
  parseWorkerInfo,
  probeHealth,
  RelayStartupError,
  type WorkerInfo,
  type WorkerInfoOverrides,
} from "./worker-info.ts";

export const RELAY_VERSION = "0.1.0";

export type WorkerState = "up" | "down";

export interface RelayStats {
  workerId: string;
  model: string;
  /** Whether the relay follows the worker's KV events (false: approximate mode). */
  kvEvents: boolean;
  worker: WorkerState;
  epoch: number;
  blockSize: number;
  blocks: number;
  /** Blocks in the host-memory tier (HiCache CPU_PINNED). */
  hostBlocks: number;
  needsResync: boolean;
  lastSeq: number | null;
  batches: number;
  storedBlocks: number;
  removedBlocks: number;
  /** Drops by reason: decode problems (event-decode.ts) and block-set rules (worker-block-set.ts). */
  dropped: Record<string, number>;
  historyLost: number;
  /** Why the relay's view may hold blocks the worker no longer has (null: exact as far as known). */
  approximate: string | null;
  /** Cache flushes the relay asked of the worker (`--on-history-lost flush`). */
  flushes: number;
  /** The state file (null: none configured). */
  state: StateKeeperStats | null;
  workerDowns: number;
  newLives: number;
  feed: KvFeedStats;
  /** Shard 0's session (the only one while the index is unsharded). */
  session: IndexSessionStats;
  /** How many shards the index said it has (shard 0's welcome; 1 until then). */
  shards: number;
  /** Every shard's session, index = shard. */
  shardSessions: IndexSessionStats[];
}

export interface Relay {
  close(): Promise<void>;
  /** Tells the index the worker is draining (no new requests; running ones finish): the relay's SIGTERM. */
  drain(reason: string): void;
  stats(): RelayStats;
  /** The worker's current GPU block set (replaced when a new worker life changes the block size). */
  readonly blockSet: WorkerBlockSet;
  /** Its host-memory tier (SGLang HiCache CPU_PINNED; empty without HiCache). */
  readonly hostBlockSet: WorkerBlockSet;
  readonly info: WorkerInfo;
  /** What hello carries as `contract` (null: none published; see the `contract_*` log lines). */
  readonly contract: Record<string, unknown> | null;
}

export async function startRelay(input: RelayOptionsInput, log?: Logger): Promise<Relay> {
  const opts = RelayOptionsSchema.parse(input);
  const logger = log ?? createLogger({ svc: "relay", worker: opts.workerId });
  await initHashing();
  const token = opts.credential.trim();
  const modelFiles = opts.modelDir !== undefined ? await readModelDir(opts.modelDir) : null;
  const raw = await waitForServerInfo(opts, logger);
  const info = parseWorkerInfo(raw, opts.workerUrl, overridesOf(opts));
  const relay = new RelayImpl(opts, info, token, logger, modelFiles, resolveContract(modelFiles, raw));
  await relay.start();
  return relay;
}

function overridesOf(opts: RelayOptions): WorkerInfoOverrides {
  const o: WorkerInfoOverrides = { dpRank: opts.dpRank };
  if (opts.blockSize !== undefined) o.blockSize = opts.blockSize;
  if (opts.kvEndpoint !== undefined) o.kvEndpoint = opts.kvEndpoint;
  if (opts.replayEndpoint !== undefined) o.replayEndpoint = opts.replayEndpoint;
  if (opts.topic !== undefined) o.topic = opts.topic;
  o.kvEvents = opts.kvEvents;
  return o;
}

async function waitForServerInfo(opts: RelayOptions, log: Logger): Promise<unknown> {
  const deadline = Date.now() + opts.startupTimeoutMs;
  let delay = 200;
  for (;;) {
    try {
      return await fetchServerInfo(opts.workerUrl, opts.serverInfoTimeoutMs, opts.workerApiKey);
    } catch (e) {
      if (Date.now() + delay > deadline) {
        throw new RelayStartupError(`worker ${opts.workerUrl}: /server_info unreachable (${errorMessage(e)})`);
      }
      log.info("waiting_for_worker", { url: opts.workerUrl, error: errorMessage(e) });
      await sleep(delay);
      delay = Math.min(delay * 2, 2000);
    }
  }
}

class RelayImpl implements Relay {
  private readonly opts: RelayOptions;
  private readonly log: Logger;
  private readonly serial = new Serial();
  private readonly model: string;
  /** null: no KV events (approximate mode). */
  private readonly feed: KvFeed | null;
  private readonly fanout: ShardFanout;
  private readonly closing = new AbortController();
  private workerInfo: WorkerInfo;
  private readonly modelFiles: ModelDirFiles | null;
  private contractState: ContractResolution;
  private set: TieredBlockSet;
  private epoch: number;
  private worker: WorkerState = "up";
  private downReason: string | null = null;
  private healthFailures = 0;
  private healthLoop: Promise<void> | null = null;
  private readonly counters = { batches: 0, storedBlocks: 0, removedBlocks: 0, historyLost: 0, workerDowns: 0, newLives: 0, flushes: 0 };
  private approximate: string | null = null;
  /** Payload of the last applied batch (its digest goes into the state file). */
  private lastPayload: Uint8Array | null = null;
  /** Bumped on every change of the view, so the state keeper saves only what changed. */
  private viewVersion = 0;
  private readonly keeper: StateKeeper | null;
  private flushLoop: Promise<void> | null = null;
  private readonly dropped: Record<string, number> = {};
  /** A batch of another DP rank arrived (logged once). */
  private wrongRankSeen = false;

  constructor(opts: RelayOptions, info: WorkerInfo, token: string, log: Logger, modelFiles: ModelDirFiles | null, contract: ContractResolution) {
    this.opts = opts;
    this.log = log;
    this.workerInfo = info;
    this.modelFiles = modelFiles;
    this.contractState = contract;
    this.model = opts.model ?? info.modelName ?? opts.workerId;
    if (opts.model && info.modelName && opts.model !== info.modelName) {
      log.warn("model_name_differs", { given: opts.model, served: info.modelName });
    }
    if (opts.dpRank >= info.dpSize) {
      throw new RelayStartupError(`worker ${opts.workerUrl}: --dp-rank ${opts.dpRank} is outside its dp size ${info.dpSize} (/server_info dp_size)`);
    }
    this.set = new TieredBlockSet(info.blockSize);
    this.epoch = nextEpoch(info.startTimeMs, null);
    this.feed = info.kvEndpoint === null ? null : new KvFeed({
      endpoint: info.kvEndpoint,
      replayEndpoint: info.replayEndpoint,
      topic: info.topic,
      replayTimeoutMs: opts.replayTimeoutMs,
      serial: this.serial,
      log,
      handlers: {
        onBatch: (b) => this.onBatch(b),
        onHistoryLost: (i) => this.onHistoryLost(i.reason),
        onPublisherRestart: (i) => this.newLife(`publisher seq went back ${i.previousSeq} → ${i.seq}`),
        // Down now, not after two failed health checks: the health check that answers again starts
        // the new life (a restart faster than two checks was otherwise missed when the new
        // process's seq had passed the old one's, or it published nothing yet).
        onPublisherGone: () => {
          if (this.worker === "up") this.workerDown("the KV publisher's connection closed (the worker process ended)");
        },
        onDrop: (drops) => {
          for (const d of drops) this.countDrop(d.reason, 1);
        },
      },
    });
    this.fanout = new ShardFanout({
      newSession: (shard, hooks) =>
        new IndexSession({
          url: relayUrl(opts.indexUrl, opts.workerId, this.model, shard, info.dpSize > 1 ? opts.dpRank : null),
          token,
          hello: () => this.hello(),
          snapshot: hooks.snapshot,
          onWelcome: hooks.onWelcome,
          onEpochBehind: (indexEpoch) => this.onEpochBehind(indexEpoch),
          downReason: () => (this.worker === "down" ? (this.downReason ?? "worker down") : null),
          flushIntervalMs: opts.flushIntervalMs,
          flushBlocks: opts.flushBlocks,
          backoffBaseMs: opts.backoffBaseMs,
          backoffCapMs: opts.backoffCapMs,
          welcomeTimeoutMs: opts.welcomeTimeoutMs,
          dumpChunkBlocks: opts.dumpChunkBlocks,
          pingIntervalMs: opts.pingIntervalMs,
          pongTimeoutMs: opts.pongTimeoutMs,
          log: shard === 0 ? log : withFields(log, { shard }),
        }),
      blocks: () => this.set.dumpBlocks(),
      position: () => ({ epoch: this.epoch, seq: this.feed?.lastSeq ?? -1, approximate: this.approximate !== null }),
      log,
    });
    this.keeper =
      opts.stateFile === undefined || this.feed === null
        ? null
        : new StateKeeper({
            path: opts.stateFile,
            intervalMs: opts.stateIntervalMs,
            maxBytes: opts.stateMaxBytes,
            replayEndpoint: info.replayEndpoint,
            replayTimeoutMs: opts.replayTimeoutMs,
            version: () => this.viewVersion,
            view: () => ({
              workerId: opts.workerId,
              model: this.model,
              blockSize: this.set.blockSize,
              epoch: this.epoch,
              startTimeMs: this.workerInfo.startTimeMs,
              lastSeq: this.feed?.lastSeq ?? null,
              lastPayload: this.lastPayload,
              approximate: this.approximate,
              blocks: () => this.set.dumpBlocks(),
            }),
            log,
          });
  }

  get blockSet(): WorkerBlockSet {
    return this.set.gpu;
  }

  get hostBlockSet(): WorkerBlockSet {
    return this.set.host;
  }

  get info(): WorkerInfo {
    return this.workerInfo;
  }

  get contract(): Record<string, unknown> | null {
    return this.contractState.published;
  }

  private logContract(): void {
    const c = this.contractState;
    if (c.published) {
      this.log.info("contract_published", {
        modelType: c.contract.modelType,
        sglangVersion: c.contract.sglangVersion,
        transformersVersion: c.contract.transformersVersion,
      });
    } else {
      this.log.warn("contract_not_published", { reason: c.reason, detail: c.detail });
    }
  }

  async start(): Promise<void> {
    const i = this.workerInfo;
    this.log.info("relay_start", {
      workerUrl: this.opts.workerUrl,
      kvEndpoint: i.kvEndpoint,
      replayEndpoint: i.replayEndpoint,
      topic: i.topic,
      blockSize: i.blockSize,
      epoch: this.epoch,
      model: this.model,
      // Cumulative stream frames cost the edge work growing as the square of an answer (docs/real-sglang.md).
      streaming: i.incrementalStreaming ? "incremental" : "cumulative (consider --incremental-streaming-output)",
    });
    if (this.feed === null) {
      const why = this.opts.kvEvents === "off" ? "--no-kv-events" : "worker /server_info has no kv_events (--allow-no-kv-events)";
      this.log.warn("kv_events_off", { reason: why, note: "approximate mode: hello kvEvents=false, empty dumps, no ZMQ" });
    }
    this.logContract();
    const resume = await this.resumeSaved();
    await this.feed?.start(resume ?? undefined);
    this.keeper?.start();
    this.fanout.start();
    this.healthLoop = this.runHealthLoop();
  }

  /** Restores the saved view when it belongs to this worker's stream (state-keeper.ts). */
  private async resumeSaved(): Promise<{ cursor: number; batches: Resume["batches"] } | null> {
    const r = await this.keeper?.load({
      workerId: this.opts.workerId,
      model: this.model,
      blockSize: this.set.blockSize,
      startTimeMs: this.workerInfo.startTimeMs,
    });
    if (!r) return null;
    const skipped = this.set.restore(r.state.blocks);
    this.epoch = r.state.epoch;
    // A buffer that starts after the saved batch cannot prove it is the same stream: approximate
    // (the replay below also reports the lost range when batches are really missing).
    this.approximate = r.state.approximate ?? (r.verdict === "gap" ? "resumed saved view; the replay buffer no longer holds its last batch" : null);
    this.fanout.rebuildRouter();
    this.viewVersion++;
    this.log.info("state_resumed", { verdict: r.verdict, blocks: this.set.size, skipped, epoch: this.epoch, seq: r.cursor, approximate: this.approximate });
    if (this.approximate !== null) this.startFlushIfAsked();
    return { cursor: r.cursor, batches: r.batches };
  }

  drain(reason: string): void {
    this.log.info("worker_draining", { reason });
    this.fanout.announce("draining", reason);
  }

  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort();
    await this.feed?.close();
    this.keeper?.close();
    await this.fanout.close();
    await this.healthLoop;
    await this.flushLoop;
    this.log.info("relay_closed", {});
  }

  stats(): RelayStats {
    return {
      workerId: this.opts.workerId,
      model: this.model,
      kvEvents: this.feed !== null,
      worker: this.worker,
      epoch: this.epoch,
      blockSize: this.set.blockSize,
      blocks: this.set.gpu.size,
      hostBlocks: this.set.host.size,
      needsResync: this.set.needsResync,
      lastSeq: this.feed?.lastSeq ?? null,
      ...this.counters,
      approximate: this.approximate,
      state: this.keeper?.stats() ?? null,
      dropped: { ...this.dropped },
      feed: this.feed?.stats() ?? NO_FEED_STATS,
      ...this.sessionStats(),
    };
  }

  private sessionStats(): Pick<RelayStats, "session" | "shards" | "shardSessions"> {
    const s = this.fanout.stats();
    return { session: s.sessions[0]!, shards: s.shards, shardSessions: s.sessions };
  }

  private hello(): RelayHello {
    return {
      type: "hello",
      workerId: this.opts.workerId,
      url: this.opts.advertiseUrl ?? this.opts.workerUrl,
      blockSize: this.set.blockSize,
      epoch: this.epoch,
      modelName: this.model,
      contract: this.contractState.published,
      kvEvents: this.feed !== null,
      incrementalStreaming: this.workerInfo.incrementalStreaming,
      ...(this.workerInfo.kvCapacityTokens !== null ? { kvCapacityTokens: this.workerInfo.kvCapacityTokens } : {}),
      ...(this.workerInfo.hicacheStorage !== null ? { hicacheStorage: this.workerInfo.hicacheStorage } : {}),
      ...(this.workerInfo.languageOnly ? { languageOnly: true as const } : {}),
      ...(this.workerInfo.disaggregationMode !== "null" ? { disaggregationMode: this.workerInfo.disaggregationMode } : {}),
      ...(this.workerInfo.bootstrapPort !== null ? { bootstrapPort: this.workerInfo.bootstrapPort } : {}),
      relayVersion: RELAY_VERSION,
      ...(this.opts.region !== undefined ? { region: this.opts.region } : {}),
      ...(this.opts.prefillTokensPerSec !== undefined ? { prefillTokensPerSec: this.opts.prefillTokensPerSec } : {}),
      ...(this.workerInfo.dpSize > 1 ? { dpSize: this.workerInfo.dpSize, dpRank: this.opts.dpRank } : {}),
    };
  }

  private onBatch(b: FeedBatch): void {
    this.counters.batches++;
    // A DP worker's rank publishes only its own rank's batches (kv_events.py @9d147fd
    // ZmqEventPublisher.publish stamps attn_dp_rank): another rank's batch means this relay's
    // endpoint is that rank's (a wrong --kv-endpoint or port layout), and its blocks are not this rank's.
    if (this.workerInfo.dpSize > 1 && b.attnDpRank !== undefined && b.attnDpRank !== null && b.attnDpRank !== this.opts.dpRank) {
      this.countDrop("wrong_dp_rank", 1);
      if (!this.wrongRankSeen) this.log.error("wrong_dp_rank", { following: this.opts.dpRank, batchRank: b.attnDpRank, endpoint: this.workerInfo.kvEndpoint });
      this.wrongRankSeen = true;
      return;
    }
    this.lastPayload = b.payload;
    this.viewVersion++;
    for (const d of b.dropped) this.countDrop(d.reason, 1);
    const wasIncomplete = this.set.needsResync;
    const out = this.set.apply(b.events);
    this.counters.storedBlocks += out.stored;
    this.counters.removedBlocks += out.removed;
    for (const d of out.dropped) this.countDrop(d.reason, d.count);
    if (!wasIncomplete && this.set.needsResync) {
      this.log.warn("view_incomplete", { seq: b.seq, detail: out.dropped.find((d) => d.reason === "unknown_parent")?.detail });
    }
    if (this.approximate !== null && out.events.some((e) => e.t === "cleared")) {
      // Everything the view held is gone on the worker too: exact again (the index sees the same event).
      this.log.info("view_exact_again", { seq: b.seq, was: this.approximate });
      this.approximate = null;
    }
    this.fanout.pushEvents(this.epoch, b.seq, out.events);
  }

  /**
   * Batches are gone for good: the view keeps what it knew (it may hold blocks evicted in the gap,
   * and misses blocks stored in it) and is approximate from now on; every shard gets a dump saying so.
   */
  private onHistoryLost(reason: string): void {
    this.counters.historyLost++;
    this.approximate = `history lost: ${reason}`;
    this.viewVersion++;
    this.fanout.resyncAll(this.approximate);
    this.startFlushIfAsked();
  }

  /** `--on-history-lost flush`: reset the worker's cache (retrying while it is busy) until exact. */
  private startFlushIfAsked(): void {
    if (this.opts.onHistoryLost !== "flush" || this.flushLoop !== null) return;
    this.flushLoop = (async () => {
      const signal = this.closing.signal;
      while (!signal.aborted && this.approximate !== null && this.worker === "up") {
        const r = await flushWorkerCache(this.opts.workerUrl, this.opts.serverInfoTimeoutMs, this.opts.workerApiKey);
        this.counters.flushes++;
        this.log.warn("worker_cache_flush", { ok: r.ok, status: r.status, detail: r.detail, reason: this.approximate });
        if (r.ok) break; // AllBlocksCleared follows on the event stream and makes the view exact
        await sleep(this.opts.flushRetryMs, signal);
      }
    })().finally(() => {
      this.flushLoop = null;
    });
  }

  private countDrop(reason: string, n: number): void {
    this.dropped[reason] = (this.dropped[reason] ?? 0) + n;
  }

  /** The worker stopped answering: its cache is gone as far as routing is concerned. */
  private workerDown(reason: string): void {
    this.worker = "down";
    this.downReason = reason;
    this.counters.workerDowns++;
    this.feed?.pause();
    this.set.clear();
    this.approximate = null; // nothing is claimed for a dead worker
    this.viewVersion++;
    this.fanout.rebuildRouter();
    this.log.warn("worker_down", { reason });
    this.fanout.resyncAll("worker down"); // empty dump, then status down, on every shard
  }

  /**
   * The index ended a life of this worker with a later epoch than ours (the worker's published start
   * time or this clock lags the one that made it) and refused our hello: say hello above it.
   */
  private onEpochBehind(indexEpoch: number): void {
    if (indexEpoch < this.epoch) return;
    const from = this.epoch;
    this.epoch = indexEpoch + 1;
    this.viewVersion++; // the state file keeps the new epoch (a restart must not say hello with the old one)
    this.log.warn("epoch_behind_index", { from, to: this.epoch });
    this.fanout.restartAll(`epoch ${from} behind the index's ${indexEpoch}`);
  }

  /** A (possibly) new worker process: new epoch, catch up from its replay buffer, hello again. */
  private async newLife(reason: string): Promise<void> {
    let info: WorkerInfo;
    let raw: unknown;
    try {
      raw = await fetchServerInfo(this.opts.workerUrl, this.opts.serverInfoTimeoutMs, this.opts.workerApiKey);
      info = parseWorkerInfo(raw, this.opts.workerUrl, overridesOf(this.opts));
    } catch (e) {
      this.log.error("worker_info_failed", { reason, error: errorMessage(e) });
      if (this.worker === "up") this.workerDown(`server_info failed: ${errorMessage(e)}`);
      return;
    }
    const prev = this.workerInfo;
    if (info.kvEndpoint !== prev.kvEndpoint || info.replayEndpoint !== prev.replayEndpoint || info.topic !== prev.topic) {
      this.log.warn("kv_endpoint_changed_ignored", { was: prev.kvEndpoint, now: info.kvEndpoint, note: "restart the relay" });
    }
    if (info.blockSize !== this.set.blockSize) {
      this.log.warn("block_size_changed", { was: this.set.blockSize, now: info.blockSize });
      this.set = new TieredBlockSet(info.blockSize);
    } else {
      this.set.clear();
    }
    this.approximate = null; // a new process starts empty: its events are the whole truth
    this.viewVersion++;
    this.fanout.rebuildRouter();
    this.workerInfo = { ...info, kvEndpoint: prev.kvEndpoint, replayEndpoint: prev.replayEndpoint, topic: prev.topic };
    this.epoch = nextEpoch(info.startTimeMs, this.epoch);
    this.worker = "up";
    this.downReason = null;
    this.healthFailures = 0;
    this.counters.newLives++;
    this.log.info("worker_new_life", { reason, epoch: this.epoch, blockSize: info.blockSize });
    // A new process may run another SGLang version: the hello of the new epoch carries its contract.
    this.contractState = resolveContract(this.modelFiles, raw);
    this.logContract();
    // Drop the old sessions first so nothing of the new life travels under the old hello; the
    // dump after the new welcome carries whatever the catch-up has applied by then.
    this.fanout.restartAll(`new epoch ${this.epoch}`);
    this.feed?.reset();
    await this.feed?.catchUp();
  }

  private async runHealthLoop(): Promise<void> {
    const signal = this.closing.signal;
    while (!signal.aborted) {
      await sleep(this.opts.healthIntervalMs, signal);
      if (signal.aborted) break;
      const ok = await probeHealth(this.opts.workerUrl, this.opts.healthTimeoutMs, signal);
      if (signal.aborted) break;
      await this.serial.run(async () => {
        if (ok) {
          this.healthFailures = 0;
          if (this.worker === "down") await this.newLife("worker healthy again");
        } else if (++this.healthFailures >= this.opts.healthFailures && this.worker === "up") {
          this.workerDown(`health check failed ${this.healthFailures}×`);
        }
      });
    }
  }
}

const NO_FEED_STATS: KvFeedStats = emptyFeedStats();

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
