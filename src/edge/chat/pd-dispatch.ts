/**
 * A prefill/decode pair's dispatch: the same `/generate` body, with SGLang's bootstrap fields added,
 * sent to the prefill and the decode worker concurrently; the decode's response is the answer and
 * the prefill's is read and dropped. That is what SGLang's own routers do
 * (sgl-model-gateway/src/routers/http/pd_router.rs L1562-1655 and `inject_bootstrap_into_value`
 * L238-296; python/sglang/srt/disaggregation/mini_lb.py L356-436; sgl-project/sglang @9d147fd).
 * The fields are GenerateReqInput's `bootstrap_host`, `bootstrap_port`, `bootstrap_room`
 * (python/sglang/srt/managers/io_struct.py L245-249). Only the edge sets them: clients' are refused
 * (src/api/validate.ts).
 */
import { parseRankTarget, type PdDecision } from "../../routing-index/front-door.ts";
import type { EdgeFetch } from "./media-deps.ts";

/** SGLang stores the room as uint64 (int64 on NPU) and reads 0 as "metadata not landed" (disaggregation/utils.py L117-126, L248-254). */
const ROOM_MASK = (1n << 63n) - 1n;
/** A scalar room with n > 1 becomes room + i (io_struct.py L669-675): headroom below 2^63 for that. */
const MAX_ROOM = ROOM_MASK - 1024n;
/** Rooms of this isolate's requests in flight: a room must be unique among them (decode.py L1716-1734). */
const roomsInFlight = new Set<bigint>();

/**
 * A random room in [1, 2^63 − 1025], unique among this isolate's requests in flight; release it when
 * done. With `rank` of a prefill with `dpSize` ranks, the room is ≡ rank (mod dpSize): a DP prefill
 * runs a request on rank `room % dp_size` (`--load-balance-method auto` → `follow_bootstrap_room`,
 * server_args.py L3086-3101 @9d147fd) and fails one dispatched elsewhere with "follow_bootstrap_room
 * conflict" (disaggregation/common/conn.py `CommonKVSender.__init__` @ad7733e4); the decode reads the
 * prefill's rank the same way when it is not told (disaggregation/decode.py L549-566 @9d147fd).
 */
export function takeBootstrapRoom(random: () => bigint = randomU64, rank: { rank: number; dpSize: number } | null = null): { room: bigint; release(): void } {
  for (;;) {
    let room = random() & ROOM_MASK;
    if (rank && rank.dpSize > 1) room = room - (room % BigInt(rank.dpSize)) + BigInt(rank.rank);
    if (room === 0n || room > MAX_ROOM || roomsInFlight.has(room)) continue;
    roomsInFlight.add(room);
    return { room, release: () => void roomsInFlight.delete(room) };
  }
}

function randomU64(): bigint {
  return crypto.getRandomValues(new BigUint64Array(1))[0]!;
}

export interface BootstrapFields {
  host: string;
  port: number;
  room: bigint;
  /**
   * The prefill's DP rank when the index chose one: GenerateReqInput's `disagg_prefill_dp_rank`
   * (managers/io_struct.py @9d147fd), which the decode takes as the prefill rank to pull the KV from,
   * as sgl-model-gateway's and smg's PD routers send it (pd_router.rs L298-319; smg pd_router.rs L400-420).
   */
  prefillDpRank?: number | null;
}

/** The prefill's host as SGLang's bootstrap client dials it: the hostname, IPv6 without brackets. */
export function bootstrapHostOf(prefillUrl: string): string {
  return new URL(prefillUrl).hostname.replace(/^\[(.*)\]$/, "$1");
}

/** The body with the bootstrap fields appended (the room as a JSON integer beyond 2^53, written exactly). */
export async function withBootstrap(body: Blob, f: BootstrapFields): Promise<Blob> {
  const last = await body.slice(-1).text();
  if (last !== "}") throw new Error("generate body is not a JSON object");
  const empty = body.size === 2;
  const rank = f.prefillDpRank ?? null;
  const fields = `"bootstrap_host":${JSON.stringify(f.host)},"bootstrap_port":${f.port},"bootstrap_room":${f.room.toString()}${rank === null ? "" : `,"disagg_prefill_dp_rank":${rank}`}}`;
  return new Blob([body.slice(0, -1), empty ? "" : ",", fields], { type: body.type });
}

