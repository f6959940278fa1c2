/**
 * The upstream exchange's limits: the idle limit counts from the start of each read, so a stream
 * whose chunks keep coming, each within the limit, is never cut however long it runs in all (the
 * one watchdog re-arms for the read in progress), and a stream that falls silent is cut with the
 * idle error; the headers timeout ends with the headers. A complete answer read in one call (a
 * Content-Length within the cap) is still cut by the idle limit, the deadline, the client's going,
 * a broken connection and the cap. Real streams, real HTTP and real timers; the only clock read is
 * the exchange's own.
 */
import { createServer, type ServerResponse } from "node:http";
import { getEventListeners } from "node:events";
import { gzipSync } from "node:zlib";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UpstreamError, UpstreamTimeoutError, type KvedgeError } from "../../../src/api/errors.ts";
import { READ_BUFFER_BYTES, openExchange, readGuardedText, type ExchangeOptions, type GuardedBody } from "../../../src/proxy/upstream-guard.ts";

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

const exchange = (o: Partial<ExchangeOptions> = {}) => openExchange({ headersMs: 60_000, idleMs: IDLE_MS, deadlineAt: Date.now() + 60_000, clientSignal: null, ...o });
const guard = (body: ReadableStream<Uint8Array>, o: Partial<ExchangeOptions> = {}, maxBytes?: number): GuardedBody => exchange(o).body(body, maxBytes);
/** What a promise rejected with; null when it resolved. */
const rejection = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

describe("guardUpstreamBody idle limit", () => {
  it("a stream that keeps sending within the idle limit runs past it in all and arrives whole", async () => {
    // 40 chunks, 20 ms apart: at least 800 ms in all, well past one idle limit of 300 ms.
    const chunks = 40;
    const text = await readGuardedText(guard(trickle(chunks, "end")));
    expect(text).toBe(Array.from({ length: chunks }, (_, i) => `chunk ${i};`).join(""));
  });

  it("a stream that falls silent after a while is cut with the idle error", async () => {
    const err = await rejection(readGuardedText(guard(trickle(20, "stall"))));
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
    expect((err as Error).message).toMatch(/^The worker sent nothing for /);
  });

  it("the headers timeout ends with the headers: a body that keeps sending runs past it", async () => {
    const text = await readGuardedText(guard(trickle(20, "end"), { headersMs: 100 }));
    expect(text).toBe(Array.from({ length: 20 }, (_, i) => `chunk ${i};`).join(""));
  });

  it("an idle limit shorter than the headers timeout still cuts a body that stalls (the watchdog is armed for the earliest limit)", async () => {
    const err = await rejection(readGuardedText(guard(trickle(2, "stall"), { headersMs: 60_000 })));
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
    expect((err as Error).message).toMatch(/^The worker sent nothing for /);
  });
});

