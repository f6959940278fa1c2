/**
 * The decode service's last line of defence (services/decode/last-resort.ts), in a process of its
 * own: an exception thrown from a request's callback, outside any promise, ends only that request
 * (500) and the process serves on; an unhandled rejection is logged and dropped; an exception
 * outside any request exits the process with code 70 (for the supervisor to restart it).
 */
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";

let proc: ChildProcess | null = null;
const stderr: string[] = [];

async function start(): Promise<string> {
  proc = spawn(process.execPath, [path.resolve("test/helpers/last-resort-server.ts")], { stdio: ["ignore", "pipe", "pipe"] });
  createInterface({ input: proc.stderr! }).on("line", (l) => stderr.push(l));
  const port = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc!.stdout! }).once("line", resolve);
    proc!.once("exit", (c) => reject(new Error(`exited ${c}: ${stderr.join("\n")}`)));
  });
  return `http://127.0.0.1:${port}`;
}

afterEach(() => {
  if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
  stderr.length = 0;
});

describe("last resort of the decode service", () => {
  it("an exception escaping one request's callbacks answers that request 500; the process serves on", async () => {
    const url = await start();
    const [bad, good] = await Promise.all([fetch(`${url}/throw`), fetch(`${url}/ok`)]);
    expect([bad.status, await bad.text()]).toEqual([500, "last resort"]);
    expect(good.status).toBe(200);
    expect((await fetch(`${url}/reject`)).status).toBe(200);
    expect((await fetch(`${url}/ok`)).status).toBe(200);
    expect(proc!.exitCode).toBeNull();
    expect(stderr.some((l) => l.includes("a request failed outside its handler (answered 500): Error: thrown in a callback"))).toBe(true);
    expect(stderr.some((l) => l.includes("unhandled rejection (dropped): Error: nobody handles this"))).toBe(true);
  });

  it("an exception outside any request exits with code 70", async () => {
    const url = await start();
    const exited = new Promise<number | null>((r) => proc!.once("exit", (c) => r(c)));
    await fetch(`${url}/outside`);
    expect(await exited).toBe(70);
    expect(stderr.some((l) => l.includes("uncaught exception outside any request, exiting: Error: thrown outside any request"))).toBe(true);
  });
});
