/**
 * The ordered stream of one worker's KV-event batches: a ZMQ SUB on the publisher, with sequence-gap
 * detection and replay. Batches reach `onBatch` exactly once and in sequence order; what cannot be
 * recovered is reported through `onHistoryLost` (the relay then clears its view: fail-safe).
 *
 * All processing runs inside the shared `Serial`, so the relay's own lifecycle steps (worker down,
 * new life) never interleave with a batch. Handlers run inside that section: they must not call
 * `serial.run` themselves, but may call `reset()` / `catchUp()`.
 */
import * as zmq from "zeromq";
import {
  decodeKvEventBatch,
  decodeKvEventMessage,
  type DecodeDrop,
  type KvCacheEvent,
} from "../../src/engine-events/event-decode.ts";
import { errorMessage, type Logger } from "./log.ts";
import { requestReplay, type ReplayedBatch } from "./replay-client.ts";
import type { Serial } from "./serial.ts";

export interface FeedBatch {
  seq: number;
  events: KvCacheEvent[];
  dropped: DecodeDrop[];
  source: "live" | "replay";
  /** The batch's msgpack payload as published (its digest proves a resumed stream: state-file.ts). */
  payload: Uint8Array;
  /** The rank its publisher stamped in it (EventBatch.attn_dp_rank); null when absent. */
  attnDpRank?: number | null;
}

export interface KvFeedHandlers {
  onBatch(batch: FeedBatch): void;
  /** Batches before `resumeAt` are gone for good; everything the relay holds may be stale. */
  onHistoryLost(info: { missingFrom: number; resumeAt: number; reason: string }): void;
  /** The publisher's live seq went backwards: a new worker process. */
  onPublisherRestart(info: { previousSeq: number; seq: number }): Promise<void>;
  /**
   * The publisher's connection closed: its process ended (it lives as long as its worker, next to
   * this relay). Whatever answers on the endpoint next is another process, whose seq may already
   * be past the old one's (a fast restart would otherwise pass for a gap in one stream).
   */
  onPublisherGone(): void;
  /** Messages dropped whole (no usable seq). */
  onDrop(drops: DecodeDrop[]): void;
}

export interface KvFeedOptions {
  endpoint: string;
  replayEndpoint: string | null;
  topic: string;
  replayTimeoutMs: number;
  serial: Serial;
  handlers: KvFeedHandlers;
  log: Logger;
}

export interface KvFeedStats {
  lastSeq: number | null;
  liveBatches: number;
  replayedBatches: number;
  duplicates: number;
  gaps: number;
  gapsRecovered: number;
  historyLost: number;
  replayFailures: number;
  publisherRestarts: number;
}

/** All-zero feed counters (also what a relay without KV events reports). */
export function emptyFeedStats(): KvFeedStats {
  return {
    lastSeq: null,
    liveBatches: 0,
    replayedBatches: 0,
    duplicates: 0,
    gaps: 0,
    gapsRecovered: 0,
    historyLost: 0,
    replayFailures: 0,
    publisherRestarts: 0,
  };
}

const EMPTY = new Uint8Array(0);

export class KvFeed {
  private readonly opts: KvFeedOptions;
  private readonly sub: zmq.Subscriber;
  /** Last seq delivered; -1 = expecting 0; null = unknown (accept the first live seq). */
  private cursor: number | null = null;
  private lastLiveSeq: number | null = null;
  private paused = false;
  private closed = false;
  private loop: Promise<void> | null = null;
  /** A connection to the publisher completed its handshake and has not closed since. */
  private handshaken = false;
  private readonly counters: Omit<KvFeedStats, "lastSeq"> = emptyFeedStats();

  constructor(opts: KvFeedOptions) {
    this.opts = opts;
    this.sub = new zmq.Subscriber({ linger: 0 });
  }

  get lastSeq(): number | null {
    return this.cursor;
  }

  stats(): KvFeedStats {
    // The counters object carries its own (always null) lastSeq: the cursor must come last.
    return { ...this.counters, lastSeq: this.cursor };
  }

  /**
   * Connects, catches up on the replay buffer from seq 0 (or, resuming a saved view, delivers
   * `resume.batches` after `resume.cursor`), then follows the live stream.
   */
  async start(resume?: { cursor: number; batches: ReplayedBatch[] }): Promise<void> {
    // A connection to the publisher that completed its handshake and then closed: connected directly
    // beside the worker, that means its process ended. (A failed handshake also ends in
    // "disconnect", e.g. an endpoint that is not a ZMQ publisher: not counted.) A false alarm on a
    // live process costs one health interval down, a new epoch and a catch-up from replay, which
    // is approximate once the process has published more than its replay buffer holds.
    this.sub.events.on("handshake", () => void (this.handshaken = true));
    this.sub.events.on("disconnect", () => {
      if (this.closed || !this.handshaken) return;
      this.handshaken = false;
      this.opts.log.warn("publisher_disconnected", { endpoint: this.opts.endpoint });
      this.opts.serial
        .run(async () => {
          if (!this.closed) this.opts.handlers.onPublisherGone();
        })
        .catch((e: unknown) => this.opts.log.error("publisher_gone_failed", { error: errorMessage(e) }));
    });
    this.sub.connect(this.opts.endpoint);
    this.sub.subscribe(this.opts.topic);
    await this.opts.serial.run(async () => {
      if (!resume) return this.catchUp();
      this.cursor = resume.cursor;
      this.deliverReplayed(resume.batches, resume.cursor + 1);
      this.opts.log.info("resumed", { from: resume.cursor + 1, batches: resume.batches.length, lastSeq: this.cursor });
    });
    this.loop = this.readLoop();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.sub.close();
    await this.loop?.catch(() => undefined);
  }

