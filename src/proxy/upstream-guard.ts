/**
 * One exchange with a worker: deadlines and caps on its answer, and cancellation both ways. An
 * exchange (`openExchange`), whose signal the upstream fetch takes:
 * - aborts the request when the worker's headers have not come within `headersMs` (or by the
 *   total deadline);
 * - cuts the body with UpstreamTimeoutError when no chunk arrives for `idleMs` (a stalled stream)
 *   or when the total deadline passes;
 * - cuts it with UpstreamError when more than `maxBytes` arrive (non-streamed answers), or at once
 *   when the worker's Content-Length says more;
 * - on `cancel` (the client went away, or the reader stopped) cancels the upstream read and aborts
 *   the upstream request, so the worker's connection closes and SGLang aborts the request instead
 *   of generating into the void;
 * - when the client's request signal aborts or the total deadline passes while nobody reads (a
 *   client that stopped reading holds the reader back), cuts at once and tells `onCut`, so whatever
 *   reads from it ends and settles without waiting for a read.
 * Every upstream failure becomes a KvedgeError (a read rejects with it): nothing escapes as an
 * uncaught rejection (workerd's `Network connection lost.` on a dropped connection included).
 *
 * One watchdog timer covers the headers timeout, the idle limit and the deadline: armed at the
 * start for the earliest any of them can fall due, it re-arms itself for what is left when it fires
 * early, so an exchange that ends within its first limit sets one timer and clears it once.
 * A complete answer with a Content-Length within the cap, no content coding and no
 * Transfer-Encoding is read by the runtime in one call: framed by Content-Length alone, the HTTP
 * layer reads no more than that (a shorter body fails the read). With Transfer-Encoding the
 * chunked framing wins over Content-Length (RFC 9112 §6.3) and workerd reads to the last chunk
 * however long, still showing the Content-Length (measured, Miniflare 4.20260730.0: declared 10,
 * 20 MiB read), so such a body is read here, chunk by chunk under the cap. The exchange's signal
 * still cuts the one-call read (workerd rejects it with the
 * abort's reason); its idle limit counts from the start of that read (SGLang's non-streamed
 * `/generate` returns the finished result, one JSON body with its Content-Length: generate_request,
 * python/sglang/srt/entrypoints/http_server.py, sgl-project/sglang@0025436). That read spares the JS read loop (paired A/B in workerd, warm 1k-token
 * unstreamed turns: −0.3 to −0.4 ms edge CPU per request; one timer instead of three: within
 * noise, ≤ 0.2 ms). Any other body is read here, one chunk per `read()`: a plain reader, not a
 * stream, so the streamed answer's translator pulls from it directly (chat-stream.ts) and the body
 * passes through no JS stream layer of its own. A byte stream (a fetch body) is read into one
 * buffer of READ_BUFFER_BYTES, handed back to each read, instead of a new buffer per chunk: a
 * streamed answer is a chunk per token, and a cumulative frame of a long answer is tens of kB
 * (paired A/B in workerd, 1 024-token streamed answer: −16 to −18 ms edge CPU per request).
 */
import { UpstreamError, UpstreamTimeoutError, type KvedgeError } from "../api/errors.ts";
import type { UpstreamBytes } from "./chat-stream.ts";

export interface ExchangeOptions {
  /** Longest wait for the worker's headers, ms from the exchange's start. */
  headersMs: number;
  /** Longest silence between two chunks of the body, ms. */
  idleMs: number;
  /** Absolute time (ms since epoch) by which the whole body must have arrived. */
  deadlineAt: number;
  /** The client's request signal: its abort cuts the exchange. */
  clientSignal: AbortSignal | null;
}

/**
 * A worker's body, read one chunk at a time under the exchange's limits: what a translator reads
 * (chat-stream.ts UpstreamBytes). `read` rejects with the cut's error once cut; `cancel` also aborts
 * the request (idempotent); `onCut` is told once, for a deadline, idle, size or abort.
 */
export type GuardedBody = UpstreamBytes;

export interface UpstreamExchange {
  /** The upstream fetch's signal: aborted with the cut's error, or when the body is cancelled. */
  readonly signal: AbortSignal;
  /** The worker's body (once per exchange), read a chunk at a time; `maxBytes` unset: no cap (a stream is bounded by time and the client's reading). */
  body(body: ReadableStream<Uint8Array> | null, maxBytes?: number): GuardedBody;
  /** A complete answer's text (UTF-8, replacement for bad bytes), at most `maxBytes`; rejects with the exchange's KvedgeError. */
  text(response: Response, maxBytes: number): Promise<string>;
  /**
   * The exchange is given up (a failed fetch, an answer refused on its headers, one that is not a
   * success, read or not): the watchdog stops and its requests are aborted, so a PD pair's prefill
   * still running stops and frees its room (pd-dispatch.ts) instead of running to its deadline.
   */
  end(): void;
}

