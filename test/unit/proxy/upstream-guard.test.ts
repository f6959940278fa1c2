/**
 * The upstream guard's idle limit counts from the start of each read: a stream whose chunks keep
 * coming, each within the limit, is never cut however long it runs in all (the single watchdog
 * re-arms for the read in progress), and a stream that falls silent is cut with the idle error.
 * Real streams and real timers; the only clock read is the guard's own.
 */
import { describe, expect, it } from "vitest";
import { UpstreamTimeoutError } from "../../../src/api/errors.ts";
import { guardUpstreamBody, readGuardedText } from "../../../src/proxy/upstream-guard.ts";

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
