/**
 * Decoding of SGLang's KV-event messages (ZMQ PUB multipart `[topic, seq u64 BE, msgpack batch]`,
 * batch = `[ts, events, attn_dp_rank]`; sgl-project/sglang python/sglang/srt/disaggregation/kv_events.py
 * @9d147fd: payload L61-127, frames L331-338; Dynamo's reader: ai-dynamo/dynamo
 * lib/kv-router/src/zmq_wire/deserialize.rs).
 *
 * Pure and total: malformed input never throws; whatever cannot be used is returned in `dropped`
 * with a reason, so a relay loop can count it and carry on. Tolerated shapes:
 *  - events as tagged tuples (`["BlockStored", …]`, msgspec array_like) or tagged maps (`{type: …}`);
 *  - block hashes as signed or unsigned 64-bit ints (or small ints): reinterpreted as signed int64;
 *  - trailing fields omitted (msgspec omit_defaults: medium missing → "GPU") or added (ignored);
 *  - `BlockStoredWithMetadata` (SGLang kv_events.py: a BlockStored with a trailing
 *    `metadata: BlockStoredMetadata{cache_salt: str}` map, sent only for salted requests): the salt
 *    is returned as `cacheSalt` (null when absent) so the relay keeps salted blocks apart;
 *  - EAGLE bigram token ids (SGLang mem_cache/events.py `_record_store_event`: with `is_bigram`
 *    radix keys each page is sent as pairs `(t_j, t_{j+1})`): mapped to the tokens the page holds,
 *    the first element of every pair (docs/relay.md §EAGLE); pairs that do not chain are dropped.
 * Events keep their `medium` (SGLang's StorageMedium: "GPU", "CPU_PINNED", "DISK", "EXTERNAL";
 * kv_events.py @9d147fd L82-88, filled on every event since PR #18205); HiCache reports its host tier
 * as CPU_PINNED (mem_cache/hiradix_cache.py @9d147fd `_finish_write_through_ack` L853-862,
 * `evict_host` L1207-1236). Which tiers are tracked is the consumer's choice (services/relay).
 */
import { Decoder } from "@msgpack/msgpack";
import { isRecord } from "../util/is-record.ts";

export const GPU_MEDIUM = "GPU";

export interface BlockStoredEvent {
  type: "BlockStored";
  /** Engine block hashes (signed int64), one per block. */
  blockHashes: bigint[];
  parentBlockHash: bigint | null;
  tokenIds: number[];
  /** Tokens per block as the engine declared it; null when absent. */
  blockSize: number | null;
  medium: string;
  /** SGLang's cache_salt from BlockStoredWithMetadata; null or absent for unsalted blocks. */
  cacheSalt?: string | null;
  /** True when the engine sent EAGLE bigram pairs (`tokenIds` then holds each pair's first token). */
  bigram?: boolean;
}

export interface BlockRemovedEvent {
  type: "BlockRemoved";
  blockHashes: bigint[];
  medium: string;
}

export interface AllBlocksClearedEvent {
  type: "AllBlocksCleared";
}

export type KvCacheEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

export type DecodeDropReason =
  | "frame_count"
  | "bad_seq"
  | "bad_msgpack"
  | "bad_batch"
  | "bad_event"
  | "unknown_tag"
  | "bad_bigram";

export interface DecodeDrop {
  reason: DecodeDropReason;
  detail: string;
}

export interface DecodedKvBatch {
  /** Publisher wall time in seconds (time.time()); null when absent or unusable. */
  ts: number | null;
  attnDpRank: number | null;
  events: KvCacheEvent[];
  dropped: DecodeDrop[];
}

export interface DecodedKvMessage extends DecodedKvBatch {
  topic: string;
  /** Batch sequence number; null when the frame is unusable (then nothing else was decoded). */
  seq: number | null;
}

/** The replay end marker: seq -1 as a signed 8-byte big-endian integer. */
export const REPLAY_END_SEQ = -1;

const decoder = new Decoder({ useBigInt64: true });
const textDecoder = new TextDecoder();

/**
 * Reads an 8-byte big-endian sequence number. Sequence numbers are unsigned, except the replay end
 * marker (-1); values above 2^53 cannot occur in practice and are rejected (null) like bad lengths.
 */
export function decodeSeq(frame: Uint8Array): number | null {
  if (frame.byteLength !== 8) return null;
  const v = new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
  if (v === -1n) return REPLAY_END_SEQ;
  if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  return Number(v);
}

export function encodeSeq(seq: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(seq), false);
  return out;
}