/** Why a pair failed before the answer's first byte, and which of its workers to blame. */
export class PairSideFailed extends Error {
  readonly workerId: string;
  readonly unreachable: boolean;
  /** The prefill answered a client error (4xx): its status and text, for the client. */
  readonly clientError: { status: number; text: string } | null;
  constructor(message: string, workerId: string, unreachable: boolean, clientError: { status: number; text: string } | null = null) {
    super(message);
    this.workerId = workerId;
    this.unreachable = unreachable;
    this.clientError = clientError;
  }
}

export interface PairInput {
  fetch: EdgeFetch;
  prefill: { workerId: string; url: string; headers: Record<string, string> };
  decode: { workerId: string; url: string; headers: Record<string, string> };
  pd: PdDecision;
  prefillBody: Blob;
  decodeBody: Blob;
  /** Aborts both sides (client gone, deadline). */
  signal: AbortSignal;
  maxPrefillBodyBytes: number;
  /** The prefill's whole exchange ends by then at the latest (its room is held until it ends). */
  prefillDeadlineMs: number;
}

/**
 * Sends both sides; resolves with the decode's response once its headers are in. A prefill that
 * fails meanwhile (transport error or non-2xx) aborts the decode, as sgl-model-gateway does
 * (pd_router.rs L697-760): the pair throws PairSideFailed naming the prefill. A decode that fails
 * aborts the prefill and names the decode. The returned `prefill` settles when the prefill's answer
 * has been read (or failed); nothing waits on it after the decode's first byte.
 */
export async function sendPair(input: PairInput): Promise<{ decode: Response; room: bigint; prefill: Promise<void> }> {
  // The prefill target's rank (`<worker>#<rank>`): the room follows it, and the decode is told it.
  const { rank } = parseRankTarget(input.prefill.workerId);
  const ranked = rank !== null && input.pd.prefillDpSize > 1 ? { rank, dpSize: input.pd.prefillDpSize } : null;
  const { room, release } = takeBootstrapRoom(undefined, ranked);
  const fields: BootstrapFields = { host: bootstrapHostOf(input.prefill.url), port: input.pd.bootstrapPort, room, prefillDpRank: ranked ? rank : null };
  const [prefillBody, decodeBody] = await Promise.all([withBootstrap(input.prefillBody, fields), withBootstrap(input.decodeBody, fields)]);
  const prefillAbort = new AbortController();
  const decodeAbort = new AbortController();
  const prefillSignal = AbortSignal.any([input.signal, prefillAbort.signal, AbortSignal.timeout(input.prefillDeadlineMs)]);
  const decodeSignal = AbortSignal.any([input.signal, decodeAbort.signal]);
  let prefillFailure: PairSideFailed | null = null;
  const prefill = (async () => {
    try {
      const res = await input.fetch(`${input.prefill.url}/generate`, { method: "POST", headers: input.prefill.headers, body: prefillBody, signal: prefillSignal, redirect: "manual" });
      const text = await readCapped(res, input.maxPrefillBodyBytes);
      if (!res.ok) {
        const clientError = res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429 ? { status: res.status, text } : null;
        throw new PairSideFailed(`prefill answered HTTP ${res.status}`, input.prefill.workerId, false, clientError);
      }
    } catch (err) {
      if (input.signal.aborted || prefillAbort.signal.aborted) return;
      // Past its deadline the prefill is abandoned; the decode has its own deadlines.
      if (prefillSignal.aborted) return;
      prefillFailure = err instanceof PairSideFailed ? err : new PairSideFailed(err instanceof Error ? err.message : String(err), input.prefill.workerId, true);
      decodeAbort.abort();
    }
  })().finally(release);
  try {
    const decode = await input.fetch(`${input.decode.url}/generate`, { method: "POST", headers: input.decode.headers, body: decodeBody, signal: decodeSignal, redirect: "manual" });
    return { decode, room, prefill };
  } catch (err) {
    if (prefillFailure) throw prefillFailure;
    if (input.signal.aborted) throw err;
    prefillAbort.abort();
    throw new PairSideFailed(err instanceof Error ? err.message : String(err), input.decode.workerId, true);
  }
}

/** Reads a response body up to `max` bytes (the prefill's answer is only checked, never relayed). */
async function readCapped(res: Response, max: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      break;
    }
    text += decoder.decode(value, { stream: true });
  }
  return text + decoder.decode();
}
