/**
 * Prefill/decode disaggregation in the simulator (SGLang `--disaggregation-mode prefill|decode`,
 * python/sglang/srt/server_args.py L2434-2445 @9d147fd). A router sends the same `/generate` body,
 * with `bootstrap_host`, `bootstrap_port` and `bootstrap_room` (managers/io_struct.py L245-249), to
 * a prefill and a decode worker at once.
 *  - The prefill computes the prompt (its radix cache and KV events as a unified worker's), answers
 *    with its first token, and offers the room's KV on its bootstrap port.
 *  - The decode fetches the room from `bootstrap_host:bootstrap_port`, waiting up to SGLang's
 *    `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` (300 s, environ.py L359-362) and giving up after two
 *    failed connects (SGLang's heartbeat: disaggregation/common/conn.py L1122-1140), then decodes
 *    without a prefill of its own, keeps no radix tree (ChunkCache: no KV events) and reports the
 *    prefill's cached tokens, as SGLang's decode does: it reads them from the prefill's metadata
 *    buffer with the first token (disaggregation/decode.py `_commit_transfer_to_req`, read in the
 *    mirror zyzshishui/sglang @277147c).
 * With DP ranks (`--dp-size N`): a prefill runs a request on `routed_dp_rank`, else on rank
 * `room % N` (`--load-balance-method auto` resolves to `follow_bootstrap_room` on a prefill:
 * server_args.py L3086-3101 @9d147fd), and fails one whose rank is not `room % N` unless the request
 * carries `disagg_prefill_dp_rank` ("follow_bootstrap_room conflict": disaggregation/common/conn.py
 * `CommonKVSender.__init__` @ad7733e4). The room's KV sits at the rank that ran it; a decode pulls it
 * from `disagg_prefill_dp_rank`, else from rank `room % N` (disaggregation/decode.py L549-566 @9d147fd):
 * asking the wrong rank, it waits out its timeout.
 * Simulated: the exchange is one HTTP long-poll (`GET /sim/kv/<room>[?dp_rank=r]` on the bootstrap
 * port), not SGLang's bootstrap protocol, and no KV bytes move; only the peers, the room, the rank and
 * the timing are real.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type DisaggregationMode = "null" | "prefill" | "decode";

/** What the decode learns from its prefill peer for one room. */
export interface RoomKv {
  cachedTokens: number;
  promptTokens: number;
}

/** Rooms a prefill holds for its decode peers at most (oldest dropped beyond). */
const MAX_ROOMS = 10_000;
/** One long-poll's longest wait; the decode polls again until its own timeout. */
const MAX_POLL_MS = 30_000;
/** SGLang's decode heartbeats the prefill's bootstrap server every 5 s and gives up after 2 failures. */
const HEARTBEAT_MS = 5_000;
const HEARTBEAT_FAILURES = 2;

/** The error a PD side answers with (SGLang aborts the request with a message and status 400/500). */
export class PdRequestError extends Error {
  readonly status: 400 | 500;
  constructor(message: string, status: 400 | 500) {
    super(message);
    this.status = status;
  }
}

/** Exact `bootstrap_room` integers of bodies parsed by parseGenerateJson (a room may pass 2^53). */
const exactRooms = new WeakMap<object, bigint>();

/** JSON.parse that keeps each `bootstrap_room` integer exactly (its source text), as Python's json reads it. */
export function parseGenerateJson(text: string): unknown {
  return JSON.parse(text, function (this: object, key: string, value: unknown, ctx?: { source?: string }) {
    if (key === "bootstrap_room" && typeof value === "number" && ctx?.source !== undefined && /^\d{1,20}$/.test(ctx.source)) exactRooms.set(this, BigInt(ctx.source));
    return value;
  });
}

/** A DP rank field of a body (`routed_dp_rank`, `disagg_prefill_dp_rank`); null when absent. */
export function rankField(body: Record<string, unknown>, field: string): number | null {
  const v = body[field];
  if (v === null || v === undefined) return null;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new PdRequestError(`${field} must be a non-negative integer`, 400);
  return v;
}

/** Reads the bootstrap fields of a body; the room exactly when parseGenerateJson read it, else as JSON.parse did. */
export function bootstrapOf(body: Record<string, unknown>, mode: "prefill" | "decode"): { host: string; port: number; room: bigint } {
  const room = body["bootstrap_room"];
  const host = body["bootstrap_host"];
  const port = body["bootstrap_port"];
  if (typeof room !== "number" || !Number.isInteger(room) || room <= 0)
    throw new PdRequestError(`a ${mode} server needs a non-zero integer bootstrap_room (this worker runs --disaggregation-mode ${mode})`, 400);
  if (mode === "decode" && (typeof host !== "string" || host.length === 0 || typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535))
    throw new PdRequestError("a decode server needs bootstrap_host and bootstrap_port of its prefill peer", 400);
  return { host: typeof host === "string" ? host : "", port: typeof port === "number" ? port : 0, room: exactRooms.get(body) ?? BigInt(room) };
}

/** The key of a room's KV at one DP rank of the prefill. */
function roomKey(rank: number, room: bigint): string {
  return `${rank}:${room}`;
}

interface RoomEntry {
  kv: RoomKv | null;
  waiters: Array<(kv: RoomKv | null) => void>;
}

/** The prefill's side: rooms whose KV is ready, served to decode peers on the bootstrap port. */
export class BootstrapServer {
  readonly #rooms = new Map<string, RoomEntry>();
  readonly #ridRooms = new Map<string, string>();
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #port = 0;
  readonly #dpSize: number;

