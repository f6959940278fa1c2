// The bench's replayFetch against a real HTTP/1.1 server that closes a kept-alive connection as the
// next request arrives on it: what a client sees when its request races the server's idle close.
import { createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { replayFetch } from "../../../bench/lib/replay-fetch.mjs";

const ANSWER = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";

/** Answers the first request of each connection; `second` decides what a later one on it gets. */
function raceServer(second: "close" | "half-answer"): Promise<{ url: string; server: Server; requests: () => number }> {
  let requests = 0;
  const server = createServer((socket: Socket) => {
    let served = 0;
    socket.on("data", (chunk) => {
      for (const _ of chunk.toString("latin1").matchAll(/\r\n\r\n/g)) {
        requests++;
        if (served++ === 0) socket.write(ANSWER);
        else if (second === "close") socket.destroy();
        else socket.end("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok");
      }
    });
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      resolve({ url: `http://127.0.0.1:${port}/x`, server, requests: () => requests });
    }),
  );
}

/** Lets the client put the connection back in its pool (a request sent at once would take a new one). */
const settle = () => new Promise((r) => setTimeout(r, 20));

let open: Server | null = null;
afterEach(() => {
  open?.close();
  open = null;
});

describe("replayFetch", () => {
  it("sends a request again when its kept-alive connection is closed before any response byte", async () => {
    const s = await raceServer("close");
    open = s.server;
    expect(await (await fetch(s.url, { method: "POST", body: "a" })).text()).toBe("ok");
    await settle();
    // Plain fetch reuses the connection and fails: the race the bench saw.
    const plain = await fetch(s.url, { method: "POST", body: "b" }).catch((e: unknown) => e);
    expect(plain).toBeInstanceOf(TypeError);
    expect((plain as TypeError & { cause: { code: string } }).cause.code).toBe("UND_ERR_SOCKET");
    // The same race through replayFetch: the second attempt goes out on a fresh connection.
    expect(await (await fetch(s.url, { method: "POST", body: "c" })).text()).toBe("ok");
    await settle();
    const before = s.requests();
    const { response, start } = await replayFetch(s.url, { method: "POST", body: "d" });
    expect(await response.text()).toBe("ok");
    expect(s.requests() - before).toBe(2);
    expect(start).toBeLessThanOrEqual(performance.now());
  });

  it("does not send again once the response began", async () => {
    const s = await raceServer("half-answer");
    open = s.server;
    expect(await (await fetch(s.url, { method: "POST", body: "a" })).text()).toBe("ok");
    await settle();
    const before = s.requests();
    const { response } = await replayFetch(s.url, { method: "POST", body: "b" });
    await expect(response.text()).rejects.toThrow();
    expect(s.requests() - before).toBe(1);
  });

  it("ends a request the server never answers, and one whose answer stops midway", async () => {
    const sockets: Socket[] = [];
    const server = createServer((socket: Socket) => {
      sockets.push(socket);
      // The second connection's request gets its headers and part of its body, then nothing.
      if (sockets.length === 2) socket.write("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok");
    });
    open = server;
    const url = await new Promise<string>((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}/x`)));
    await expect(replayFetch(url, { method: "POST", body: "a" }, 200)).rejects.toThrow(/got no answer in 200 ms/);
    const { response } = await replayFetch(url, { method: "POST", body: "b" }, 200);
    await expect(response.text()).rejects.toThrow();
    for (const s of sockets) s.destroy();
  });

  it("refuses a body it could not send twice", async () => {
    const body = new ReadableStream({ start: (c) => c.close() });
    await expect(replayFetch("http://127.0.0.1:9/x", { method: "POST", body })).rejects.toThrow(/string or bytes/);
  });
});
