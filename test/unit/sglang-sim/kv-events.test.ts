import { decode } from "@msgpack/msgpack";
import * as zmq from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

interface Batch {
  topic: string;
  seq: bigint;
  raw: Uint8Array;
  ts: number;
  events: unknown[][];
  dpRank: number;
}

function parseBatch(frames: Buffer[]): Batch {
  expect(frames.length).toBe(3);
  const [topic, seq, raw] = frames as [Buffer, Buffer, Buffer];
  expect(seq.length).toBe(8);
  const payload = decode(raw, { useBigInt64: true }) as [number, unknown[][], number];
  expect(Array.isArray(payload)).toBe(true);
  expect(payload.length).toBe(3);
  return {
    topic: topic.toString("utf8"),
    seq: seq.readBigUInt64BE(0),
    raw: new Uint8Array(raw),
    ts: payload[0],
    events: payload[1],
    dpRank: payload[2],
  };
}

const asBig = (v: unknown): bigint => (typeof v === "bigint" ? v : BigInt(v as number));

/** Receives batches on a SUB socket into a queue. */
class Subscriber {
  readonly batches: Batch[] = [];
  private readonly sock = new zmq.Subscriber();
  private waiters: (() => void)[] = [];

  constructor(endpoint: string) {
    this.sock.connect(endpoint);
    this.sock.subscribe();
    void (async () => {
      try {
        for await (const frames of this.sock) {
          this.batches.push(parseBatch(frames as Buffer[]));
          for (const w of this.waiters.splice(0)) w();
        }
      } catch {
        // closed
      }
    })();
  }

  async waitFor(pred: (b: Batch[]) => boolean): Promise<void> {
    while (!pred(this.batches)) await new Promise<void>((r) => this.waiters.push(r));
  }

  close(): void {
    this.sock.close();
  }
}

async function generate(w: SimulatedWorker, body: unknown): Promise<Record<string, any>> {
  const r = await fetch(`${w.url}/generate`, { method: "POST", body: JSON.stringify(body) });
  expect(r.status).toBe(200);
  return (await r.json()) as Record<string, any>;
}

/** PUB/SUB joins asynchronously: send distinct prompts until the subscriber sees a batch. */
async function warmUp(w: SimulatedWorker, sub: Subscriber): Promise<bigint> {
  for (let i = 0; sub.batches.length === 0; i++) {
    await generate(w, { input_ids: Array.from({ length: 33 }, (_, k) => 900_000 + i * 100 + k), sampling_params: { max_new_tokens: 1 } });
    if (sub.batches.length === 0) await new Promise((r) => setTimeout(r, 20));
  }
  // Then wait until the subscriber holds everything published so far (the replay buffer knows).
  const last = (await replayFrom(w.replayEndpoint!, 0n)).at(-1)!.seq;
  await sub.waitFor((b) => b.at(-1)!.seq >= last);
  return last;
}

/** Asks the replay ROUTER for every buffered batch with seq >= start (a DEALER, like a relay). */
async function replayFrom(endpoint: string, start: bigint): Promise<Batch[]> {
  const dealer = new zmq.Dealer();
  dealer.connect(endpoint);
  try {
    const seq = Buffer.alloc(8);
    seq.writeBigUInt64BE(start);
    await dealer.send([Buffer.alloc(0), seq]);
    const out: Batch[] = [];
    for (;;) {
      const frames = (await dealer.receive()) as Buffer[];
      expect(frames.length).toBe(3);
      expect(frames[0]!.length).toBe(0);
      if (frames[1]!.readBigInt64BE(0) === -1n) {
        expect(frames[2]!.length).toBe(0);
        return out;
      }
      out.push(parseBatch([Buffer.alloc(0), frames[1]!, frames[2]!]));
    }
  } finally {
    dealer.close();
  }
}

type BlockMap = Map<bigint, { parent: bigint | null; tokens: number[] }>;

function applyEvents(m: BlockMap, batches: readonly Batch[]): void {
  for (const b of batches) {
    for (const e of b.events) {
      if (e[0] === "BlockStored") {
        const hashes = e[1] as unknown[];
        m.set(asBig(hashes[0]), { parent: e[2] === null ? null : asBig(e[2]), tokens: e[3] as number[] });
      } else if (e[0] === "BlockRemoved") {
        for (const h of e[1] as unknown[]) m.delete(asBig(h));
      } else if (e[0] === "AllBlocksCleared") {
        m.clear();
      }
    }
  }
}

