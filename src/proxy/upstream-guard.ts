/**
 * Deadlines and caps on a worker's answer, and cancellation both ways. A worker's body passes
 * through `guardUpstreamBody`, which:
 * - cuts it with UpstreamTimeoutError when no chunk arrives for `idleMs` (a stalled stream) or
 *   when the exchange's total deadline passes;
 * - cuts it with UpstreamError when more than `maxBytes` arrive (non-streamed answers);
 * - on cancel (the client went away, or the translator stopped reading) cancels the upstream read
 *   and aborts the upstream request, so the worker's connection closes and SGLang aborts the
 *   request instead of generating into the void;
 * - when the request is aborted from outside (the client's request signal) or the total deadline
 *   passes while nobody reads (a client that stopped reading holds the pipe by backpressure),
 *   errors at once, so whatever is piped from it ends and settles.
 * Every upstream failure becomes a KvedgeError on this stream: nothing escapes as an uncaught
 * rejection (workerd's `Network connection lost.` on a dropped connection included).
 */
import { UpstreamError, UpstreamTimeoutError } from "../api/errors.ts";

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

export function guardUpstreamBody(body: ReadableStream<Uint8Array>, opts: UpstreamGuardOptions): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let bytes = 0;
  let done = false;
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
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
    reader.cancel(own).catch(() => undefined);
  };
  const cut = (err: Error): void => {
    if (done) return;
    stop(err);
    ctl.error(err);
  };
  if (opts.abort.signal.aborted) done = true;
  opts.abort.signal.addEventListener("abort", () => cut(new UpstreamError("The request was cancelled.", null, "cancelled")), { once: true });
  deadlineTimer = setTimeout(() => cut(new UpstreamTimeoutError("The worker did not finish in time.")), Math.max(0, opts.deadlineAt - Date.now()));
  return new ReadableStream<Uint8Array>(
    {
      start(c) {
        ctl = c;
        if (done) c.error(new UpstreamError("The request was cancelled.", null, "cancelled"));
      },
      async pull() {
        if (done) return;
        readSince = Date.now();
        if (idleTimer === undefined) idleTimer = setTimeout(watchIdle, Math.max(0, idleLeft()));
        let r: ReadableStreamReadResult<Uint8Array>;
        try {
          r = await reader.read();
        } catch {
          // The connection to the worker broke (reset, `Network connection lost.`).
          cut(new UpstreamError("The connection to the worker failed mid-stream."));
          return;
        } finally {
          readSince = -1;
        }
        if (done) return; // cut meanwhile (abort, deadline, idle: the cancelled read ends as done)
        if (r.done) {
          done = true;
          clearTimeout(deadlineTimer);
          clearTimeout(idleTimer);
          ctl.close();
          return;
        }
        bytes += r.value.byteLength;
        if (opts.maxBytes !== undefined && bytes > opts.maxBytes) {
          cut(new UpstreamError(`The worker's answer exceeds ${opts.maxBytes} bytes.`, null, "upstream_too_large"));
          return;
        }
        ctl.enqueue(r.value);
      },
      cancel(reason) {
        stop(reason ?? new Error("cancelled"));
      },
    },
    { highWaterMark: 0 },
  );
}

/** Reads a guarded body to text (UTF-8, replacement for bad bytes); rejects with the guard's KvedgeError. */
export async function readGuardedText(body: ReadableStream<Uint8Array>): Promise<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return text + decoder.decode();
}
