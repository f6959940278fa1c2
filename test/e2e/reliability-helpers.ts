/**
 * Helpers for the reliability e2e tests: index-vs-engine parity (the index's local hashes for a
 * worker against hashes computed from the simulator's own cache dump), a lossy ZMQ forwarder that
 * sits between a worker's KV-event PUB and its relay (drops messages on demand, injects junk), and
 * log capture from the fleet's children.
 */
import * as zmq from "zeromq";
import { localBlockHash, namespacedLocalHash, namespaceTag } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../src/util/hash.ts";
import type { Fleet } from "../../scripts/local-fleet.ts";

/** The worker's true block set, as local hashes in each block's cache namespace (sorted; a multiset: equal blocks may repeat). */
export async function trueLocalHashes(workerUrl: string): Promise<string[]> {
  await initHashing();
  const r = (await (await fetch(`${workerUrl}/debug/cache`)).json()) as { blocks: { tokens: number[]; cacheSalt?: string }[] };
  return r.blocks.map((b) => localHashToHex(namespacedLocalHash(localBlockHash(b.tokens), namespaceTag(b.cacheSalt)))).sort();
}

/** The index's local hashes for a worker, every page of them (pages of 10 000, ascending; a multiset). */
export async function indexLocalHashes(fleet: Fleet, workerId: string): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 1000; pages++) {
    const r = (await fleet.admin(`/admin/workers/${workerId}/local-hashes?model=${encodeURIComponent(fleet.model)}&limit=10000${cursor ? `&cursor=${cursor}` : ""}`)) as { localHashes: string[]; nextCursor: string | null };
    out.push(...r.localHashes);
    cursor = r.nextCursor;
    if (cursor === null) return out;
  }
  throw new Error(`${workerId}: more than 1000 pages of local hashes`);
}

export interface WorkerRow {
  workerId: string;
  url: string;
  epoch: number;
  status: string;
  blocks: number;
  synced: boolean;
  /** The index's blocks for the worker may be wrong (relay lost history, index object full). */
  approximate: boolean;
  contractDigest: string | null;
}

export async function workerRows(fleet: Fleet): Promise<WorkerRow[]> {
  const r = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: WorkerRow[] };
  return r.workers;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until `check` holds; returns the ms it took. Throws with the last `describe()` on timeout. */
export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, describe: () => Promise<string> | string, stepMs = 25): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < timeoutMs) {
    try {
      if (await check()) return Date.now() - start;
    } catch {
      // not reachable yet
    }
    await sleep(stepMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms: ${await describe()}`);
}

/** Waits until the index holds exactly the worker's true block set (non-empty unless allowEmpty). */
export async function waitParity(fleet: Fleet, i: number, timeoutMs = 15_000, allowEmpty = false): Promise<{ ms: number; blocks: number }> {
  const w = fleet.workers[i]!;
  let last = { index: [] as string[], truth: [] as string[] };
  const ms = await waitUntil(
    async () => {
      last = { index: await indexLocalHashes(fleet, w.id), truth: await trueLocalHashes(w.url) };
      return (allowEmpty || last.truth.length > 0) && JSON.stringify(last.index) === JSON.stringify(last.truth);
    },
    timeoutMs,
    () => `${w.id}: index ${last.index.length} blocks, engine ${last.truth.length}; only in index ${last.index.filter((h) => !last.truth.includes(h)).length}, missing ${last.truth.filter((h) => !last.index.includes(h)).length}`,
  );
  return { ms, blocks: last.truth.length };
}

/** ~n words of seeded text (distinct per seed). */
export function words(seed: number, n = 300): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "video", "image", "edge", "index", "latency", "model", "prompt", "relay", "hash", "epoch"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`Doc ${seed}:`];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]!);
  }
  return out.join(" ");
}

/** One chat completion straight to a simulated worker (its cache and KV events change, the edge is not involved). */
export async function direct(worker: { url: string; apiKey: string }, model: string, text: string): Promise<void> {
  const workerUrl = worker.url;
  const r = await fetch(`${workerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${worker.apiKey}` },
    body: JSON.stringify({ model, messages: [{ role: "user", content: text }], max_tokens: 2 }),
  });
  if (r.status !== 200) throw new Error(`worker ${workerUrl}: ${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

/** Fleet log lines, kept for assertions (relay JSON logs: `[relay-w1] {"t":…,"msg":…}`). */
export class LogTap {
  readonly lines: { at: number; line: string }[] = [];
  readonly sink = (line: string): void => {
    this.lines.push({ at: Date.now(), line });
    if (process.env.KVEDGE_E2E_LOGS) console.log(line);
  };

  /** Parsed JSON log records of child `name` (e.g. "relay-w1") with message `msg`. */
  records(name: string, msg: string): Record<string, unknown>[] {
    const prefix = `[${name}] `;
    const out: Record<string, unknown>[] = [];
    for (const { line } of this.lines) {
      if (!line.startsWith(prefix)) continue;
      try {
        const rec = JSON.parse(line.slice(prefix.length)) as Record<string, unknown>;
        if (rec.msg === msg) out.push(rec);
      } catch {
        // not JSON
      }
    }
    return out;
  }
}

/**
 * SUB from a worker's KV-event PUB, PUB to its relay. `drop(n)` loses the next n messages (a
 * network gap between worker and relay); `inject` sends raw frames of its own.
 */
export class LossyForwarder {
  readonly endpoint: string;
  forwarded = 0;
  dropped = 0;
  #dropNext = 0;
  readonly #sub: zmq.Subscriber;
  readonly #pub: zmq.Publisher;
  #loop: Promise<void>;

  private constructor(sub: zmq.Subscriber, pub: zmq.Publisher) {
    this.#sub = sub;
    this.#pub = pub;
    this.endpoint = pub.lastEndpoint!;
    this.#loop = this.#run();
  }

  static async start(upstreamPort: number): Promise<LossyForwarder> {
    const sub = new zmq.Subscriber({ linger: 0 });
    sub.connect(`tcp://127.0.0.1:${upstreamPort}`);
    sub.subscribe();
    const pub = new zmq.Publisher({ linger: 0 });
    await pub.bind("tcp://127.0.0.1:0");
    return new LossyForwarder(sub, pub);
  }

  drop(n: number): void {
    this.#dropNext += n;
  }

  get dropping(): number {
    return this.#dropNext;
  }

  async inject(frames: Uint8Array[]): Promise<void> {
    await this.#pub.send(frames);
  }

  async #run(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        if (this.#dropNext > 0) {
          this.#dropNext--;
          this.dropped++;
          continue;
        }
        await this.#pub.send(frames);
        this.forwarded++;
      }
    } catch {
      // closed
    }
  }

  async close(): Promise<void> {
    this.#sub.close();
    this.#pub.close();
    await this.#loop;
  }
}
