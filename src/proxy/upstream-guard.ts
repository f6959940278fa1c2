/**
 * Deadlines and caps on a worker's answer, and cancellation both ways. A worker's body passes
 * through `guardUpstreamBody`, which:
 * - cuts it with UpstreamTimeoutError when no chunk arrives for `idleMs` (a stalled stream) or
 *   when the exchange's total deadline passes;
 * - cuts it with UpstreamError when more than `maxBytes` arrive (non-streamed answers);
 * - on cancel (the client went away, or the translator stopped reading) cancels the upstream read
 *   and aborts the upstream request, so the worker's connection closes and SGLang aborts the
 *   request instead of generating into the void.
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
  const stop = (reason: unknown): void => {
    if (done) return;
    done = true;
    opts.abort.abort(reason);
    reader.cancel(reason).catch(() => undefined);
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(ctl) {
        if (done) return;
        const wait = Math.min(opts.idleMs, opts.deadlineAt - Date.now());
        let timer: ReturnType<typeof setTimeout> | undefined;
        const timeout = new Promise<"timeout">((resolve) => {
          timer = setTimeout(() => resolve("timeout"), Math.max(0, wait));
        });
        let r: ReadableStreamReadResult<Uint8Array> | "timeout";
        try {
          r = await Promise.race([reader.read(), timeout]);
        } catch {
          // The connection to the worker broke (reset, `Network connection lost.`).
          const err = new UpstreamError("The connection to the worker failed mid-stream.");
          stop(err);
          ctl.error(err);
          return;
        } finally {
          clearTimeout(timer);
        }
        if (r === "timeout") {
          const err = new UpstreamTimeoutError(
            opts.deadlineAt - Date.now() <= 0 ? "The worker did not finish in time." : `The worker sent nothing for ${Math.round(opts.idleMs / 1000)} s.`,
          );
          stop(err);
          ctl.error(err);
          return;
        }
        if (r.done) {
          done = true;
          ctl.close();
          return;
        }
        bytes += r.value.byteLength;
        if (opts.maxBytes !== undefined && bytes > opts.maxBytes) {
          const err = new UpstreamError(`The worker's answer exceeds ${opts.maxBytes} bytes.`, null, "upstream_too_large");
          stop(err);
          ctl.error(err);
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
