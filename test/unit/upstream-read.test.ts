/**
 * readUpstreamText: an unstreamed answer read under the guards (idle timeout, deadline, size cap,
 * cancellation both ways), on real ReadableStreams and timers.
 */
import { describe, expect, it } from "vitest";
import { UpstreamError, UpstreamTimeoutError } from "../../src/api/errors.ts";
import { readUpstreamText } from "../../src/proxy/upstream-guard.ts";

const enc = new TextEncoder();

/** A body that sends `chunks`, then stays open (never closes) when `hang`. */
function body(chunks: Uint8Array[], hang = false): { stream: ReadableStream<Uint8Array>; cancelled: Promise<unknown> } {
  let onCancel: (r: unknown) => void = () => undefined;
  const cancelled = new Promise((r) => (onCancel = r));
  let i = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < chunks.length) c.enqueue(chunks[i++]!);
      else if (!hang) c.close();
      else return new Promise(() => undefined);
    },
    cancel: (r) => onCancel(r),
  });
  return { stream, cancelled };
}

const opts = (over: Partial<{ idleMs: number; deadlineAt: number; maxBytes: number }> = {}) => ({ idleMs: 5_000, deadlineAt: Date.now() + 10_000, abort: new AbortController(), ...over });

describe("readUpstreamText", () => {
  it("decodes the answer across chunks, a character split between two", async () => {
    const e = enc.encode("é");
    expect(await readUpstreamText(body([enc.encode('{"text":"h'), e.slice(0, 1), e.slice(1), enc.encode('"}')]).stream, opts())).toBe('{"text":"hé"}');
    expect(await readUpstreamText(null, opts())).toBe("");
  });

  it("cuts an answer over the cap, aborting the upstream request and cancelling its body", async () => {
    const b = body([enc.encode("x".repeat(60)), enc.encode("x".repeat(60))], true);
    const o = opts({ maxBytes: 100 });
    const err = await readUpstreamText(b.stream, o).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).code).toBe("upstream_too_large");
    expect(o.abort.signal.aborted).toBe(true);
    expect(await b.cancelled).toBe(err);
  });

  it("a silent worker is cut at the idle timeout, a slow one at the deadline", async () => {
    const idle = opts({ idleMs: 30 });
    await expect(readUpstreamText(body([enc.encode("{")], true).stream, idle)).rejects.toThrow(/sent nothing/);
    expect(idle.abort.signal.aborted).toBe(true);
    const late = opts({ idleMs: 5_000, deadlineAt: Date.now() + 30 });
    await expect(readUpstreamText(body([], true).stream, late)).rejects.toBeInstanceOf(UpstreamTimeoutError);
    await expect(readUpstreamText(body([], true).stream, opts({ deadlineAt: Date.now() + 30 }))).rejects.toThrow(/did not finish in time/);
  });

  it("the client going away while the worker computes cancels the read; a broken connection is not a cancellation", async () => {
    const b = body([], true);
    const o = opts();
    setTimeout(() => o.abort.abort(new Error("client gone")), 20);
    const err = await readUpstreamText(b.stream, o).catch((e: unknown) => e);
    expect((err as UpstreamError).code).toBe("cancelled");
    await b.cancelled;
    const broken = new ReadableStream<Uint8Array>({ pull: (c) => c.error(new Error("Network connection lost.")) });
    const e2 = await readUpstreamText(broken, opts()).catch((e: unknown) => e);
    expect(e2).toBeInstanceOf(UpstreamError);
    expect((e2 as UpstreamError).code).not.toBe("cancelled");
    await expect(readUpstreamText(body([]).stream, (() => { const o2 = opts(); o2.abort.abort(); return o2; })())).rejects.toThrow(/cancelled/);
  });
});
