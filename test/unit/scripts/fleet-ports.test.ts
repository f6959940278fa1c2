import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort, freePortRange, PORT_CLASH_ATTEMPTS, PortClashError, reportsBindFailure, startOnFreshPorts } from "../../../scripts/fleet-ports.ts";

describe("reportsBindFailure", () => {
  it("recognises each way the fleet's children report a taken port", () => {
    // Node's listen (worker, encoder, decode service), ZeroMQ's bind (a worker's KV event ports), workerd and Miniflare (the edge).
    for (const line of [
      "sglang-sim: failed to start: Error: listen EADDRINUSE: address already in use 127.0.0.1:33301",
      "sglang-sim: failed to start: Error: Address already in use",
      "*** Fatal uncaught kj::Exception: kj/async-io-unix.c++:941: failed: ::bind(sockfd, &addr.generic, addrlen): Address already in use; toString() = 127.0.0.1:41595",
      "MiniflareCoreError [ERR_ADDRESS_IN_USE]: Address already in use (127.0.0.1:41595).",
    ]) {
      expect(reportsBindFailure(line), line).toBe(true);
    }
    for (const line of ["decode: failed to start: Error: EACCES: permission denied", '{"ready":true,"url":"http://127.0.0.1:34127"}', "Error: connect ECONNREFUSED 127.0.0.1:4000"]) {
      expect(reportsBindFailure(line), line).toBe(false);
    }
  });
});

describe("startOnFreshPorts", () => {
  it("starts again after a port clash, and returns the start that succeeded", async () => {
    let calls = 0;
    const result = await startOnFreshPorts(async () => {
      calls++;
      if (calls < PORT_CLASH_ATTEMPTS) throw new PortClashError(`clash ${calls}`);
      return `up on attempt ${calls}`;
    });
    expect(result).toBe(`up on attempt ${PORT_CLASH_ATTEMPTS}`);
    expect(calls).toBe(PORT_CLASH_ATTEMPTS);
  });

  it("gives up after PORT_CLASH_ATTEMPTS clashes with a plain Error, so an enclosing start does not try again", async () => {
    let calls = 0;
    const outer = startOnFreshPorts(() =>
      startOnFreshPorts(async () => {
        calls++;
        throw new PortClashError("worker w1: process exited with 1; its last output:\nlisten EADDRINUSE");
      }),
    );
    const err = await outer.then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(PortClashError);
    expect((err as Error).message).toMatch(/EADDRINUSE[\s\S]*taken on all 3 attempts/);
    expect(calls).toBe(PORT_CLASH_ATTEMPTS);
  });

  it("passes any other failure through at once", async () => {
    let calls = 0;
    const err = await startOnFreshPorts(async () => {
      calls++;
      throw new Error("worker w1: process exited with 1");
    }).then(() => null, (e: unknown) => e);
    expect((err as Error).message).toBe("worker w1: process exited with 1");
    expect(calls).toBe(1);
  });
});

describe("freePort and freePortRange", () => {
  it("never hands out the same port twice", async () => {
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
    expect(new Set(ports).size).toBe(20);
  });

  it("takes the range's first port from the picker and skips a range with a taken port", async () => {
    // The picker first offers a port whose successor is held, then a free one.
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, "127.0.0.1", r));
    const heldPort = (holder.address() as { port: number }).port;
    const offered: number[] = [];
    const first = await freePortRange(2, async () => {
      const port = offered.length === 0 ? heldPort - 1 : await freePort();
      offered.push(port);
      return port;
    });
    await new Promise<void>((r) => holder.close(() => r()));
    expect(offered[0]).toBe(heldPort - 1);
    expect(offered).toContain(first);
    expect(first).not.toBe(heldPort - 1);
  });
});