async function debugBlocks(w: SimulatedWorker): Promise<BlockMap> {
  const r = (await (await fetch(`${w.url}/debug/cache`)).json()) as {
    blocks: { hash: string; parent: string | null; tokens: number[] }[];
  };
  return new Map(r.blocks.map((b) => [BigInt(b.hash), { parent: b.parent === null ? null : BigInt(b.parent), tokens: b.tokens }]));
}

beforeAll(async () => {
  await initHashing();
});

describe("KV event wire format", () => {
  let w: SimulatedWorker;
  let sub: Subscriber;

  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16, topic: "kv" });
    sub = new Subscriber(w.kvEndpoint!);
  });

  afterAll(async () => {
    sub.close();
    await w.close();
  });

  it("encodes ts as float64 even for whole seconds and keeps 32-bit-sized hashes compact", () => {
    const raw = encodeEventBatch(1_700_000_000, [{ type: "BlockStored", hash: 5n, parent: null, tokens: [1], blockSize: 1 }], 0);
    expect(raw[0]).toBe(0x93);
    expect(raw[1]).toBe(0xcb);
    const decoded = decode(raw, { useBigInt64: true }) as unknown[];
    expect(decoded).toEqual([1_700_000_000, [["BlockStored", [5], null, [1], 1, null, "GPU"]], 0]);
    const big = encodeEventBatch(1.5, [{ type: "BlockRemoved", hashes: [-3488128144981237669n, 2n ** 62n] }], 3);
    const d2 = decode(big, { useBigInt64: true }) as unknown[];
    expect(d2).toEqual([1.5, [["BlockRemoved", [-3488128144981237669n, 2n ** 62n], "GPU"]], 3]);
    // int64 (0xd3) for the negative hash, uint64 (0xcf) for the positive one, as msgspec writes them.
    expect(Buffer.from(big).includes(Buffer.from([0xd3]))).toBe(true);
    expect(Buffer.from(big).includes(Buffer.from([0xcf]))).toBe(true);
  });

  it("publishes [topic, seq, payload] with per-page BlockStored chained by SGLang's SHA-256 hashes", async () => {
    const base = await warmUp(w, sub);
    const start = sub.batches.length;
    const prompt = Array.from({ length: 70 }, (_, i) => 1000 + i); // 4 full pages + 6 tokens
    const out = await generate(w, { input_ids: prompt, sampling_params: { max_new_tokens: 20, ignore_eos: true } });
    const outputIds = out.output_ids as number[];
    // prompt + output whose KV exists = 70 + 19 = 89 tokens → 5 pages in the tree.
    const full = prompt.concat(outputIds.slice(0, -1));
    const expected = engineBlockHashes(full.slice(0, 80), 16).hashes;
    await sub.waitFor((b) => b.slice(start).flatMap((x) => x.events).filter((e) => e[0] === "BlockStored").length >= 5);

    const mine = sub.batches.slice(start);
    mine.forEach((b, i) => {
      expect(b.topic).toBe("kv");
      expect(b.seq).toBe(base + 1n + BigInt(i));
      expect(typeof b.ts).toBe("number");
      expect(Math.abs(b.ts - Date.now() / 1000)).toBeLessThan(60);
      expect(b.dpRank).toBe(0);
      expect(b.raw[1]).toBe(0xcb); // float64 ts
    });
    const stored = mine.flatMap((b) => b.events).filter((e) => e[0] === "BlockStored");
    expect(stored.length).toBe(5);
    stored.forEach((e, k) => {
      expect(e.length).toBe(7);
      expect((e[1] as unknown[]).map(asBig)).toEqual([expected[k]]);
      expect(e[2] === null ? null : asBig(e[2])).toBe(k === 0 ? null : expected[k - 1]);
      expect(e[3]).toEqual(full.slice(k * 16, (k + 1) * 16));
      expect(e[4]).toBe(16);
      expect(e[5]).toBe(null);
      expect(e[6]).toBe("GPU");
    });
    // The prompt's pages are stored right after prefill, the output page at finish: two steps.
    expect(mine.length).toBe(2);
    expect(mine[0]!.events.length).toBe(4);
  });

  it("the block set rebuilt from events equals /debug/cache", async () => {
    await warmUp(w, sub);
    const prefix = Array.from({ length: 48 }, (_, i) => 5000 + i);
    for (let i = 0; i < 5; i++) {
      await generate(w, {
        input_ids: prefix.concat(Array.from({ length: 20 + i * 7 }, (_, k) => 7000 + i * 50 + k)),
        sampling_params: { max_new_tokens: 5 },
      });
    }
    const truth = await debugBlocks(w);
    expect(truth.size).toBeGreaterThan(0);
    // The SUB joined late; a relay fills the gap from the replay socket, starting at seq 0.
    const replayed = await replayFrom(w.replayEndpoint!, 0n);
    replayed.forEach((b, i) => expect(b.seq).toBe(BigInt(i)));
    const rebuilt: BlockMap = new Map();
    applyEvents(rebuilt, replayed);
    expect(rebuilt).toEqual(truth);
  });

  it("replay from a later seq returns exactly the SUB's batches from that seq on", async () => {
    await warmUp(w, sub);
    await generate(w, { input_ids: Array.from({ length: 40 }, (_, i) => 31_000 + i), sampling_params: { max_new_tokens: 3 } });
    const all = await replayFrom(w.replayEndpoint!, 0n);
    const last = all.at(-1)!.seq;
    await sub.waitFor((b) => b.at(-1)!.seq >= last);
    const from = sub.batches.at(-3)!.seq;
    const got = await replayFrom(w.replayEndpoint!, from);
    const expected = sub.batches.filter((b) => b.seq >= from);
    expect(got.map((b) => b.seq)).toEqual(expected.map((b) => b.seq));
    got.forEach((b, i) => expect(Buffer.from(b.raw).equals(Buffer.from(expected[i]!.raw))).toBe(true));
    // A start beyond the newest batch yields only the end marker.
    expect(await replayFrom(w.replayEndpoint!, last + 1n)).toEqual([]);
  });

  it("flush_cache publishes AllBlocksCleared", async () => {
    await warmUp(w, sub);
    const n = sub.batches.length;
    const r = await fetch(`${w.url}/flush_cache`, { method: "POST" });
    expect(r.status).toBe(200);
    expect(await r.text()).toMatch(/^Cache flushed\./);
    await sub.waitFor((b) => b.length > n);
    expect(sub.batches[n]!.events).toEqual([["AllBlocksCleared"]]);
    expect((await debugBlocks(w)).size).toBe(0);
  });
});

