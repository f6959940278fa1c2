/**
 * The relay beside one SGLang worker: follows the worker's KV events (KvFeed), keeps its current
 * block set (WorkerBlockSet), and mirrors it to the pool's routing index (IndexSession). Watches
 * the worker's health: a dead worker's cache is gone (status down + empty dump); a new process is
 * a new epoch (hello again, fresh dump).
 *
 * Fail-safe: whenever history is lost (gap replay cannot cover, relay started mid-stream) the
 * relay clears its view and sends an empty dump: the index may underestimate a cache, never
 * overestimate it.
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
import type { RelayHello } from "../../src/kv/relay-protocol.ts";
import { WorkerBlockSet } from "../../src/kv/worker-block-set.ts";
import { initHashing } from "../../src/util/hash.ts";
import { readModelDir, resolveContract, type ContractResolution } from "./contract.ts";
import { KvFeed, emptyFeedStats, type FeedBatch, type KvFeedStats } from "./kv-feed.ts";
import { createLogger, errorMessage, withFields, type Logger } from "./log.ts";
import { RelayOptionsSchema, type RelayOptions, type RelayOptionsInput } from "./options.ts";
import { IndexSession, relayUrl, type IndexSessionStats } from "./index-session.ts";
import { ShardFanout } from "./shard-fanout.ts";
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
  needsResync: boolean;
  lastSeq: number | null;
  batches: number;
  storedBlocks: number;
  removedBlocks: number;
  /** Drops by reason: decode problems (event-decode.ts) and block-set rules (worker-block-set.ts). */
  dropped: Record<string, number>;
  historyLost: number;
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
  stats(): RelayStats;
  /** The worker's current block set (replaced when a new worker life changes the block size). */
  readonly blockSet: WorkerBlockSet;
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
      return await fetchServerInfo(opts.workerUrl, opts.serverInfoTimeoutMs);
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
  private set: WorkerBlockSet;
  private epoch: number;
  private worker: WorkerState = "up";
  private downReason: string | null = null;
  private healthFailures = 0;
  private healthLoop: Promise<void> | null = null;
  private readonly counters = { batches: 0, storedBlocks: 0, removedBlocks: 0, historyLost: 0, workerDowns: 0, newLives: 0 };
  private readonly dropped: Record<string, number> = {};

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
    if (info.dpSize > 1) {
      log.warn("dp_size_gt_1", { dpSize: info.dpSize, followingRank: opts.dpRank, note: "one relay covers one rank" });
    }
    this.set = new WorkerBlockSet(info.blockSize);
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
        onDrop: (drops) => {
          for (const d of drops) this.countDrop(d.reason, 1);
        },
      },
    });
    this.fanout = new ShardFanout({
      newSession: (shard, hooks) =>
        new IndexSession({
          url: relayUrl(opts.indexUrl, opts.workerId, this.model, shard),
          token,
          hello: () => this.hello(),
          snapshot: hooks.snapshot,
          onWelcome: hooks.onWelcome,
          downReason: () => (this.worker === "down" ? (this.downReason ?? "worker down") : null),
          flushIntervalMs: opts.flushIntervalMs,
          flushBlocks: opts.flushBlocks,
          backoffBaseMs: opts.backoffBaseMs,
          backoffCapMs: opts.backoffCapMs,
          welcomeTimeoutMs: opts.welcomeTimeoutMs,
          dumpChunkBlocks: opts.dumpChunkBlocks,
          pingIntervalMs: opts.pingIntervalMs,
          log: shard === 0 ? log : withFields(log, { shard }),
        }),
      blocks: () => this.set.dumpBlocks(),
      position: () => ({ epoch: this.epoch, seq: this.feed?.lastSeq ?? -1 }),
      log,
    });
  }

  get blockSet(): WorkerBlockSet {
    return this.set;
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
    });
    if (this.feed === null) {
      const why = this.opts.kvEvents === "off" ? "--no-kv-events" : "worker /server_info has no kv_events (--allow-no-kv-events)";
      this.log.warn("kv_events_off", { reason: why, note: "approximate mode: hello kvEvents=false, empty dumps, no ZMQ" });
    }
    this.logContract();
    await this.feed?.start();
    this.fanout.start();
    this.healthLoop = this.runHealthLoop();
  }

  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort();
    await this.feed?.close();
    await this.fanout.close();
    await this.healthLoop;
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
      blocks: this.set.size,
      needsResync: this.set.needsResync,
      lastSeq: this.feed?.lastSeq ?? null,
      ...this.counters,
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
      relayVersion: RELAY_VERSION,
      ...(this.opts.region !== undefined ? { region: this.opts.region } : {}),
      ...(this.opts.prefillTokensPerSec !== undefined ? { prefillTokensPerSec: this.opts.prefillTokensPerSec } : {}),
    };
  }

  private onBatch(b: FeedBatch): void {
    this.counters.batches++;
    for (const d of b.dropped) this.countDrop(d.reason, 1);
    const wasIncomplete = this.set.needsResync;
    const out = this.set.apply(b.events);
    this.counters.storedBlocks += out.stored;
    this.counters.removedBlocks += out.removed;
    for (const d of out.dropped) this.countDrop(d.reason, d.count);
    if (!wasIncomplete && this.set.needsResync) {
      this.log.warn("view_incomplete", { seq: b.seq, detail: out.dropped.find((d) => d.reason === "unknown_parent")?.detail });
    }
    this.fanout.pushEvents(this.epoch, b.seq, out.events);
  }

  private onHistoryLost(reason: string): void {
    this.counters.historyLost++;
    this.set.clear();
    this.set.markIncomplete();
    this.fanout.rebuildRouter();
    this.fanout.resyncAll(`history lost: ${reason}`);
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
    this.fanout.rebuildRouter();
    this.log.warn("worker_down", { reason });
    this.fanout.resyncAll("worker down"); // empty dump, then status down, on every shard
  }

  /** A (possibly) new worker process: new epoch, catch up from its replay buffer, hello again. */
  private async newLife(reason: string): Promise<void> {
    let info: WorkerInfo;
    let raw: unknown;
    try {
      raw = await fetchServerInfo(this.opts.workerUrl, this.opts.serverInfoTimeoutMs);
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
      this.set = new WorkerBlockSet(info.blockSize);
    } else {
      this.set.clear();
    }
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