/** The buffer a byte stream is read into: one per guarded body while it is read. */
export const READ_BUFFER_BYTES = 16 * 1024;

/** Decodes a complete answer's bytes (no streaming state: one decoder serves every exchange). */
const UTF8 = new TextDecoder();

export function openExchange(opts: ExchangeOptions): UpstreamExchange {
  return new Exchange(opts);
}

const tooLarge = (maxBytes: number) => new UpstreamError(`The worker's answer exceeds ${maxBytes} bytes.`, null, "upstream_too_large");
const brokenMidway = () => new UpstreamError("The connection to the worker failed mid-stream.");
const clientGone = () => new UpstreamError("The request was cancelled.", null, "cancelled");
/** Why an exchange given up aborts what it still has running (a PD pair's prefill). */
const ENDED = new UpstreamError("The edge gave up the exchange.", null, "cancelled");

class Exchange implements UpstreamExchange, GuardedBody {
  onCut: ((err: KvedgeError) => void) | null = null;
  private readonly abort = new AbortController();
  readonly signal = this.abort.signal;
  private readonly idleMs: number;
  private readonly deadlineAt: number;
  /** When the headers are due (ms since epoch); Infinity once the body is open. */
  private headersAt: number;
  /** When the pending upstream read began (ms since epoch); -1 while none is pending. */
  private readSince = -1;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private reader: ReadableStreamBYOBReader | ReadableStreamDefaultReader<Uint8Array> | null = null;
  private byob = false;
  /** The BYOB buffer, back from the last read (each read transfers it). */
  private buffer: ArrayBuffer | null = null;
  private bytes = 0;
  private maxBytes = Infinity;
  private done = false;
  private failure: KvedgeError | null = null;
  private readonly clientSignal: AbortSignal | null;
  /** Removed when the exchange is over: a retry opens another exchange on the same client signal, and the listener would hold this one (and its buffer) until the client's request ends. */
  private readonly onClientAbort = (): void => this.cut(clientGone());

  constructor(opts: ExchangeOptions) {
    const now = Date.now();
    this.idleMs = opts.idleMs;
    this.deadlineAt = opts.deadlineAt;
    this.headersAt = now + opts.headersMs;
    const client = opts.clientSignal;
    this.clientSignal = client;
    if (client?.aborted) {
      this.cut(clientGone());
      return;
    }
    client?.addEventListener("abort", this.onClientAbort, { once: true });
    // Nothing can fall due before the first of the three limits; a read starts an idle limit no earlier than idleMs from now.
    this.timer = setTimeout(this.watch, Math.max(0, Math.min(opts.headersMs, opts.idleMs, opts.deadlineAt - now)));
  }

  /** The watchdog: cuts what has fallen due, else re-arms for what is left (at most idleMs: a read may start meanwhile). */
  private readonly watch = (): void => {
    this.timer = undefined;
    if (this.done) return;
    const now = Date.now();
    const due = Math.min(this.deadlineAt, this.headersAt, this.readSince < 0 ? Infinity : this.readSince + this.idleMs);
    if (due > now) {
      this.timer = setTimeout(this.watch, Math.min(due, now + this.idleMs) - now);
      return;
    }
    this.cut(
      new UpstreamTimeoutError(
        this.headersAt !== Infinity ? undefined : this.deadlineAt <= now ? "The worker did not finish in time." : `The worker sent nothing for ${spanOf(this.idleMs)}.`,
      ),
    );
  };

  private cut(err: KvedgeError): void {
    if (this.done) return;
    this.failure = err;
    this.stop(err);
    this.onCut?.(err);
  }

  /** Ends the exchange early: the upstream fetch and reader are cancelled with our own error, so what the edge logs names why (deadline, size, client gone) rather than whatever the runtime reported. */
  private stop(own: KvedgeError): void {
    this.release();
    this.abort.abort(own);
    this.reader?.cancel(own).catch(() => undefined);
    this.reader = null;
  }

  /** The body arrived whole. */
  private finish(): void {
    this.release();
    this.reader = null;
  }

  /** The exchange is over: its timer, its client listener and its read buffer go. */
  private release(): void {
    this.done = true;
    clearTimeout(this.timer);
    this.clientSignal?.removeEventListener("abort", this.onClientAbort);
    this.buffer = null;
  }

