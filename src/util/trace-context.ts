/**
 * W3C Trace Context (Recommendation, https://www.w3.org/TR/trace-context/): the `traceparent`
 * header, `version-traceid-parentid-flags` in lower-case hex. The edge continues a client's valid
 * trace or starts one, and is one span of it: its own span id goes to every call it makes (the
 * worker's /generate, the media store), so each hop's logs name the same trace id.
 *
 * Parsing follows the spec's rules: version 00 is exactly 55 characters; a higher version (not ff)
 * is read by its first four fields when the 56th character is absent or a dash; trace id and
 * parent id must not be all zeros; anything else is no context (a new trace is started). What
 * goes out is version 00 with only the flag that version defines (sampled), others set to zero.
 */
import { rangeToHex } from "./hex.ts";

/**
 * The response header that names the edge's span to the client: `traceresponse`, same format as
 * `traceparent`, from the Trace Context Level 2 drafts (https://w3c.github.io/trace-context/
 * #traceresponse-header; a draft, not in the Recommendation), which OpenTelemetry's response
 * propagators read. OpenAI clients keep reading `x-request-id`, which the edge sends as well.
 */
export const TRACE_RESPONSE_HEADER = "traceresponse";

const HEADER = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/;
const VERSION_00_LENGTH = 55;
const SAMPLED = 0x01;
const ALL_ZEROS = /^0+$/;

/** A received `traceparent`: the caller's trace, and its span (our parent). */
export interface TraceParent {
  traceId: string;
  parentId: string;
  /** The trace-flags byte as received. */
  flags: number;
}

/** The edge's span of a trace: what goes out in `traceparent` and back in `traceresponse`. */
export interface EdgeTrace {
  traceId: string;
  /** The edge's own span id (a parent id to the calls it makes). */
  spanId: string;
  /** The client's span, when the client sent a valid `traceparent`; null when the edge started the trace. */
  parentId: string | null;
  sampled: boolean;
  /** `traceparent` for the edge's outgoing calls: version 00, this trace, the edge's span. */
  header: string;
}

/** A `traceparent` value, or null when it is absent or invalid by the spec's parsing rules. */
export function parseTraceparent(value: string | null | undefined): TraceParent | null {
  if (!value) return null;
  const m = HEADER.exec(value);
  if (!m) return null;
  const version = m[1]!, traceId = m[2]!, parentId = m[3]!, flags = m[4]!;
  if (version === "ff") return null;
  if (version === "00" ? value.length !== VERSION_00_LENGTH : value.length > VERSION_00_LENGTH && value[VERSION_00_LENGTH] !== "-") return null;
  if (ALL_ZEROS.test(traceId) || ALL_ZEROS.test(parentId)) return null;
  return { traceId, parentId, flags: parseInt(flags, 16) };
}

/** A version-00 `traceparent`. */
export function formatTraceparent(traceId: string, spanId: string, sampled: boolean): string {
  return `00-${traceId}-${spanId}-${sampled ? "01" : "00"}`;
}

/** Fills a buffer with random bytes (crypto.getRandomValues by default). */
export type RandomBytes = (bytes: Uint8Array) => void;

const cryptoRandom: RandomBytes = (b) => {
  crypto.getRandomValues(b);
};

/** Most bytes one crypto.getRandomValues call fills (Web Crypto: a QuotaExceededError past it). */
const MAX_RANDOM_DRAW_BYTES = 65_536;

/**
 * Random bytes drawn in bulk and handed out once each: one runtime call fills the pool for many
 * traces instead of one call per request. Every id takes bytes no other id took (a refill discards
 * what is left rather than reuse it), so ids stay as unpredictable as the source's bytes: seeing
 * some ids tells nothing of the others (crypto.getRandomValues is a CSPRNG).
 */
export class RandomPool {
  readonly #random: RandomBytes;
  readonly #size: number;
  #bytes: Uint8Array | null = null;
  /** The next unused byte; the pool is refilled when fewer than a take's bytes are left. */
  #next = 0;

  /** `size` bytes per draw of `random` (1 to 65 536: crypto.getRandomValues' limit; else a RangeError). */
  constructor(random: RandomBytes, size: number) {
    if (!Number.isInteger(size) || size < 1 || size > MAX_RANDOM_DRAW_BYTES) throw new RangeError(`RandomPool size ${size}: not 1 to ${MAX_RANDOM_DRAW_BYTES} bytes`);
    this.#random = random;
    this.#size = size;
  }

  /** The pool's bytes (`take` says which are yours). */
  get bytes(): Uint8Array {
    return this.#bytes!;
  }

  /**
   * Reserves `n` unused bytes: their offset in `bytes`, which hold them until the next take.
   * A RangeError when n > size: no draw could ever hold them (a caller retrying would spin forever).
   */
  take(n: number): number {
    if (this.#bytes === null || this.#next + n > this.#size) {
      if (n > this.#size) throw new RangeError(`RandomPool: ${n} bytes taken from a pool of ${this.#size}`);
      // Allocated on first use: a Worker's global scope must not draw randomness.
      this.#bytes ??= new Uint8Array(this.#size);
      this.#random(this.#bytes);
      this.#next = 0;
    }
    const at = this.#next;
    this.#next += n;
    return at;
  }
}

/** Bytes of random ids for 128 new traces per draw (24 each). */
const TRACE_POOL_BYTES = 3072;
const tracePool = new RandomPool(cryptoRandom, TRACE_POOL_BYTES);

/** Whether `b[from..to)` is all zeros (an invalid id). */
function allZeros(b: Uint8Array, from: number, to: number): boolean {
  let any = 0;
  for (let i = from; i < to; i++) any |= b[i]!;
  return any === 0;
}

const SPAN_ID_BYTES = 8;
const TRACE_ID_BYTES = 16;

/**
 * The edge's span for a request carrying `incoming` (its `traceparent` header, or null): the
 * client's trace when valid, else a new random trace. A new trace is marked sampled: the edge
 * records every request's trace id with its routing receipt. A new trace's id and the span id come
 * from one take of `pool` (span id first), taken again while either is all zeros.
 */
export function startEdgeTrace(incoming: string | null, pool: RandomPool = tracePool): EdgeTrace {
  const parent = parseTraceparent(incoming);
  const n = parent ? SPAN_ID_BYTES : SPAN_ID_BYTES + TRACE_ID_BYTES;
  let at: number;
  do at = pool.take(n);
  while (allZeros(pool.bytes, at, at + SPAN_ID_BYTES) || (!parent && allZeros(pool.bytes, at + SPAN_ID_BYTES, at + n)));
  const b = pool.bytes;
  const spanId = rangeToHex(b, at, at + SPAN_ID_BYTES);
  const traceId = parent?.traceId ?? rangeToHex(b, at + SPAN_ID_BYTES, at + n);
  const sampled = parent ? (parent.flags & SAMPLED) !== 0 : true;
  return { traceId, spanId, parentId: parent?.parentId ?? null, sampled, header: formatTraceparent(traceId, spanId, sampled) };
}
