/**
 * The local fleet's ports. freePort hands out a port no other part of the fleet holds; a port can
 * still be taken before the service binds it (outgoing connections, the fleet's own included, draw
 * their local ports from the same ephemeral range), so every start on handed-out ports goes through
 * startOnFreshPorts, which starts it again on fresh ones when it failed on a taken port.
 */
import { createServer } from "node:net";

/**
 * Picks a port for one of the fleet's services, named as its logs are ("edge", "decode", "w1",
 * "w1-e1"; "w1 kv" and "w1 replay" for a worker's event ports): freePort, or a test's picker.
 */
export type PortPicker = (service: string) => Promise<number>;

// Ports this process has handed out: the kernel may give a just-closed ephemeral port to the next
// bind(0), so two calls in a row could otherwise return the same port (e.g. a worker's HTTP and KV
// event ports), and the worker exits at once when they collide.
const issuedPorts = new Set<number>();

export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await ephemeralPort();
    if (!issuedPorts.has(port)) {
      issuedPorts.add(port);
      return port;
    }
  }
  throw new Error("freePort: no unused ephemeral port after 50 attempts");
}

/** Never hands `port` out (a port the caller chose, which the kernel's next bind(0) may answer). */
export function reservePort(port: number): void {
  issuedPorts.add(port);
}

/** `count` consecutive free ports (a DP worker's per-rank event ports), the first from `pick`: the first of them. */
export async function freePortRange(count: number, pick: () => Promise<number>): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const first = await pick();
    const rest = Array.from({ length: count - 1 }, (_, k) => first + 1 + k);
    if (rest.some((p) => p > 65535 || issuedPorts.has(p))) continue;
    if ((await Promise.all(rest.map(portIsFree))).every(Boolean)) {
      for (const p of rest) issuedPorts.add(p);
      return first;
    }
  }
  throw new Error(`freePortRange: no ${count} consecutive free ports after 50 attempts`);
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

function ephemeralPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** Starts of a service on fresh ports when the last one failed on a taken port. */
export const PORT_CLASH_ATTEMPTS = 3;

// How a process says a port it was given is taken: Node's listen ("listen EADDRINUSE"), ZeroMQ's
// bind (the simulator's KV event ports: "Address already in use") and workerd's through Miniflare
// ("::bind(...): Address already in use", ERR_ADDRESS_IN_USE).
const BIND_FAILURE = /EADDRINUSE|address already in use/i;

/** Whether a line a process printed reports a failed bind. */
export function reportsBindFailure(line: string): boolean {
  return BIND_FAILURE.test(line);
}

/** A process exited before it was ready, having reported a failed bind: its start may go again on fresh ports. */
export class PortClashError extends Error {
  override readonly name = "PortClashError";
}

/**
 * Runs `start`, which picks its ports afresh on every call and throws PortClashError when one was
 * taken, until it succeeds, at most PORT_CLASH_ATTEMPTS times. The last clash comes out as a plain
 * Error, so a start nested in another (a worker's encoders) is not tried again from the outside.
 * A restart on a service's own ports (a test's fault injection) does not come here.
 */
export async function startOnFreshPorts<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (e) {
      if (!(e instanceof PortClashError)) throw e;
      if (attempt >= PORT_CLASH_ATTEMPTS) throw new Error(`${e.message}\n(its ports were taken on all ${PORT_CLASH_ATTEMPTS} attempts)`, { cause: e });
    }
  }
}