/** Decodes one whole ZMQ message: `[topic, seq, payload]`. */
export function decodeKvEventMessage(frames: readonly Uint8Array[]): DecodedKvMessage {
  if (frames.length !== 3) {
    return emptyMessage("", null, { reason: "frame_count", detail: `expected 3 frames, got ${frames.length}` });
  }
  const topic = textDecoder.decode(frames[0]!);
  const seq = decodeSeq(frames[1]!);
  if (seq === null || seq < 0) {
    return emptyMessage(topic, null, { reason: "bad_seq", detail: `seq frame of ${frames[1]!.byteLength} bytes` });
  }
  return { topic, seq, ...decodeKvEventBatch(frames[2]!) };
}

function emptyMessage(topic: string, seq: number | null, drop: DecodeDrop): DecodedKvMessage {
  return { topic, seq, ts: null, attnDpRank: null, events: [], dropped: [drop] };
}

/** Decodes one msgpack batch payload. */
export function decodeKvEventBatch(payload: Uint8Array): DecodedKvBatch {
  const out: DecodedKvBatch = { ts: null, attnDpRank: null, events: [], dropped: [] };
  let root: unknown;
  try {
    root = decoder.decode(payload);
  } catch (e) {
    out.dropped.push({ reason: "bad_msgpack", detail: e instanceof Error ? e.message : String(e) });
    return out;
  }
  let ts: unknown, events: unknown, rank: unknown;
  if (Array.isArray(root)) {
    [ts, events, rank] = root;
  } else if (isMap(root)) {
    // Not what msgspec array_like emits, but cheap to accept.
    ts = root["ts"];
    events = root["events"];
    rank = root["attn_dp_rank"] ?? root["data_parallel_rank"];
  } else {
    out.dropped.push({ reason: "bad_batch", detail: `batch is ${describe(root)}` });
    return out;
  }
  if (!Array.isArray(events)) {
    out.dropped.push({ reason: "bad_batch", detail: `events is ${describe(events)}` });
    return out;
  }
  out.ts = toFiniteNumber(ts);
  const r = toSafeInt(rank);
  out.attnDpRank = r !== null && r >= 0 ? r : null;
  for (const raw of events) {
    const ev = decodeEvent(raw, out.dropped);
    if (ev) out.events.push(ev);
  }
  return out;
}

/** Field names of each event's positional form, after the tag. */
const STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "metadata"] as const;
/** Longest cache_salt accepted from an event (the edge sends 43 characters; SGLang sets no bound). */
export const MAX_CACHE_SALT_CHARS = 256;
const REMOVED_FIELDS = ["block_hashes", "medium"] as const;

function decodeEvent(raw: unknown, dropped: DecodeDrop[]): KvCacheEvent | null {
  let tag: unknown;
  let get: (name: string, index: number) => unknown;
  if (Array.isArray(raw)) {
    tag = raw[0];
    get = (_name, index) => raw[index + 1];
  } else if (isMap(raw)) {
    tag = raw["type"];
    get = (name) => raw[name];
  } else {
    dropped.push({ reason: "bad_event", detail: `event is ${describe(raw)}` });
    return null;
  }
  try {
    switch (tag) {
      case "BlockStored":
        return decodeStored(get);
      case "BlockRemoved":
        return decodeRemoved(get);
      case "AllBlocksCleared":
        return { type: "AllBlocksCleared" };
      default:
        dropped.push({ reason: "unknown_tag", detail: `tag ${describe(tag)}` });
        return null;
    }
  } catch (e) {
    const reason = e instanceof EventShapeError ? e.reason : "bad_event";
    dropped.push({ reason, detail: `${String(tag)}: ${e instanceof Error ? e.message : String(e)}` });
    return null;
  }
}

class EventShapeError extends Error {
  readonly reason: DecodeDropReason;
  constructor(reason: DecodeDropReason, message: string) {
    super(message);
    this.reason = reason;
  }
}

function decodeStored(get: (name: string, index: number) => unknown): BlockStoredEvent {
  const blockHashes = hashList(get(STORED_FIELDS[0], 0), "block_hashes");
  const parentRaw = get(STORED_FIELDS[1], 1);
  const parentBlockHash = parentRaw === null || parentRaw === undefined ? null : toInt64(parentRaw, "parent_block_hash");
  const { tokens: tokenIds, bigram } = tokenList(get(STORED_FIELDS[2], 2));
  const bsRaw = get(STORED_FIELDS[3], 3);
  let blockSize: number | null = null;
  if (bsRaw !== null && bsRaw !== undefined) {
    blockSize = toSafeInt(bsRaw);
    if (blockSize === null || blockSize <= 0) throw new EventShapeError("bad_event", `block_size ${describe(bsRaw)}`);
  }
  const salt = cacheSalt(get(STORED_FIELDS[6], 6));
  return {
    type: "BlockStored",
    blockHashes,
    parentBlockHash,
    tokenIds,
    blockSize,
    medium: medium(get(STORED_FIELDS[5], 5)),
    ...(salt !== null ? { cacheSalt: salt } : {}),
    ...(bigram ? { bigram } : {}),
  };
}

