/**
 * KvFeed against a real ZMQ PUB + ROUTER pair on 127.0.0.1 (random ports): ordered delivery,
 * startup catch-up, gap detection with replay, unrecoverable gaps, replay timeouts, restarts.
 */
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { encodeSeq } from "../../../src/engine-events/event-decode.ts";
import { KvFeed, type FeedBatch } from "../../../services/relay/kv-feed.ts";
import { silentLogger } from "../../../services/relay/log.ts";
import { requestReplay } from "../../../services/relay/replay-client.ts";
import { Serial } from "../../../services/relay/serial.ts";
import { FakePublisher, waitFor } from "./fakes.ts";

interface Harness {
  pub: FakePublisher;
  feed: KvFeed;
  delivered: FeedBatch[];
  lost: { missingFrom: number; resumeAt: number; reason: string }[];
  restarts: { previousSeq: number; seq: number }[];
  gone: number;
}

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of open.splice(0)) await o.close();
});

async function harness(opts: { replay?: boolean; replayTimeoutMs?: number; pub?: FakePublisher } = {}): Promise<Harness> {
  const pub = opts.pub ?? (await FakePublisher.create());
  const h: Harness = { pub, feed: null as unknown as KvFeed, delivered: [], lost: [], restarts: [], gone: 0 };
  h.feed = new KvFeed({
    endpoint: pub.endpoint,
    replayEndpoint: opts.replay === false ? null : pub.replayEndpoint,
    topic: "",
    replayTimeoutMs: opts.replayTimeoutMs ?? 2000,
    serial: new Serial(),
    log: silentLogger,
    handlers: {
      onBatch: (b) => h.delivered.push(b),
      onHistoryLost: (i) => h.lost.push(i),
      onPublisherRestart: async (i) => {
        h.restarts.push(i);
        h.feed.reset();
        await h.feed.catchUp();
      },
      onPublisherGone: () => {
        h.gone++;
        h.feed.pause();
      },
      onDrop: () => {},
    },
  });
  open.push(h.feed, pub);
  await h.feed.start();
  return h;
}

/** Publishes empty batches until one arrives live, so the SUB is surely connected. */
async function warmUp(h: Harness): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const seq = await h.pub.publish();
    await new Promise((r) => setTimeout(r, 10));
    if (h.delivered.some((b) => b.seq === seq && b.source === "live")) return;
  }
  throw new Error("SUB never connected");
}

const seqs = (bs: FeedBatch[]): number[] => bs.map((b) => b.seq);
const range = (a: number, b: number): number[] => Array.from({ length: b - a + 1 }, (_, i) => a + i);

describe("replay client", () => {
  it("fetches buffered batches from a start seq up to the end marker", async () => {
    const pub = await FakePublisher.create();
    open.push(pub);
    for (let i = 0; i < 5; i++) await pub.publish([["AllBlocksCleared"]], { live: false });
    const got = await requestReplay(pub.replayEndpoint, 2, 2000);
    expect(got.map((b) => b.seq)).toEqual([2, 3, 4]);
    expect(await requestReplay(pub.replayEndpoint, 9, 2000)).toEqual([]);
  });

  it("times out against a silent ROUTER", async () => {
    const pub = await FakePublisher.create();
    open.push(pub);
    pub.answerReplay = false;
    await expect(requestReplay(pub.replayEndpoint, 0, 200)).rejects.toThrow();
  });
});

