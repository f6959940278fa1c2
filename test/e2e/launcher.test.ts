/**
 * The launcher owns its children: `node scripts/start.ts` (what `npm start` runs) is stopped with
 * SIGINT or SIGTERM, or killed with SIGKILL (no chance to clean up), and every process it started (simulators, relays,
 * decode service, the edge's Miniflare host and its workerd, the reaper) must be gone within 5 s; a start that
 * fails half-way (the edge port already taken, after the decode service and a worker are up) must
 * exit non-zero and leave nothing running either. Processes are found through /proc: descendants
 * of the launcher by parent pid, and members of their process groups.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../scripts/fleet-ports.ts";
import { EDGE_BUILD_ENV } from "../../scripts/local-edge.ts";

const ROOT = join(import.meta.dirname, "../..");

interface Proc {
  pid: number;
  ppid: number;
  pgid: number;
  cmd: string;
}

function processes(): Proc[] {
  const out: Proc[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (f[0] === "Z") continue; // a zombie has already exited
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").replaceAll("\0", " ").trim();
      out.push({ pid: Number(d), ppid: Number(f[1]), pgid: Number(f[2]), cmd });
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** Every process below `root` (by parent pid), and everything in those processes' groups. */
function fleetOf(root: number): Map<number, string> {
  const all = processes();
  const found = new Map<number, string>();
  let frontier = [root];
  while (frontier.length) {
    const next: number[] = [];
    for (const p of all) if (frontier.includes(p.ppid) && !found.has(p.pid)) (found.set(p.pid, p.cmd), next.push(p.pid));
    frontier = next;
  }
  const own = all.find((p) => p.pid === root)?.pgid; // the launcher's group is the test runner's
  const groups = new Set([...found.keys()].map((pid) => all.find((p) => p.pid === pid)!.pgid).filter((g) => g !== own));
  for (const p of all) if (groups.has(p.pgid)) found.set(p.pid, p.cmd);
  return found;
}

async function survivors(pids: Map<number, string>, withinMs: number): Promise<string[]> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const live = new Set(processes().map((p) => p.pid));
    const left = [...pids].filter(([pid]) => live.has(pid)).map(([pid, cmd]) => `${pid} ${cmd.slice(0, 120)}`);
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The image and video examples the launcher printed work as printed: each, sent twice, is routed
 * exactly (the media laid out, not the text-prefix fallback) and the repeat overlaps every block.
 */
