/**
 * Relay option bounds that protect the index: a dump chunk at the largest `dumpChunkBlocks` the
 * schema accepts, with the longest block encoding the relay produces, fits one relay message.
 */
import { afterEach, describe, expect, it } from "vitest";
import { WebSocketServer } from "ws";
import type { AddressInfo } from "node:net";
import { MAX_RELAY_MESSAGE_BYTES, RelayMessageSchema, type RelayMessage } from "../../../src/relay-wire/relay-protocol.ts";
import { IndexSession, relayUrl } from "../../../services/relay/index-session.ts";
import { silentLogger } from "../../../services/relay/log.ts";
import { MAX_DUMP_CHUNK_BLOCKS, RelayOptionsSchema } from "../../../services/relay/options.ts";
import { testCredential, waitFor } from "./fakes.ts";

const REQUIRED = { workerUrl: "http://127.0.0.1:1", indexUrl: "ws://127.0.0.1:2", workerId: "w", credential: testCredential("s") };

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

describe("dumpChunkBlocks", () => {
  it("refuses a chunk size whose dump message could exceed the index's message limit", () => {
    expect(RelayOptionsSchema.safeParse({ ...REQUIRED, dumpChunkBlocks: MAX_DUMP_CHUNK_BLOCKS }).success).toBe(true);
    expect(RelayOptionsSchema.safeParse({ ...REQUIRED, dumpChunkBlocks: MAX_DUMP_CHUNK_BLOCKS + 1 }).success).toBe(false);
    expect(RelayOptionsSchema.safeParse({ ...REQUIRED, dumpChunkBlocks: 200_000 }).success).toBe(false);
  });

  it("keeps every dump message at the largest chunk, longest hashes and host tier under MAX_RELAY_MESSAGE_BYTES", async () => {
    // An index that, like the real one, refuses a larger message (ws closes with 1009).
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: MAX_RELAY_MESSAGE_BYTES });
    open.push({ close: () => new Promise((r) => wss.close(r)) });
    await new Promise<void>((r) => (wss.address() ? r() : wss.once("listening", () => r())));
    const frames: { bytes: number; msg: RelayMessage }[] = [];
    const closes: number[] = [];
    wss.on("connection", (ws) => {
      ws.on("close", (code) => closes.push(code));
      ws.on("message", (data: Buffer) => {
        const msg = JSON.parse(data.toString()) as RelayMessage;
        frames.push({ bytes: data.length, msg });
        if (msg.type === "hello") ws.send(JSON.stringify({ type: "welcome", workerId: msg.workerId, epoch: msg.epoch, poolBlockSize: 4 }));
      });
    });
    // 20-character int64s (the longest an engine hash prints), every block a child, all in host memory:
    // the rows after the first chunk go out as `stored` events, the larger encoding.
    const hash = (i: number): string => (-(2n ** 63n) + BigInt(i)).toString();
    const blocks = Array.from({ length: 2 * MAX_DUMP_CHUNK_BLOCKS }, (_, i) => ({ h: hash(i + 1), p: hash(i), l: "ffffffffffffffff", tier: "CPU_PINNED" as const }));
    expect(hash(0)).toHaveLength(20);
    const s = new IndexSession({
      url: relayUrl(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, "w1", "m"),
      token: testCredential("s"),
      hello: () => ({ type: "hello", workerId: "w1", url: "http://127.0.0.1:1", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true }),
      snapshot: () => ({ epoch: 1, seq: 0, blocks }),
      downReason: () => null,
      flushIntervalMs: 1,
      flushBlocks: 1000,
      backoffBaseMs: 1000,
      backoffCapMs: 1000,
      welcomeTimeoutMs: 5000,
      dumpChunkBlocks: RelayOptionsSchema.parse({ ...REQUIRED, dumpChunkBlocks: MAX_DUMP_CHUNK_BLOCKS }).dumpChunkBlocks,
      pingIntervalMs: 60_000,
      log: silentLogger,
    });
    open.push(s);
    s.start();
    await waitFor(() => frames.length === 3 || closes.length > 0, "hello, dump and its continuation");
    expect(closes).toEqual([]);
    const [, dump, rest] = frames as [unknown, { bytes: number; msg: RelayMessage }, { bytes: number; msg: RelayMessage }];
    expect(dump.msg).toMatchObject({ type: "dump", continues: MAX_DUMP_CHUNK_BLOCKS });
    expect(rest.msg.type === "events" && rest.msg.events).toHaveLength(MAX_DUMP_CHUNK_BLOCKS);
    for (const f of [dump, rest]) {
      expect(f.bytes).toBeLessThanOrEqual(MAX_RELAY_MESSAGE_BYTES);
      expect(RelayMessageSchema.safeParse(f.msg).success).toBe(true);
    }
    // The continuation is the larger encoding, close to the limit: the bound is not loose by much.
    expect(rest.bytes).toBeGreaterThan(0.9 * MAX_RELAY_MESSAGE_BYTES);
  });
});
