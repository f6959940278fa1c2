/**
 * KV-event publisher: a ZMQ PUB socket sending one batch per scheduler step, and a ROUTER socket
 * replaying recent batches from a ring buffer (SGLang ZmqEventPublisher). Events recorded during
 * one macrotask form one step, like one iteration of SGLang's scheduler loop.
 */
import * as zmq from "zeromq";
import { encodeEventBatch, encodeSeq, REPLAY_END_SEQ } from "./kv-wire.ts";
import type { KvEvent } from "./radix-cache.ts";

export interface KvPublisherOptions {
  host: string;
  port: number;
  replayPort: number;
  topic: string;
  bufferSteps: number;
  hwm: number;
  dpRank: number;
}

interface BufferedBatch {
  seq: bigint;
  payload: Uint8Array;
}

/** Serialises sends: a zeromq v6 socket refuses a send while another one is pending. */
class SendQueue {
  private tail: Promise<void> = Promise.resolve();
  private readonly socket: { send(msg: Uint8Array[]): Promise<void> };

  constructor(socket: { send(msg: Uint8Array[]): Promise<void> }) {
    this.socket = socket;
  }

  send(frames: Uint8Array[]): Promise<void> {
    const next = this.tail.then(() => this.socket.send(frames)).catch(() => {});
    this.tail = next;
    return next;
  }

  drain(): Promise<void> {
    return this.tail;
  }
}

export class KvEventPublisher {
  readonly endpoint: string;
  readonly replayEndpoint: string;
  private readonly pub: zmq.Publisher;
  private readonly router: zmq.Router;
  private readonly pubQueue: SendQueue;
  private readonly routerQueue: SendQueue;
  private readonly topic: Uint8Array;
  private readonly bufferSteps: number;
  private readonly dpRank: number;
  private readonly ring: BufferedBatch[] = [];
  private pending: KvEvent[] = [];
  private flushScheduled: NodeJS.Immediate | null = null;
  private nextSeq = 0n;
  private closed = false;

  private constructor(pub: zmq.Publisher, router: zmq.Router, opts: KvPublisherOptions) {
    this.pub = pub;
    this.router = router;
    this.endpoint = pub.lastEndpoint ?? "";
    this.replayEndpoint = router.lastEndpoint ?? "";
    this.pubQueue = new SendQueue(pub);
    this.routerQueue = new SendQueue(router);
    this.topic = new TextEncoder().encode(opts.topic);
    this.bufferSteps = opts.bufferSteps;
    this.dpRank = opts.dpRank;
    void this.serveReplay();
  }

  static async start(opts: KvPublisherOptions): Promise<KvEventPublisher> {
    const pub = new zmq.Publisher({ sendHighWaterMark: opts.hwm, linger: 0 });
    const router = new zmq.Router({ linger: 0 });
    try {
      await pub.bind(`tcp://${opts.host}:${opts.port}`);
      await router.bind(`tcp://${opts.host}:${opts.replayPort}`);
    } catch (err) {
      pub.close();
      router.close();
      throw err;
    }
    return new KvEventPublisher(pub, router, opts);
  }

  /** Port actually bound by the PUB socket. */
  get port(): number {
    return portOf(this.endpoint);
  }

  get replayPort(): number {
    return portOf(this.replayEndpoint);
  }

  /** Sequence number the next batch will carry. */
  get nextSequence(): bigint {
    return this.nextSeq;
  }

  record(event: KvEvent): void {
    if (this.closed) return;
    this.pending.push(event);
    this.flushScheduled ??= setImmediate(() => this.flush());
  }

  /** Publishes the pending events as one batch now (end of a scheduler step). */
  flush(): void {
    if (this.flushScheduled) {
      clearImmediate(this.flushScheduled);
      this.flushScheduled = null;
    }
    if (this.closed || this.pending.length === 0) return;
    const events = this.pending;
    this.pending = [];
    const seq = this.nextSeq++;
    const payload = encodeEventBatch(Date.now() / 1000, events, this.dpRank);
    this.ring.push({ seq, payload });
    if (this.ring.length > this.bufferSteps) this.ring.shift();
    void this.pubQueue.send([this.topic, encodeSeq(seq), payload]);
  }

  /** Graceful: publish what is pending, let sends finish, close both sockets. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.flush();
    await this.pubQueue.drain();
    this.closed = true;
    this.pub.close();
    this.router.close();
  }

  /** Abrupt: drop pending events and close at once (a crashed worker). */
  kill(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.flushScheduled) clearImmediate(this.flushScheduled);
    this.pending = [];
    this.pub.close();
    this.router.close();
  }

  private async serveReplay(): Promise<void> {
    try {
      for await (const frames of this.router) {
        // ROUTER adds the client identity: [id, b"", start_seq(8B BE)].
        const [id, empty, start] = frames;
        if (!id || !empty || empty.length !== 0 || !start || start.length !== 8) continue;
        const startSeq = new DataView(start.buffer, start.byteOffset, 8).getBigUint64(0, false);
        const empty0 = new Uint8Array(0);
        for (const b of this.ring.slice()) {
          if (b.seq >= startSeq) void this.routerQueue.send([id, empty0, encodeSeq(b.seq), b.payload]);
        }
        void this.routerQueue.send([id, empty0, REPLAY_END_SEQ, empty0]);
      }
    } catch {
      // socket closed
    }
  }
}

function portOf(endpoint: string): number {
  const m = /:(\d+)$/.exec(endpoint);
  return m ? Number(m[1]) : 0;
}
