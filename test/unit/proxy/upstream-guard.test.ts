/**
 * The upstream guard's idle limit counts from the start of each read: a stream whose chunks keep
 * coming, each within the limit, is never cut however long it runs in all (the single watchdog
 * re-arms for the read in progress), and a stream that falls silent is cut with the idle error.
 * Real streams and real timers; the only clock read is the guard's own.
 */
import { describe, expect, it } from "vitest";
import { UpstreamError, UpstreamTimeoutError, type KvedgeError } from "../../../src/api/errors.ts";
import { READ_BUFFER_BYTES, guardUpstreamBody, readGuardedText } from "../../../src/proxy/upstream-guard.ts";

const IDLE_MS = 300;
const GAP_MS = 20;

/** A body that sends `chunks` chunks, one every GAP_MS, then ends (or stalls forever). */
function trickle(chunks: number, then: "end" | "stall"): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      if (sent === chunks) {
        if (then === "end") c.close();
        else await new Promise(() => undefined);
        return;
      }
      await new Promise((r) => setTimeout(r, GAP_MS));
      c.enqueue(enc.encode(`chunk ${sent++};`));
    },
  });
}

const guard = (body: ReadableStream<Uint8Array>) => guardUpstreamBody(body, { idleMs: IDLE_MS, deadlineAt: Date.now() + 60_000, abort: new AbortController() });

describe("guardUpstreamBody idle limit", () => {
  it("a stream that keeps sending within the idle limit runs past it in all and arrives whole", async () => {
    // 40 chunks, 20 ms apart: at least 800 ms in all, well past one idle limit of 300 ms.
    const chunks = 40;
    const text = await readGuardedText(guard(trickle(chunks, "end")));
    expect(text).toBe(Array.from({ length: chunks }, (_, i) => `chunk ${i};`).join(""));
  });

  it("a stream that falls silent after a while is cut with the idle error", async () => {
    const err = await readGuardedText(guard(trickle(20, "stall"))).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
    expect((err as Error).message).toMatch(/^The worker sent nothing for /);
  });
});

describe("guardUpstreamBody cuts and cancellation", () => {
  it("an abort from outside cuts a body nobody reads: onCut is told, the upstream read is cancelled, reads reject", async () => {
    let upstreamCancelled: unknown = undefined;
    const body = new ReadableStream<Uint8Array>({ cancel: (reason) => void (upstreamCancelled = reason) });
    const abort = new AbortController();
    const g = guardUpstreamBody(body, { idleMs: IDLE_MS, deadlineAt: Date.now() + 60_000, abort });
    const cuts: KvedgeError[] = [];
    g.onCut = (e) => cuts.push(e);
    abort.abort(); // the client's request signal
    expect(cuts).toHaveLength(1);
    expect(cuts[0]).toBeInstanceOf(UpstreamError);
    expect(cuts[0]!.code).toBe("cancelled");
    await expect(g.read()).rejects.toBe(cuts[0]);
    await Promise.resolve();
    expect(upstreamCancelled).toBe(cuts[0]);
  });

  it("cancel stops a pending read (it ends as the body's end) and aborts the request with the client's error", async () => {
    const abort = new AbortController();
    const g = guardUpstreamBody(trickle(1, "stall"), { idleMs: 60_000, deadlineAt: Date.now() + 60_000, abort });
    expect(await g.read()).not.toBeNull();
    const pending = g.read();
    g.cancel("client gone");
    expect(await pending).toBeNull();
    expect(abort.signal.reason).toBeInstanceOf(UpstreamError);
    expect((abort.signal.reason as UpstreamError).message).toBe("The client went away.");
  });

  it("a body past maxBytes is cut with upstream_too_large", async () => {
    const g = guardUpstreamBody(trickle(5, "end"), { idleMs: 60_000, deadlineAt: Date.now() + 60_000, maxBytes: 20, abort: new AbortController() });
    const err = await readGuardedText(g).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).code).toBe("upstream_too_large");
  });
});

describe("guardUpstreamBody on a byte stream (a fetch body)", () => {
  /** A byte stream of `pieces`, one per pull. */
  function bytes(pieces: Uint8Array[], onCancel?: (reason: unknown) => void): ReadableStream<Uint8Array> {
    let i = 0;
    return new ReadableStream({
      type: "bytes",
      pull(c) {
        if (i === pieces.length) {
          c.close();
          c.byobRequest?.respond(0);
        } else c.enqueue(pieces[i++]!.slice());
      },
      ...(onCancel ? { cancel: onCancel } : {}),
    });
  }
  const enc = new TextEncoder();

  it("reads into one buffer of READ_BUFFER_BYTES: each chunk is a view of it, and a piece larger than it arrives whole in parts", async () => {
    const big = "€".repeat(READ_BUFFER_BYTES); // 3 bytes each: three buffers' worth
    const pieces = [enc.encode("data: a\n\n"), enc.encode(big), enc.encode("tail")];
    const g = guard(bytes(pieces));
    let text = "";
    const dec = new TextDecoder();
    let reads = 0;
    for (let c = await g.read(); c !== null; c = await g.read()) {
      expect(c.buffer.byteLength).toBe(READ_BUFFER_BYTES);
      text += dec.decode(c, { stream: true });
      reads++;
    }
    expect(text + dec.decode()).toBe(`data: a\n\n${big}tail`);
    expect(reads).toBeGreaterThanOrEqual(5);
  });

  it("a byte stream that falls silent is cut with the idle error", async () => {
    const silent = new ReadableStream({ type: "bytes", pull: () => new Promise<void>(() => undefined) });
    const err = await readGuardedText(guard(silent)).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
  });

  it("cancel cancels the byte stream with the guard's error", async () => {
    let cancelled: unknown;
    const g = guard(bytes([enc.encode("x")], (r) => void (cancelled = r)));
    expect(await g.read()).not.toBeNull();
    g.cancel("client gone");
    await Promise.resolve();
    expect(cancelled).toBeInstanceOf(UpstreamError);
  });
});