describe("guardUpstreamBody cuts and cancellation", () => {
  it("an abort from outside cuts a body nobody reads: onCut is told, the upstream read is cancelled, reads reject", async () => {
    let upstreamCancelled: unknown = undefined;
    const body = new ReadableStream<Uint8Array>({ cancel: (reason) => void (upstreamCancelled = reason) });
    const client = new AbortController();
    const x = exchange({ clientSignal: client.signal });
    const g = x.body(body);
    const cuts: KvedgeError[] = [];
    g.onCut = (e) => cuts.push(e);
    client.abort(); // the client's request signal
    expect(cuts).toHaveLength(1);
    expect(cuts[0]).toBeInstanceOf(UpstreamError);
    expect(cuts[0]!.code).toBe("cancelled");
    await expect(g.read()).rejects.toBe(cuts[0]);
    await Promise.resolve();
    expect(upstreamCancelled).toBe(cuts[0]);
    expect(x.signal.reason).toBe(cuts[0]);
  });

  it("a client gone before the exchange opens: the fetch's signal is aborted at once", () => {
    const client = new AbortController();
    client.abort();
    const x = exchange({ clientSignal: client.signal });
    expect(x.signal.aborted).toBe(true);
    expect((x.signal.reason as UpstreamError).code).toBe("cancelled");
  });

  it("headers that do not come within headersMs abort the fetch with a timeout", async () => {
    const x = exchange({ headersMs: 100, idleMs: 60_000 });
    const reason = await new Promise((r) => x.signal.addEventListener("abort", () => r(x.signal.reason)));
    expect(reason).toBeInstanceOf(UpstreamTimeoutError);
    expect((reason as Error).message).toBe("The worker did not answer in time.");
  });

  it("an exchange ended on its headers aborts its requests at once (a PD prefill still running), and no timer cuts it later", async () => {
    const x = exchange({ headersMs: 100, idleMs: 100, deadlineAt: Date.now() + 150 });
    x.end();
    expect(x.signal.aborted).toBe(true);
    const reason = x.signal.reason as UpstreamError;
    expect(reason).toBeInstanceOf(UpstreamError);
    expect(reason.code).toBe("cancelled");
    await new Promise((r) => setTimeout(r, 300));
    expect(x.signal.reason).toBe(reason);
  });

  it("cancel stops a pending read (it ends as the body's end) and aborts the request with the client's error", async () => {
    const x = exchange({ idleMs: 60_000 });
    const g = x.body(trickle(1, "stall"));
    expect(await g.read()).not.toBeNull();
    const pending = g.read();
    g.cancel("client gone");
    expect(await pending).toBeNull();
    expect(x.signal.reason).toBeInstanceOf(UpstreamError);
    expect((x.signal.reason as UpstreamError).message).toBe("The client went away.");
  });

  it("a body past maxBytes is cut with upstream_too_large", async () => {
    const g = guard(trickle(5, "end"), { idleMs: 60_000 }, 20);
    const err = await rejection(readGuardedText(g));
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
    const err = await rejection(readGuardedText(guard(silent)));
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

describe("a complete answer with a Content-Length, read in one call (real HTTP)", () => {
  const WHOLE = `{"text":"${"héllo € 𝄞 ".repeat(200)}"}`;
  /** Upstream connections the server saw closed, by path. */
  const closed = new Map<string, number>();
  let base = "";
  const send = (res: ServerResponse, headers: Record<string, string | number>, body: string | Buffer) => {
    res.writeHead(200, { "content-type": "application/json", ...headers });
    res.end(body);
  };
  const server = createServer((req, res) => {
    const path = req.url ?? "";
    res.on("close", () => closed.set(path, (closed.get(path) ?? 0) + 1));
    const declared = { "content-length": 100 };
    if (path === "/whole") send(res, { "content-length": Buffer.byteLength(WHOLE) }, WHOLE);
    else if (path === "/chunked") (res.writeHead(200, { "content-type": "application/json" }), res.write(WHOLE.slice(0, 50)), res.end(WHOLE.slice(50)));
    else if (path === "/big") {
      // Declares 5000, sends 500 (under the cap) and stalls: only the cut on the headers ends it at once.
      res.writeHead(200, { "content-type": "application/json", "content-length": 5000 });
      res.write("x".repeat(500));
    } else if (path === "/gzip") {
      // A small declared length that decodes past the cap; all but the gzip trailer, then a stall:
      // a one-call read would wait for the rest until the idle limit.
      const gz = gzipSync("x".repeat(100_000));
      res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip", "content-length": gz.length });
      res.write(gz.subarray(0, gz.length - 8));
    }
    else if (path === "/stall" || path === "/short") {
      res.writeHead(200, declared);
      res.write("0123456789"); // then silence, or a dropped connection
      if (path === "/short") setTimeout(() => res.socket?.destroy(), 20);
    }
  });
  beforeAll(async () => {
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  /** Fetches `path` under a new exchange and reads its text. */
  const answer = async (path: string, o: Partial<ExchangeOptions> = {}, maxBytes = 1024 * 1024) => {
    const x = exchange(o);
    const res = await fetch(base + path, { signal: x.signal });
    return { x, text: x.text(res, maxBytes) };
  };

  it("arrives whole, the same text as the chunk-by-chunk read of a body without a length", async () => {
    const whole = await (await answer("/whole")).text;
    expect(whole).toBe(WHOLE);
    expect(await (await answer("/chunked")).text).toBe(whole);
  });

  it("a Content-Length over the cap is cut at once with upstream_too_large; the connection closes", async () => {
    const err = await rejection((await answer("/big", { idleMs: 2000 }, 1024)).text);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).code).toBe("upstream_too_large");
    await expect.poll(() => closed.get("/big")).toBe(1);
  });

  it("a content-coded body is read chunk by chunk: what it decodes to is held to the cap", async () => {
    const err = await rejection((await answer("/gzip", { idleMs: 2000 }, 1024)).text);
    expect((err as UpstreamError).code).toBe("upstream_too_large");
  });

  it("a body handed over in-process that is longer than it declares is held to the cap", async () => {
    const x = exchange();
    const err = await rejection(x.text(new Response("x".repeat(50), { headers: { "content-length": "5" } }), 10));
    expect((err as UpstreamError).code).toBe("upstream_too_large");
  });

  it("a body that stalls after its headers is cut at the idle limit; the connection closes", async () => {
    const err = await rejection((await answer("/stall", { idleMs: 200 })).text);
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
    expect((err as Error).message).toBe("The worker sent nothing for 200 ms.");
    await expect.poll(() => closed.get("/stall")).toBe(1);
  });

  it("a body that stalls is cut at the total deadline when that comes first", async () => {
    const err = await rejection((await answer("/stall", { idleMs: 60_000, deadlineAt: Date.now() + 200 })).text);
    expect(err).toBeInstanceOf(UpstreamTimeoutError);
    expect((err as Error).message).toBe("The worker did not finish in time.");
  });

  it("a body shorter than its Content-Length (the connection dropped) fails as a broken connection, not a timeout", async () => {
    const err = await rejection((await answer("/short", { idleMs: 60_000 })).text);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).code).toBe("upstream_error");
    expect((err as Error).message).toBe("The connection to the worker failed mid-stream.");
  });

  it("the client going mid-read cuts it with cancelled and closes the connection", async () => {
    const client = new AbortController();
    const closedBefore = closed.get("/stall") ?? 0;
    const { x, text } = await answer("/stall", { idleMs: 60_000, clientSignal: client.signal });
    setTimeout(() => client.abort(), 50);
    const err = await rejection(text);
    expect((err as UpstreamError).code).toBe("cancelled");
    expect(x.signal.reason).toBe(err);
    await expect.poll(() => closed.get("/stall")).toBe(closedBefore + 1);
  });
});

describe("the client's abort listener lives as long as the exchange", () => {
  // A retry opens another exchange on the same client signal: a listener left behind would hold the
  // finished exchange (and its read buffer) until the client's request ends.
  const listeners = (s: AbortSignal) => getEventListeners(s, "abort").length;
  const withClient = () => {
    const client = new AbortController();
    return { signal: client.signal, x: exchange({ clientSignal: client.signal }) };
  };

  it("is added while the exchange runs and removed once its body is read to the end", async () => {
    const { signal, x } = withClient();
    expect(listeners(signal)).toBe(1);
    expect(await readGuardedText(x.body(trickle(2, "end")))).toBe("chunk 0;chunk 1;");
    expect(listeners(signal)).toBe(0);
  });

  it("is removed when the exchange ends unread, is cancelled, or is cut", async () => {
    const ended = withClient();
    ended.x.end();
    expect(listeners(ended.signal)).toBe(0);
    const cancelled = withClient();
    cancelled.x.body(trickle(2, "stall")).cancel();
    expect(listeners(cancelled.signal)).toBe(0);
    const cut = withClient();
    const err = await rejection(readGuardedText(cut.x.body(trickle(5, "end"), 10)));
    expect((err as UpstreamError).code).toBe("upstream_too_large");
    expect(listeners(cut.signal)).toBe(0);
  });
});