/**
 * BlockStoredMetadata is a plain msgspec struct (not array_like): a map `{cache_salt: str}`. Any
 * other value in that position is some other engine's trailing field (vLLM puts `lora_name` there)
 * and is ignored like every unknown trailing field; a map with a bad salt voids the event.
 */
function cacheSalt(raw: unknown): string | null {
  if (!isMap(raw)) return null;
  const salt = raw["cache_salt"];
  if (salt === null || salt === undefined) return null;
  if (typeof salt !== "string" || salt.length > MAX_CACHE_SALT_CHARS)
    throw new EventShapeError("bad_event", `metadata.cache_salt is ${describe(salt)}`);
  return salt;
}

function decodeRemoved(get: (name: string, index: number) => unknown): BlockRemovedEvent {
  const blockHashes = hashList(get(REMOVED_FIELDS[0], 0), "block_hashes");
  return { type: "BlockRemoved", blockHashes, medium: medium(get(REMOVED_FIELDS[1], 1)) };
}

function medium(raw: unknown): string {
  if (raw === null || raw === undefined) return GPU_MEDIUM;
  if (typeof raw !== "string") throw new EventShapeError("bad_event", `medium ${describe(raw)}`);
  return raw;
}

function hashList(raw: unknown, field: string): bigint[] {
  if (!Array.isArray(raw)) throw new EventShapeError("bad_event", `${field} is ${describe(raw)}`);
  return raw.map((v) => toInt64(v, field));
}

/** Engine hashes are i64 on the wire but some encoders write u64: keep the bits, read them signed. */
function toInt64(v: unknown, field: string): bigint {
  if (typeof v === "bigint") return BigInt.asIntN(64, v);
  if (typeof v === "number" && Number.isSafeInteger(v)) return BigInt.asIntN(64, BigInt(v));
  throw new EventShapeError("bad_event", `${field} holds ${describe(v)}`);
}

function tokenList(raw: unknown): { tokens: number[]; bigram: boolean } {
  if (!Array.isArray(raw)) throw new EventShapeError("bad_event", `token_ids is ${describe(raw)}`);
  if (raw.length > 0 && Array.isArray(raw[0])) return { tokens: bigramFirsts(raw), bigram: true };
  const out = new Array<number>(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const t = tokenId(raw[i]);
    if (t === null) throw new EventShapeError(Array.isArray(raw[i]) ? "bad_bigram" : "bad_event", `token_ids[${i}] is ${describe(raw[i])}`);
    out[i] = t;
  }
  return { tokens: out, bigram: false };
}

function tokenId(v: unknown): number | null {
  if (typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 0xffffffff) return v;
  if (typeof v === "bigint" && v >= 0n && v <= 0xffffffffn) return Number(v);
  return null;
}

/**
 * EAGLE pages: `[(t_j, t_{j+1}) …]`. The page holds the KV of `t_j` for each pair, so the router's
 * block is the first elements; consecutive pairs must overlap by one token (b_j = a_{j+1}), as
 * SGLang builds them from one raw sequence.
 */
function bigramFirsts(raw: unknown[]): number[] {
  const out = new Array<number>(raw.length);
  let prevSecond: number | null = null;
  for (let i = 0; i < raw.length; i++) {
    const pair = raw[i];
    const a = Array.isArray(pair) && pair.length === 2 ? tokenId(pair[0]) : null;
    const b = Array.isArray(pair) && pair.length === 2 ? tokenId(pair[1]) : null;
    if (a === null || b === null) throw new EventShapeError("bad_bigram", `token_ids[${i}] is ${describe(pair)}, expected a pair of token ids`);
    if (prevSecond !== null && a !== prevSecond) throw new EventShapeError("bad_bigram", `token_ids[${i}] does not continue the previous pair`);
    out[i] = a;
    prevSecond = b;
  }
  return out;
}

function toSafeInt(v: unknown): number | null {
  if (typeof v === "number" && Number.isSafeInteger(v)) return v;
  if (typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) {
    return Number(v);
  }
  return null;
}

function toFiniteNumber(v: unknown): number | null {
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (typeof v === "bigint") return Number(v);
  return null;
}

/** A decoded msgpack map: a record, not a bin (Uint8Array). */
function isMap(v: unknown): v is Record<string, unknown> {
  return isRecord(v) && !(v instanceof Uint8Array);
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return `array(${v.length})`;
  if (v instanceof Uint8Array) return `bytes(${v.byteLength})`;
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? v.slice(0, 40) + "…" : v);
  if (typeof v === "object") return "map";
  return `${typeof v} ${String(v)}`;
}