describe("KV events under eviction", () => {
  it("evicted nodes arrive as BlockRemoved and events keep matching the true block set", async () => {
    const w = await startSimulatedWorker({ timingPreset: "instant", pageSize: 8, capacityTokens: 256 });
    const sub = new Subscriber(w.kvEndpoint!);
    try {
      await warmUp(w, sub);
      for (let i = 0; i < 12; i++) {
        await generate(w, {
          input_ids: Array.from({ length: 60 }, (_, k) => 40_000 + i * 1000 + k),
          sampling_params: { max_new_tokens: 8, ignore_eos: true },
        });
      }
      const truth = await debugBlocks(w);
      expect(w.engine.cache.totalTokens).toBeLessThanOrEqual(256);
      const replayed = await replayFrom(w.replayEndpoint!, 0n);
      const removed = replayed.flatMap((b) => b.events).filter((e) => e[0] === "BlockRemoved");
      expect(removed.length).toBeGreaterThan(0);
      for (const e of removed) {
        expect(e.length).toBe(3);
        expect(e[2]).toBe("GPU");
        expect((e[1] as unknown[]).length).toBeGreaterThan(0);
      }
      const rebuilt: BlockMap = new Map();
      applyEvents(rebuilt, replayed);
      expect(rebuilt).toEqual(truth);
      // The SUB stream (from its first batch on) agrees with the replay byte for byte.
      for (const b of sub.batches) {
        const r = replayed.find((x) => x.seq === b.seq);
        if (r) expect(Buffer.from(r.raw).equals(Buffer.from(b.raw))).toBe(true);
      }
    } finally {
      sub.close();
      await w.close();
    }
  });
});
