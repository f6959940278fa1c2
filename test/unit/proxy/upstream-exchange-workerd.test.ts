/**
 * A complete answer read in one call (exchange.text: a Content-Length within the cap) in real
 * workerd (Miniflare) against a real HTTP upstream: the runtime, not JS, reads the body, so what
 * cuts it is the fetch's signal. Checked here where it matters: workerd rejects the pending read
 * with the abort's reason (the idle limit, the deadline, the client's going), a body shorter than
 * its Content-Length fails as a broken connection, a longer one is not read past its length, one
 * that also declares Transfer-Encoding (chunked framing wins) is read chunk by chunk under the cap,
 * and nothing is logged as uncaught.
 */
import type { Miniflare } from "miniflare";
import { createServer } from "node:http";
import { createServer as createNetServer, type AddressInfo, type Socket } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startBundledWorker } from "../../helpers/bundled-worker.ts";

const HERE = dirname(fileURLToPath(import.meta.url));
const WHOLE = `{"text":"${"héllo € 𝄞 ".repeat(300)}"}`;
let mf: Miniflare;
let runtimeOutput: () => string;
let upstream = "";
/** Upstream connections the server saw closed, by path. */
const closed = new Map<string, number>();

const server = createServer((req, res) => {
  const path = req.url ?? "";
  res.on("close", () => closed.set(path, (closed.get(path) ?? 0) + 1));
  if (path === "/whole") {
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(WHOLE) });
    res.end(WHOLE);
  } else if (path === "/longer") {
    // Declares 10 bytes and sends 100 on the raw socket: the runtime reads the 10 it was told of.
    const socket: Socket = res.socket!;
    socket.write(`HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\n${"x".repeat(100)}`);
    setTimeout(() => socket.destroy(), 50);
  } else {
    res.writeHead(200, { "content-type": "application/json", "content-length": 100 });
    res.write("0123456789"); // /stall: then silence; /short: then a dropped connection
    if (path === "/short") setTimeout(() => res.socket?.destroy(), 20);
  }
});

/**
 * A raw-socket upstream whose answer declares 10 bytes AND chunked framing, which wins (RFC 9112
 * §6.3): 256 KiB of chunks, then silence. A one-call read would take all of it and wait for the
 * last chunk.
 */
let rawUpstream = "";
let rawClosed = 0;
const rawServer = createNetServer((socket) => {
  socket.on("close", () => rawClosed++);
  socket.on("error", () => undefined);
  let head = "";
  socket.on("data", (b: Buffer) => {
    if (head.includes("\r\n\r\n")) return;
    head += b.toString("latin1");
    if (!head.includes("\r\n\r\n")) return;
    socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n");
    const chunk = "y".repeat(4096);
    for (let i = 0; i < 64; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
  });
});

beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  upstream = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await new Promise<void>((r) => rawServer.listen(0, "127.0.0.1", r));
  rawUpstream = `http://127.0.0.1:${(rawServer.address() as AddressInfo).port}`;
  ({ mf, output: runtimeOutput } = await startBundledWorker(join(HERE, "upstream-exchange-worker.ts"), { compatibilityDate: "2026-07-30", compatibilityFlags: ["enable_request_signal"] }));
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  await new Promise<void>((r) => rawServer.close(() => r()));
});

/** The Worker's outcome for upstream `path` under the given limits. */
async function outcome(path: string, limits: Record<string, number> = {}, base = upstream): Promise<{ text?: string; code?: string; message?: string }> {
  const q = new URLSearchParams({ url: base + path, ...Object.fromEntries(Object.entries(limits).map(([k, v]) => [k, String(v)])) });
  return (await (await mf.dispatchFetch(`http://edge/?${q}`)).json()) as { text?: string; code?: string; message?: string };
}

describe("a complete answer read in one call, in workerd", () => {
  it("arrives whole", async () => {
    expect(await outcome("/whole")).toEqual({ text: WHOLE });
  });

  it("a body that stalls after its headers is cut at the idle limit; the connection closes", async () => {
    const before = closed.get("/stall") ?? 0;
    expect(await outcome("/stall", { idle: 200 })).toEqual({ code: "upstream_timeout", message: "The worker sent nothing for 200 ms." });
    await expect.poll(() => closed.get("/stall")).toBe(before + 1);
  });

  it("a body that stalls is cut at the total deadline", async () => {
    expect(await outcome("/stall", { deadline: 200 })).toEqual({ code: "upstream_timeout", message: "The worker did not finish in time." });
  });

  it("the client going mid-read cuts it with cancelled; the connection closes", async () => {
    const before = closed.get("/stall") ?? 0;
    expect(await outcome("/stall", { clientGoneAfter: 100 })).toMatchObject({ code: "cancelled" });
    await expect.poll(() => closed.get("/stall")).toBe(before + 1);
  });

  it("a body shorter than its Content-Length fails as a broken connection", async () => {
    expect(await outcome("/short")).toEqual({ code: "upstream_error", message: "The connection to the worker failed mid-stream." });
  });

  it("a body longer than its Content-Length is read no further than it", async () => {
    expect(await outcome("/longer", { max: 10 })).toEqual({ text: "x".repeat(10) });
  });

  it("a body with both Transfer-Encoding and Content-Length is held to the cap, not read to its last chunk", async () => {
    expect(await outcome("/", { max: 1000, idle: 500 }, rawUpstream)).toMatchObject({ code: "upstream_too_large" });
    await expect.poll(() => rawClosed).toBe(1);
  });

  it("logs nothing uncaught", () => {
    expect(runtimeOutput()).not.toMatch(/uncaught/i);
  });
});