  private constructor(dpSize: number) {
    this.#dpSize = dpSize;
    this.#server = createServer((req, res) => this.#handle(req, res));
    this.#server.on("connection", (s: Socket) => {
      this.#sockets.add(s);
      s.on("close", () => this.#sockets.delete(s));
    });
  }

  static async start(host: string, port: number, dpSize = 1): Promise<BootstrapServer> {
    const b = new BootstrapServer(dpSize);
    await new Promise<void>((resolve, reject) => {
      b.#server.once("error", reject);
      b.#server.listen(port, host, () => resolve());
    });
    b.#port = (b.#server.address() as AddressInfo).port;
    return b;
  }

  get port(): number {
    return this.#port;
  }

  /** The request `rid` belongs to `room` and runs on `rank`: its prefill's end makes the room's KV ready there. */
  expect(rid: string, room: bigint, rank = 0): void {
    this.#ridRooms.set(rid, roomKey(rank, room));
    if (this.#ridRooms.size > MAX_ROOMS) this.#ridRooms.delete(this.#ridRooms.keys().next().value!);
  }

  /** The engine finished a prompt (engine.ts onPrefilled): its room's KV is ready for the decode. */
  prefilled(rid: string, cachedTokens: number, promptTokens: number): void {
    const room = this.#ridRooms.get(rid);
    if (room === undefined) return;
    this.#ridRooms.delete(rid);
    const e = this.#entry(room);
    e.kv = { cachedTokens, promptTokens };
    for (const w of e.waiters.splice(0)) w(e.kv);
  }

  #entry(room: string): RoomEntry {
    let e = this.#rooms.get(room);
    if (!e) {
      e = { kv: null, waiters: [] };
      this.#rooms.set(room, e);
      if (this.#rooms.size > MAX_ROOMS) {
        const [oldest, old] = this.#rooms.entries().next().value!;
        for (const w of old.waiters.splice(0)) w(null);
        this.#rooms.delete(oldest);
      }
    }
    return e;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://bootstrap");
    if (url.pathname === "/health" && req.method === "GET") {
      res.writeHead(200, { "content-length": 0 }).end();
      return;
    }
    const m = /^\/sim\/kv\/(\d{1,20})$/.exec(url.pathname);
    if (!m || req.method !== "GET") {
      res.writeHead(404, { "content-length": 0 }).end();
      return;
    }
    const exact = BigInt(m[1]!);
    const asked = url.searchParams.get("dp_rank");
    // Not told the rank, the decode reads it from the room (decode.py L549-566 @9d147fd).
    const rank = asked !== null && /^\d{1,4}$/.test(asked) ? Number(asked) : Number(exact % BigInt(this.#dpSize));
    const room = roomKey(rank, exact);
    const waitMs = Math.min(MAX_POLL_MS, Math.max(0, Number(url.searchParams.get("wait_ms") ?? "0") || 0));
    const e = this.#entry(room);
    const answer = (kv: RoomKv | null) => {
      if (res.writableEnded) return;
      if (!kv) {
        res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ room: exact.toString(), dp_rank: rank, ready: false }));
        return;
      }
      // Taken: the KV went to this decode (a room serves one decode request).
      this.#rooms.delete(room);
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ room: exact.toString(), dp_rank: rank, cached_tokens: kv.cachedTokens, prompt_tokens: kv.promptTokens }));
    };
    if (e.kv) return answer(e.kv);
    const timer = setTimeout(() => {
      const i = e.waiters.indexOf(answer);
      if (i >= 0) e.waiters.splice(i, 1);
      answer(null);
    }, waitMs);
    e.waiters.push((kv) => {
      clearTimeout(timer);
      answer(kv);
    });
    req.on("close", () => clearTimeout(timer));
  }

  async close(): Promise<void> {
    for (const e of this.#rooms.values()) for (const w of e.waiters.splice(0)) w(null);
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      for (const s of this.#sockets) s.destroy();
    });
  }

  kill(): void {
    for (const s of this.#sockets) s.destroy();
    this.#server.close();
  }
}

/**
 * The decode's side: waits for the room's KV at its prefill peer, up to `timeoutMs`; throws
 * PdRequestError (500) when the peer never has it or cannot be reached twice in a row.
 */
export async function receiveRoomKv(peer: { host: string; port: number; room: bigint; prefillDpRank?: number | null }, timeoutMs: number, signal: AbortSignal): Promise<RoomKv> {
  const deadline = Date.now() + timeoutMs;
  const host = peer.host.includes(":") ? `[${peer.host}]` : peer.host;
  let failures = 0;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    try {
      const res = await fetch(`http://${host}:${peer.port}/sim/kv/${peer.room}?${peer.prefillDpRank != null ? `dp_rank=${peer.prefillDpRank}&` : ""}wait_ms=${Math.min(left, MAX_POLL_MS)}`, { signal: AbortSignal.any([signal, AbortSignal.timeout(Math.min(left, MAX_POLL_MS) + 5_000)]) });
      const body = (await res.json()) as { cached_tokens?: unknown; prompt_tokens?: unknown };
      failures = 0;
      if (res.status === 200 && typeof body.cached_tokens === "number" && typeof body.prompt_tokens === "number")
        return { cachedTokens: body.cached_tokens, promptTokens: body.prompt_tokens };
    } catch (err) {
      if (signal.aborted) throw err;
      if (++failures >= HEARTBEAT_FAILURES)
        throw new PdRequestError(`KV transfer failed: the prefill bootstrap server ${host}:${peer.port} did not answer (room ${peer.room})`, 500);
      await new Promise((r) => setTimeout(r, Math.min(HEARTBEAT_MS, Math.max(0, deadline - Date.now()))));
    }
  }
  throw new PdRequestError(`KV transfer timed out after ${timeoutMs / 1000} s waiting for the prefill peer ${host}:${peer.port} (room ${peer.room})`, 500);
}