  /** Stop delivering (worker down); live messages are discarded until `reset`. */
  pause(): void {
    this.paused = true;
  }

  /** Forget the position (new worker life) and deliver again. */
  reset(): void {
    this.cursor = null;
    this.lastLiveSeq = null;
    this.paused = false;
  }

  /**
   * Replays the publisher's buffer from seq 0 (history still buffered at startup or after a
   * restart). Without a replay endpoint, or when it fails, the first live batch sets the cursor.
   */
  async catchUp(): Promise<void> {
    if (this.opts.replayEndpoint === null) return;
    let batches: ReplayedBatch[];
    try {
      batches = await requestReplay(this.opts.replayEndpoint, 0, this.opts.replayTimeoutMs);
    } catch (e) {
      this.counters.replayFailures++;
      this.opts.log.warn("replay_failed", { from: 0, error: errorMessage(e) });
      return;
    }
    this.cursor = -1;
    this.deliverReplayed(batches, 0);
    this.opts.log.info("caught_up", { batches: batches.length, lastSeq: this.cursor });
  }

  private async readLoop(): Promise<void> {
    try {
      for await (const frames of this.sub) {
        if (this.closed) break;
        await this.opts.serial.run(() => this.onLive(frames));
      }
    } catch (e) {
      if (!this.closed) this.opts.log.error("sub_loop_failed", { error: errorMessage(e) });
    }
  }

  private async onLive(frames: Uint8Array[]): Promise<void> {
    if (this.paused || this.closed) return;
    const msg = decodeKvEventMessage(frames);
    if (msg.seq === null) {
      this.opts.handlers.onDrop(msg.dropped);
      return;
    }
    if (msg.topic !== this.opts.topic) return; // SUB filters by prefix; we want the exact topic
    const seq = msg.seq;
    if (this.lastLiveSeq !== null && seq < this.lastLiveSeq) {
      // One publisher's live stream is ordered; going back means a new process restarted at 0.
      this.counters.publisherRestarts++;
      const previousSeq = this.lastLiveSeq;
      this.lastLiveSeq = null;
      await this.opts.handlers.onPublisherRestart({ previousSeq, seq });
      if (this.paused || this.closed) return;
    }
    this.lastLiveSeq = seq;

    if (this.cursor === null) {
      if (seq > 0) this.lose(0, seq, "started mid-stream without replay");
      this.deliver({ seq, events: msg.events, dropped: msg.dropped, source: "live", payload: frames[2] ?? EMPTY, attnDpRank: msg.attnDpRank });
      return;
    }
    if (seq <= this.cursor) {
      this.counters.duplicates++;
      return;
    }
    if (seq > this.cursor + 1) await this.fillGap(this.cursor + 1, seq);
    if (this.cursor !== null && seq <= this.cursor) {
      this.counters.duplicates++; // the replay already covered it
      return;
    }
    this.counters.liveBatches++;
    this.deliver({ seq, events: msg.events, dropped: msg.dropped, source: "live", payload: frames[2] ?? EMPTY, attnDpRank: msg.attnDpRank });
  }

  /** Missing [from, liveSeq): replay them, or report the loss and move on. */
  private async fillGap(from: number, liveSeq: number): Promise<void> {
    this.counters.gaps++;
    this.opts.log.warn("seq_gap", { from, to: liveSeq - 1 });
    if (this.opts.replayEndpoint === null) {
      this.lose(from, liveSeq, "no replay endpoint");
      return;
    }
    let batches: ReplayedBatch[];
    try {
      batches = await requestReplay(this.opts.replayEndpoint, from, this.opts.replayTimeoutMs);
    } catch (e) {
      this.counters.replayFailures++;
      this.lose(from, liveSeq, `replay failed: ${errorMessage(e)}`);
      return;
    }
    const covered = batches.length > 0 && batches[0]!.seq <= from;
    this.deliverReplayed(batches, from);
    if (covered && this.cursor !== null && this.cursor >= liveSeq - 1) {
      this.counters.gapsRecovered++;
      this.opts.log.info("gap_recovered", { from, to: liveSeq - 1, batches: batches.length });
    } else if (this.cursor === null || this.cursor < liveSeq - 1) {
      this.lose(this.cursor === null ? from : this.cursor + 1, liveSeq, "replay ended early");
    }
  }

  /** Delivers replayed batches with seq ≥ from in order, reporting a loss where one is missing. */
  private deliverReplayed(batches: ReplayedBatch[], from: number): void {
    const sorted = batches.filter((b) => b.seq >= from).sort((a, b) => a.seq - b.seq);
    for (const b of sorted) {
      const expected = this.cursor === null ? b.seq : this.cursor + 1;
      if (b.seq < expected) continue;
      if (b.seq > expected) this.lose(expected, b.seq, "replay buffer does not reach back far enough");
      const decoded = decodeKvEventBatch(b.payload);
      this.counters.replayedBatches++;
      this.deliver({ seq: b.seq, events: decoded.events, dropped: decoded.dropped, source: "replay", payload: b.payload, attnDpRank: decoded.attnDpRank });
    }
  }

  private lose(missingFrom: number, resumeAt: number, reason: string): void {
    this.counters.historyLost++;
    this.opts.log.warn("history_lost", { missingFrom, resumeAt, reason });
    this.opts.handlers.onHistoryLost({ missingFrom, resumeAt, reason });
    this.cursor = resumeAt - 1;
  }

  private deliver(batch: FeedBatch): void {
    this.cursor = batch.seq;
    this.opts.handlers.onBatch(batch);
  }
}