describe("KvFeed", () => {
  it("catches up on buffered history at startup, then follows live batches in order", async () => {
    const pub = await FakePublisher.create();
    for (let i = 0; i < 3; i++) await pub.publish([["AllBlocksCleared"]]); // before anyone listens
    const h = await harness({ pub });
    expect(seqs(h.delivered)).toEqual([0, 1, 2]);
    expect(h.delivered.every((b) => b.source === "replay")).toBe(true);
    expect(h.delivered[0]!.events).toEqual([{ type: "AllBlocksCleared" }]);
    await warmUp(h);
    for (let i = 0; i < 5; i++) await h.pub.publish();
    const last = h.pub.nextSeq - 1;
    await waitFor(() => h.feed.lastSeq === last, "live batches");
    expect(seqs(h.delivered)).toEqual(range(0, last));
    // stats() reports the same position, not null.
    expect(h.feed.stats().lastSeq).toBe(last);
    expect(h.lost).toEqual([]);
  });

  it("detects a sequence gap and fills it from the replay buffer", async () => {
    const h = await harness();
    await warmUp(h);
    const before = h.feed.stats();
    const a = await h.pub.publish();
    await h.pub.publish([], { live: false }); // lost on the wire, still buffered
    await h.pub.publish([], { live: false });
    const d = await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === d, "gap fill");
    expect(seqs(h.delivered)).toEqual(range(0, d));
    // The missing two come from replay (d itself may too: the replay returns everything ≥ a+1).
    expect(h.delivered.slice(-3, -1).map((b) => b.source)).toEqual(["replay", "replay"]);
    expect(h.pub.replayRequests).toContain(a + 1);
    const after = h.feed.stats();
    expect(after.gapsRecovered - before.gapsRecovered).toBe(1);
    expect(h.lost).toEqual([]);
  });

  it("reports history lost when the replay buffer no longer covers the gap", async () => {
    const h = await harness();
    await warmUp(h);
    const a = await h.pub.publish([], { live: false, buffer: false }); // gone everywhere
    await h.pub.publish([], { live: false }); // buffered only
    const c = await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === c, "resume after loss");
    expect(h.lost).toEqual([{ missingFrom: a, resumeAt: a + 1, reason: "replay buffer does not reach back far enough" }]);
    expect(seqs(h.delivered).slice(-2)).toEqual([a + 1, c]);
    expect(seqs(h.delivered)).not.toContain(a);
  });

  it("reports history lost on a gap without a replay endpoint", async () => {
    const h = await harness({ replay: false });
    // No replay: the first live seq is accepted as is (history before it unknown).
    let first = -1;
    for (let i = 0; i < 400 && h.delivered.length === 0; i++) {
      first = await h.pub.publish();
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(h.delivered).toHaveLength(1);
    if (first > 0) expect(h.lost[0]).toMatchObject({ missingFrom: 0, resumeAt: first });
    const lostBefore = h.lost.length;
    const gapAt = await h.pub.publish([], { live: false });
    const next = await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === next, "resume");
    expect(h.lost.slice(lostBefore)).toEqual([{ missingFrom: gapAt, resumeAt: next, reason: "no replay endpoint" }]);
  });

  it("reports history lost when replay times out, and keeps going", async () => {
    const h = await harness({ replayTimeoutMs: 200 });
    await warmUp(h);
    h.pub.answerReplay = false;
    const gapAt = await h.pub.publish([], { live: false });
    const next = await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === next, "resume after timeout");
    expect(h.lost).toHaveLength(1);
    expect(h.lost[0]).toMatchObject({ missingFrom: gapAt, resumeAt: next });
    expect(h.lost[0]!.reason).toMatch(/^replay failed/);
    expect(h.feed.stats().replayFailures).toBe(1);
  });

  it("treats a seq going backwards as a publisher restart and catches up on the new buffer", async () => {
    const h = await harness();
    await warmUp(h);
    for (let i = 0; i < 3; i++) await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === h.pub.nextSeq - 1, "first life");
    const count = h.delivered.length;
    h.pub.restart();
    await h.pub.publish([["AllBlocksCleared"]], { live: false }); // new life's seq 0, missed live
    await h.pub.publish(); // seq 1
    await waitFor(() => h.restarts.length === 1 && h.feed.lastSeq === 1, "restart handled");
    expect(seqs(h.delivered.slice(count))).toEqual([0, 1]);
    expect(h.delivered[count]!.events).toEqual([{ type: "AllBlocksCleared" }]);
  });

  it("a publisher whose connection closes is reported gone at once, whatever seq its successor starts at", async () => {
    const h = await harness();
    await warmUp(h);
    for (let i = 0; i < 3; i++) await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === h.pub.nextSeq - 1, "first life");
    // A fast restart whose publisher already counts past the old one: no seq goes back, and
    // nothing is published yet; only the closed connection tells.
    await h.pub.reopen(h.pub.nextSeq + 20);
    await waitFor(() => h.gone === 1, "publisher gone", 15_000);
    expect(h.restarts).toEqual([]);
  });

  it("a connection that never completes its handshake (not a ZMQ publisher) is not taken for a publisher gone", async () => {
    // Accepts and hangs up at once: libzmq reports each attempt as a failed handshake and a disconnect.
    // The error handler: libzmq may reset a connection this end already closed (an unhandled ECONNRESET otherwise).
    const server = createServer((sock) => sock.on("error", () => {}).end("HTTP/1.1 400 Bad Request\r\n\r\n"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    let gone = 0;
    const feed = new KvFeed({
      endpoint: `tcp://127.0.0.1:${(server.address() as AddressInfo).port}`,
      replayEndpoint: null,
      topic: "",
      replayTimeoutMs: 500,
      serial: new Serial(),
      log: silentLogger,
      handlers: { onBatch: () => {}, onHistoryLost: () => {}, onPublisherRestart: async () => {}, onPublisherGone: () => void gone++, onDrop: () => {} },
    });
    let attempts = 0;
    server.on("connection", () => attempts++);
    try {
      await feed.start();
      await waitFor(() => attempts >= 3, "reconnect attempts");
      expect(gone).toBe(0);
    } finally {
      await feed.close();
      server.close();
    }
  });

  it("counts malformed live messages without stopping", async () => {
    const h = await harness();
    await warmUp(h);
    const seq = h.pub.nextSeq++;
    h.pub.buffer.push({ seq, payload: Uint8Array.of(0xc1) });
    await h.pub.pub.send([new Uint8Array(0), encodeSeq(seq), Uint8Array.of(0xc1)]);
    const next = await h.pub.publish();
    await waitFor(() => h.feed.lastSeq === next, "after malformed");
    const bad = h.delivered.find((b) => b.seq === seq)!;
    expect(bad.events).toEqual([]);
    expect(bad.dropped.map((d) => d.reason)).toEqual(["bad_msgpack"]);
  });
});
