/**
 * Deadlines and caps on a worker's answer, and cancellation both ways. A worker's body is read
 * through `guardUpstreamBody`, one chunk per `read()`, which:
 * - cuts it with UpstreamTimeoutError when no chunk arrives for `idleMs` (a stalled stream) or
 *   when the exchange's total deadline passes;
 * - cuts it with UpstreamError when more than `maxBytes` arrive (non-streamed answers);
 * - on `cancel` (the client went away, or the reader stopped) cancels the upstream read and aborts
 *   the upstream request, so the worker's connection closes and SGLang aborts the request instead
 *   of generating into the void;
 * - when the request is aborted from outside (the client's request signal) or the total deadline
 *   passes while nobody reads (a client that stopped reading holds the reader back), cuts at once
 *   and tells `onCut`, so whatever reads from it ends and settles without waiting for a read.
 * Every upstream failure becomes a KvedgeError (read() rejects with it): nothing escapes as an
 * uncaught rejection (workerd's `Network connection lost.` on a dropped connection included).
 * A plain reader, not a stream: the streamed answer's translator pulls from it directly
 * (chat-stream.ts), so the body passes through no JS stream layer of its own. A byte stream (a
 * fetch body) is read into one buffer of READ_BUFFER_BYTES, handed back to each read, instead of a
 * new buffer per chunk: a streamed answer is a chunk per token, and a cumulative frame of a long
 * answer is tens of kB (paired A/B in workerd, 1 024-token streamed answer: −16 to −18 ms edge CPU
 * per request; 256 tokens and unstreamed answers: no change).
 */
import { UpstreamError, UpstreamTimeoutError, type KvedgeError } from "../api/errors.ts";
import type { UpstreamBytes } from "./chat-stream.ts";

export interface UpstreamGuardOptions {
  /** Longest silence between two chunks, ms. */
  idleMs: number;
  /** Absolute time (ms since epoch) by which the whole body must have arrived. */
  deadlineAt: number;
  /** Cap on the body's bytes (unset = no cap: streams are bounded by time and the client's reading). */
  maxBytes?: number;
  /** Aborts the upstream request (the fetch's controller). */
  abort: AbortController;
}

/**
 * A worker's body, read one chunk at a time under the guard's limits: what a translator reads
 * (chat-stream.ts UpstreamBytes). `read` rejects with the cut's error once cut; `cancel` also aborts
 * the request (idempotent); `onCut` is told once, for a deadline, idle, size or abort.
 */
export type GuardedBody = UpstreamBytes;

/** The buffer a byte stream is read into: one per guarded body while it is read. */
export const READ_BUFFER_BYTES = 16 * 1024;

/** A BYOB reader where the body is a byte stream, else a default one. */
function readerOf(body: ReadableStream<Uint8Array>): { byob: ReadableStreamBYOBReader } | { plain: ReadableStreamDefaultReader<Uint8Array> } {
  try {
    return { byob: body.getReader({ mode: "byob" }) };
  } catch {
    return { plain: body.getReader() };
  }
}

export function guardUpstreamBody(body: ReadableStream<Uint8Array>, opts: UpstreamGuardOptions): GuardedBody {
  const reader = readerOf(body);
  /** The BYOB buffer, back from the last read (each read transfers it). */
  let buffer: ArrayBuffer | null = null;
  let bytes = 0;
  let done = false;
  let failure: KvedgeError | null = null;
  let deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  // One idle watchdog instead of a timer per chunk: it re-arms for what the pending read has left.
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** When the pending upstream read began (ms since epoch); -1 while none is pending. */
  let readSince = -1;
  const idleLeft = (): number => Math.min(opts.idleMs - (Date.now() - readSince), opts.deadlineAt - Date.now());
  const watchIdle = (): void => {
    idleTimer = undefined;
    if (done || readSince < 0) return;
    const left = idleLeft();
    if (left > 0) idleTimer = setTimeout(watchIdle, left);
    else cut(new UpstreamTimeoutError(opts.deadlineAt - Date.now() <= 0 ? "The worker did not finish in time." : `The worker sent nothing for ${Math.round(opts.idleMs / 1000)} s.`));
  };
  const stop = (reason: unknown): void => {
    if (done) return;
    done = true;
    clearTimeout(deadlineTimer);
    clearTimeout(idleTimer);
    // The upstream fetch and reader are cancelled with our own error, so what the edge logs names
    // why (deadline, size, client gone) rather than whatever the runtime reported.
    const own = reason instanceof UpstreamError || reason instanceof UpstreamTimeoutError ? reason : new UpstreamError("The client went away.", null, "cancelled");
    opts.abort.abort(own);
    ("byob" in reader ? reader.byob : reader.plain).cancel(own).catch(() => undefined);
  };
  const cut = (err: KvedgeError): void => {
    if (done) return;
    stop(err);
    failure = err;
    guarded.onCut?.(err);
  };
  /** What a read returns once the body is over: the cut's error, or its end. */
  const over = (): null => {
    if (failure) throw failure;
    return null;
  };
  const guarded: GuardedBody = {
    onCut: null,
    async read() {
      if (done) return over();
      readSince = Date.now();
      if (idleTimer === undefined) idleTimer = setTimeout(watchIdle, Math.max(0, idleLeft()));
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = "byob" in reader ? await reader.byob.read(new Uint8Array(buffer ?? new ArrayBuffer(READ_BUFFER_BYTES))) : await reader.plain.read();
      } catch {
        // The connection to the worker broke (reset, `Network connection lost.`).
        cut(new UpstreamError("The connection to the worker failed mid-stream."));
        return over();
      } finally {
        readSince = -1;
      }
      if (done) return over(); // cut meanwhile (abort, deadline, idle: the cancelled read ends as done)
      if (r.done) {
        done = true;
        clearTimeout(deadlineTimer);
        clearTimeout(idleTimer);
        return null;
      }
      if ("byob" in reader) buffer = r.value.buffer as ArrayBuffer;
      bytes += r.value.byteLength;
      if (opts.maxBytes !== undefined && bytes > opts.maxBytes) {
        cut(new UpstreamError(`The worker's answer exceeds ${opts.maxBytes} bytes.`, null, "upstream_too_large"));
        return over();
      }
      return r.value;
    },
    cancel(reason) {
      stop(reason ?? new Error("cancelled"));
    },
  };
  if (opts.abort.signal.aborted) cut(new UpstreamError("The request was cancelled.", null, "cancelled"));
  else {
    opts.abort.signal.addEventListener("abort", () => cut(new UpstreamError("The request was cancelled.", null, "cancelled")), { once: true });
    deadlineTimer = setTimeout(() => cut(new UpstreamTimeoutError("The worker did not finish in time.")), Math.max(0, opts.deadlineAt - Date.now()));
  }
  return guarded;
}

/** Reads a guarded body to text (UTF-8, replacement for bad bytes); rejects with the guard's KvedgeError. */
export async function readGuardedText(body: GuardedBody): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  for (let chunk = await body.read(); chunk !== null; chunk = await body.read()) text += decoder.decode(chunk, { stream: true });
  return text + decoder.decode();
}