  /** The error an exchange that is over fails with. */
  private failed(): KvedgeError {
    return this.failure ?? clientGone();
  }

  /** What a read returns once the body is over: the cut's error, or its end. */
  private over(): null {
    if (this.failure) throw this.failure;
    return null;
  }

  end(): void {
    if (!this.done) this.release();
    this.abort.abort(ENDED);
  }

  body(body: ReadableStream<Uint8Array> | null, maxBytes?: number): GuardedBody {
    this.headersAt = Infinity;
    if (maxBytes !== undefined) this.maxBytes = maxBytes;
    const stream = body ?? new ReadableStream<Uint8Array>();
    try {
      this.reader = stream.getReader({ mode: "byob" });
      this.byob = true;
    } catch {
      this.reader = stream.getReader();
    }
    if (this.done) {
      this.reader.cancel(this.failed()).catch(() => undefined);
      this.reader = null;
    }
    return this;
  }

  async read(): Promise<Uint8Array | null> {
    if (this.done) return this.over();
    const reader = this.reader!;
    this.readSince = Date.now();
    let r: ReadableStreamReadResult<Uint8Array>;
    try {
      r = this.byob ? await (reader as ReadableStreamBYOBReader).read(new Uint8Array(this.buffer ?? new ArrayBuffer(READ_BUFFER_BYTES))) : await (reader as ReadableStreamDefaultReader<Uint8Array>).read();
    } catch {
      // The connection to the worker broke (reset, `Network connection lost.`).
      this.cut(brokenMidway());
      return this.over();
    } finally {
      this.readSince = -1;
    }
    if (this.done) return this.over(); // cut meanwhile (abort, deadline, idle: the cancelled read ends as done)
    if (r.done) {
      this.finish();
      return null;
    }
    if (this.byob) this.buffer = r.value.buffer as ArrayBuffer;
    this.bytes += r.value.byteLength;
    if (this.bytes > this.maxBytes) {
      this.cut(tooLarge(this.maxBytes));
      return this.over();
    }
    return r.value;
  }

  cancel(reason?: unknown): void {
    if (this.done) return;
    this.stop(reason instanceof UpstreamError || reason instanceof UpstreamTimeoutError ? reason : new UpstreamError("The client went away.", null, "cancelled"));
  }

  async text(response: Response, maxBytes: number): Promise<string> {
    const headers = response.headers;
    const declared = declaredLength(headers);
    if (declared === null || declared > maxBytes || codedBody(headers) || headers.has("transfer-encoding")) {
      const body = this.body(response.body, maxBytes);
      if (declared !== null && declared > maxBytes) this.cut(tooLarge(maxBytes));
      return readGuardedText(body);
    }
    this.headersAt = Infinity;
    if (this.done) {
      response.body?.cancel(this.failed()).catch(() => undefined);
      throw this.failed();
    }
    // One read for the whole body: the idle limit counts from its start.
    this.readSince = Date.now();
    let bytes: ArrayBuffer;
    try {
      bytes = await response.arrayBuffer();
    } catch {
      this.cut(brokenMidway()); // a no-op after a cut, whose abort is what failed the read
      throw this.failed();
    } finally {
      this.readSince = -1;
    }
    if (this.done) throw this.failed();
    // Over HTTP the runtime reads at most the declared length; a body handed over in-process may not hold to it.
    if (bytes.byteLength > maxBytes) {
      this.cut(tooLarge(maxBytes));
      throw this.failed();
    }
    this.finish();
    return UTF8.decode(bytes);
  }
}

/** The body's length as its headers declare it (Content-Length); null when absent or malformed. */
function declaredLength(headers: Headers): number | null {
  const length = headers.get("content-length");
  return length !== null && /^\d{1,15}$/.test(length) ? Number(length) : null;
}

/** A content-coded body (gzip, …): its declared length says nothing of the size the runtime decodes it to. */
function codedBody(headers: Headers): boolean {
  const coding = headers.get("content-encoding");
  return coding !== null && coding !== "identity";
}

/** A limit for a message: whole seconds as seconds, else milliseconds (1500 ms is not "2 s"). */
function spanOf(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}

/** Reads a guarded body to text (UTF-8, replacement for bad bytes); rejects with the guard's KvedgeError. */
export async function readGuardedText(body: GuardedBody): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  for (let chunk = await body.read(); chunk !== null; chunk = await body.read()) text += decoder.decode(chunk, { stream: true });
  return text + decoder.decode();
}
