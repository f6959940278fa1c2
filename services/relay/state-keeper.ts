/**
 * The relay's persistence loop around state-file.ts: at start, decide whether the saved view can be
 * resumed (and fetch the replay that follows it); while running, save the view every
 * `stateIntervalMs` when it changed; on shutdown, save once more.
 */
import type { DumpBlock } from "./worker-block-set.ts";
import { errorMessage, type Logger } from "./log.ts";
import { requestReplay, type ReplayedBatch } from "./replay-client.ts";
import { loadRelayState, payloadDigest, resumeVerdict, saveRelayState, type RelayState } from "./state-file.ts";

/** What the relay holds now, read synchronously (blocks and seq from the same instant). */
export interface ViewNow {
  workerId: string;
  model: string;
  blockSize: number;
  epoch: number;
  startTimeMs: number | null;
  lastSeq: number | null;
  lastPayload: Uint8Array | null;
  approximate: string | null;
  blocks(): DumpBlock[];
}

export interface Resume {
  state: RelayState;
  verdict: "continue" | "gap";
  /** Feed position to resume after, and the replayed batches to deliver from there. */
  cursor: number;
  batches: ReplayedBatch[];
}

export interface StateKeeperOptions {
  path: string;
  intervalMs: number;
  maxBytes: number;
  replayEndpoint: string | null;
  replayTimeoutMs: number;
  view(): ViewNow;
  /** Bumped by the relay on every change of the view (batch applied, cleared, approximate). */
  version(): number;
  log: Logger;
}

export interface StateKeeperStats {
  saves: number;
  saveFailures: number;
  lastSaveBytes: number;
  lastSavedAt: number | null;
  resumed: "continue" | "gap" | null;
}

export class StateKeeper {
  private readonly opts: StateKeeperOptions;
  private timer: NodeJS.Timeout | null = null;
  private savedVersion = -1;
  private readonly counters: StateKeeperStats = { saves: 0, saveFailures: 0, lastSaveBytes: 0, lastSavedAt: null, resumed: null };

  constructor(opts: StateKeeperOptions) {
    this.opts = opts;
  }

  stats(): StateKeeperStats {
    return { ...this.counters };
  }

  /** The saved view and its replay, if it belongs to this worker's current stream; else null. */
  async load(current: { workerId: string; model: string; blockSize: number; startTimeMs: number | null }): Promise<Resume | null> {
    const log = this.opts.log;
    const r = loadRelayState(this.opts.path, this.opts.maxBytes);
    if (!r.ok) {
      if (r.reason !== "missing") log.warn("state_unusable", { path: this.opts.path, reason: r.reason, detail: r.detail });
      return null;
    }
    const s = r.state;
    if (s.workerId !== current.workerId || s.model !== current.model || s.blockSize !== current.blockSize || s.lastSeq < 0) {
      log.info("state_ignored", { reason: "another worker, model, block size, or nothing applied", savedWorker: s.workerId, savedSeq: s.lastSeq });
      return null;
    }
    if (this.opts.replayEndpoint === null) {
      log.warn("state_ignored", { reason: "no replay endpoint: the saved position cannot be checked" });
      return null;
    }
    let batches: ReplayedBatch[];
    try {
      batches = (await requestReplay(this.opts.replayEndpoint, s.lastSeq, this.opts.replayTimeoutMs)).sort((a, b) => a.seq - b.seq);
    } catch (e) {
      log.warn("state_ignored", { reason: `replay failed: ${errorMessage(e)}` });
      return null;
    }
    const head = batches[0];
    const verdict = resumeVerdict(s, current.startTimeMs, head ? { seq: head.seq, sha256: payloadDigest(head.payload) } : null);
    log.info("state_loaded", { verdict, savedSeq: s.lastSeq, blocks: s.blocks.length, bufferFrom: head?.seq ?? null, approximate: s.approximate });
    if (verdict === "other") return null;
    this.counters.resumed = verdict;
    return { state: s, verdict, cursor: s.lastSeq, batches: batches.filter((b) => b.seq > s.lastSeq) };
  }

  start(): void {
    this.timer = setInterval(() => this.saveIfChanged(), this.opts.intervalMs);
    this.timer.unref();
  }

  /** Stops the timer and saves the final view. */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.saveIfChanged();
  }

  saveIfChanged(): void {
    const version = this.opts.version();
    if (version === this.savedVersion) return;
    const v = this.opts.view();
    if (v.lastSeq === null) return; // nothing folded in yet: an older file is still a valid resume point
    const state: RelayState = {
      v: 1,
      workerId: v.workerId,
      model: v.model,
      blockSize: v.blockSize,
      epoch: v.epoch,
      startTimeMs: v.startTimeMs,
      lastSeq: v.lastSeq,
      lastBatchSha256: v.lastPayload && v.lastPayload.byteLength > 0 ? payloadDigest(v.lastPayload) : null,
      approximate: v.approximate,
      savedAt: Date.now(),
      blocks: v.blocks(),
    };
    try {
      const r = saveRelayState(this.opts.path, state, this.opts.maxBytes);
      if (!r.ok) {
        this.counters.saveFailures++;
        this.opts.log.warn("state_too_large", { bytes: r.bytes, maxBytes: this.opts.maxBytes, note: "previous file kept" });
        return;
      }
      this.savedVersion = version;
      this.counters.saves++;
      this.counters.lastSaveBytes = r.bytes;
      this.counters.lastSavedAt = state.savedAt;
    } catch (e) {
      this.counters.saveFailures++;
      this.opts.log.error("state_save_failed", { path: this.opts.path, error: errorMessage(e) });
    }
  }
}
