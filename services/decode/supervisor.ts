/**
 * Keeps one decode service process running: starts it as a child (same Node, same arguments),
 * and when it exits unasked starts it again after a backoff (doubling from `minBackoffMs` to
 * `maxBackoffMs`; back to the minimum once a child has run `stableMs`). Restarts keep what a
 * worker's signed URL depends on: the port the first child bound (when asked for port 0) and the
 * store directory (a temp directory of the supervisor's when none is given, removed when it ends),
 * which the new child re-indexes (media-store.ts). A child that exits before it was ever ready
 * (bad options, port in use) is not restarted, nor one that stopped in order (code 0): the supervisor
 * exits with its code.
 * The child is tied to the supervisor by an IPC channel and exits when it closes, so killing the
 * supervisor (even with SIGKILL) leaves no orphan. SIGINT/SIGTERM stop the child (SIGKILL after
 * 10 s), then the supervisor.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";

/** How long a child has to stop after SIGTERM before it is killed. */
const STOP_GRACE_MS = 10_000;

/** Set in the child's environment: it serves instead of supervising. */
export const SUPERVISED_ENV = "KVEDGE_DECODE_SUPERVISED";

export interface SupervisorOptions {
  /** The service's entry script and its arguments (without --port / --store-dir when the supervisor picks them). */
  script: string;
  args: string[];
  /** The port asked for (0: the first child's choice is kept for every restart). */
  port: number;
  /** The store directory asked for (null: a temp directory of the supervisor's). */
  storeDir: string | null;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  stableMs?: number;
  log?: (msg: string) => void;
}

/** Does the running process serve (a supervised child) rather than supervise? */
export function isSupervisedChild(): boolean {
  return process.env[SUPERVISED_ENV] === "1" && typeof process.send === "function";
}

/** In a supervised child: exit when the supervisor goes away (its IPC channel closes). */
export function exitWithSupervisor(): void {
  process.on("disconnect", () => process.exit(0));
  process.channel?.unref();
}

export function supervise(o: SupervisorOptions): void {
  const log = o.log ?? ((m: string) => process.stderr.write(`decode-supervisor: ${m}\n`));
  const minBackoff = o.minBackoffMs ?? 250;
  const maxBackoff = o.maxBackoffMs ?? 30_000;
  const stableMs = o.stableMs ?? 60_000;
  const ownDir = o.storeDir === null ? mkdtempSync(path.join(os.tmpdir(), "kvedge-store-")) : null;
  const storeDir = o.storeDir ?? ownDir!;
  let port = o.port;
  let everReady = false;
  let backoff = minBackoff;
  let child: ChildProcess | null = null;
  let stopping = false;
  let restartTimer: NodeJS.Timeout | null = null;

  const finish = (code: number): never => {
    if (ownDir) rmSync(ownDir, { recursive: true, force: true });
    process.exit(code);
  };

  const start = (): void => {
    const args = [...process.execArgv, o.script, ...o.args, "--port", String(port), "--store-dir", storeDir];
    const startedAt = Date.now();
    const c = spawn(process.execPath, args, { env: { ...process.env, [SUPERVISED_ENV]: "1" }, stdio: ["ignore", "pipe", "inherit", "ipc"] });
    child = c;
    log(`started the service, pid ${c.pid}`);
    createInterface({ input: c.stdout! }).on("line", (line) => {
      const ready = readyUrl(line);
      if (ready === null) return void process.stdout.write(line + "\n");
      // The first ready line is the service's; a restart's is news for the log only.
      if (!everReady) process.stdout.write(line + "\n");
      else log(`the service is serving again (pid ${c.pid})`);
      everReady = true;
      port = Number(new URL(ready).port) || port;
    });
    c.on("exit", (code, signal) => {
      child = null;
      // Exit code 0 is the service's own orderly stop (a signal it was sent, e.g. Ctrl-C's to the group).
      if (stopping || code === 0) return finish(0);
      if (!everReady) {
        log(`the service exited before it was ready (${signal ?? code}); not restarting`);
        return finish(code ?? 1);
      }
      if (Date.now() - startedAt >= stableMs) backoff = minBackoff;
      log(`the service exited (${signal ?? `code ${code}`}); starting it again in ${backoff} ms`);
      restartTimer = setTimeout(start, backoff);
      backoff = Math.min(maxBackoff, backoff * 2);
    });
  };

  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    if (restartTimer) clearTimeout(restartTimer);
    if (!child) return void finish(0);
    child.kill("SIGTERM");
    // A child that does not stop in time is killed.
    setTimeout(() => child?.kill("SIGKILL"), STOP_GRACE_MS).unref();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  start();
}

function readyUrl(line: string): string | null {
  if (!line.startsWith("{")) return null;
  try {
    const j = JSON.parse(line) as { ready?: unknown; url?: unknown };
    return j.ready === true && typeof j.url === "string" ? j.url : null;
  } catch {
    return null;
  }
}