async function examplesWork(output: string, port: number): Promise<void> {
  const bodies = [...output.matchAll(/-d '(\{.*\})'$/gm)].map((m) => m[1]!);
  const media = bodies.filter((b) => b.includes('"image_url"') || b.includes('"video_url"'));
  expect(media.map((b) => (b.includes("image_url") ? "image" : "video"))).toEqual(["image", "video"]);
  for (const body of media) {
    const send = async () => {
      const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const j = (await r.json()) as { usage?: { prompt_tokens_details?: { cached_tokens?: number } } };
      expect(r.status, JSON.stringify(j)).toBe(200);
      return { routing: r.headers.get("x-kvedge-routing"), overlap: Number(r.headers.get("x-kvedge-overlap-blocks")), total: Number(r.headers.get("x-kvedge-total-blocks")), cached: j.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
    };
    await send();
    const again = await send();
    expect(again.routing, body).toBe("exact");
    expect(again.total).toBeGreaterThan(0);
    expect(again.overlap).toBe(again.total);
    expect(again.cached).toBe(again.total * 16);
  }
}

let launcher: ChildProcess | null = null;
let stateDir = "";
let childTmp = "";
let blocker: Server | null = null;
const blockerSockets: Socket[] = [];

function startLauncher(port: number): { proc: ChildProcess; output: () => string; exited: Promise<number | null> } {
  stateDir = mkdtempSync(join(tmpdir(), "kvedge-launcher-"));
  childTmp = mkdtempSync(join(tmpdir(), "kvedge-launcher-tmp-"));
  // npm start as a user runs it: its own edge bundle (wrangler), not the e2e run's shared one, in a
  // temp dir of its own so that the test sees the launcher remove it.
  const env = { ...process.env };
  delete env[EDGE_BUILD_ENV];
  const proc = spawn(process.execPath, [join(ROOT, "scripts/start.ts")], {
    cwd: ROOT,
    env: { ...env, TMPDIR: childTmp, PORT: String(port), KVEDGE_WORKERS: "1", KVEDGE_STATE_DIR: stateDir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  launcher = proc;
  let text = "";
  proc.stdout!.on("data", (b: Buffer) => (text += b.toString()));
  proc.stderr!.on("data", (b: Buffer) => (text += b.toString()));
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  return { proc, output: () => text, exited };
}

afterEach(async () => {
  if (launcher && launcher.exitCode === null && launcher.signalCode === null) launcher.kill("SIGKILL");
  launcher = null;
  for (const sock of blockerSockets.splice(0)) sock.destroy();
  if (blocker) await new Promise((r) => blocker!.close(r));
  blocker = null;
  rmSync(stateDir, { recursive: true, force: true });
  rmSync(childTmp, { recursive: true, force: true });
});

/** The edge bundles the launcher made and left in its temp dir. */
const bundlesLeft = (): string[] => readdirSync(childTmp).filter((d) => d.startsWith("kvedge-edge-bundle-"));

describe("npm start owns its children", () => {
  it.each(["SIGKILL", "SIGTERM", "SIGINT"] as const)("%s of the launcher leaves no process of the fleet running within 5 s", async (signal) => {
    const port = await freePort();
    const l = startLauncher(port);
    const seen = new Map<number, string>();
    const deadline = Date.now() + 150_000;
    while (!l.output().includes("kvedge is up")) {
      if (l.proc.exitCode !== null) throw new Error(`launcher exited early:\n${l.output()}`);
      if (Date.now() > deadline) throw new Error(`launcher not up in time:\n${l.output()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    for (const [pid, cmd] of fleetOf(l.proc.pid!)) seen.set(pid, cmd);
    // "up" means ready: /readyz agrees, and the first request (the printed text example) succeeds.
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
    const text = [...l.output().matchAll(/-d '(\{.*\})'$/gm)].map((m) => m[1]!).find((b) => !b.includes("_url"))!;
    const first = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
    expect(first.status, await first.text()).toBe(200);
    if (signal === "SIGKILL") await examplesWork(l.output(), port);
    const cmds = [...seen.values()].join("\n");
    // The whole fleet was found: decode service, simulator, relay, the edge's host with workerd, reaper.
    for (const part of ["services/decode/main.ts", "services/sglang-sim/main.ts", "services/relay/main.ts", "scripts/edge-host.ts", "workerd", "fleet-reaper"]) {
      expect(cmds).toContain(part);
    }
    l.proc.kill(signal);
    await l.exited;
    expect(await survivors(new Map([...seen].map(([pid, s]) => [pid, [...s].join(" | ")])), 5_000)).toEqual([]);
    // A stop removes its bundle (SIGKILL leaves it: nothing of the launcher runs after it).
    if (signal !== "SIGKILL") expect(bundlesLeft()).toEqual([]);
    // and the edge port is free again
    await new Promise<void>((resolve, reject) => {
      const s = createServer().once("error", reject);
      s.listen(port, "127.0.0.1", () => s.close(() => resolve()));
    });
  });

  it("a start that fails half-way (edge port taken) exits 1 and leaves nothing running", async () => {
    const port = await freePort();
    blocker = createServer((sock) => blockerSockets.push(sock.on("error", () => {}))); // accepts and never answers; a peer's reset is not an error here
    await new Promise<void>((r) => blocker!.listen(port, "127.0.0.1", r));
    const l = startLauncher(port);
    // Collect the fleet while it starts (the pieces come and go: under load a worker started just
    // before the edge fails can live for less than a poll). Every command line a pid showed is kept
    // (a child shows its parent's until it execs).
    const seen = new Map<number, Set<string>>();
    const watch = setInterval(() => {
      for (const [pid, cmd] of fleetOf(l.proc.pid!)) (seen.get(pid) ?? seen.set(pid, new Set()).get(pid)!).add(cmd);
    }, 20);
    const code = await l.exited;
    clearInterval(watch);
    expect(code, l.output()).toBe(1);
    expect(l.output()).toContain("failed to start");
    const cmds = [...seen.values()].flatMap((s) => [...s]).join("\n");
    expect(cmds).toContain("services/sglang-sim/main.ts"); // it really failed half-way
    expect(cmds).toContain("services/decode/main.ts");
    expect(await survivors(new Map([...seen].map(([pid, s]) => [pid, [...s].join(" | ")])), 5_000)).toEqual([]);
    expect(bundlesLeft()).toEqual([]);
  });
});
