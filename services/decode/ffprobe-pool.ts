/**
 * Pre-started native ffprobe processes. Most of a native probe's latency is process start (the
 * dynamic linking of ~200 FFmpeg libraries: about 100 ms on an idle 2-core box, 150-300 ms under
 * load), not the scan. Each slot starts its next ffprobe as soon as the previous one has exited,
 * with the input path fixed in advance and FFREPORT naming a FIFO as its report file: ffprobe
 * opens the report file right after start and before it opens any input, and opening a FIFO for
 * writing blocks until a reader opens it. A probe links the media to the slot's input path and
 * then opens the FIFO; the waiting ffprobe goes on with the scan.
 *
 * Correctness does not rest on the gate being reached in time: ffprobe writes "Command line:" to
 * its report file as soon as it has opened it, so a report that starts so proves the input was
 * opened after the link existed. A run without it (an ffprobe that ignores FFREPORT) is repeated
 * with a fresh process and the pool switches itself off.
 *
 * Bounds: at most `size` processes wait, each in its own 0700 directory; they run under
 * `setpriv --pdeathsig KILL`, so they die with this process even when it is killed, and
 * `close()` kills them; each runs under the prober's memory cap (ffprobe-run.ts memoryCapped).
 * Linux only (FIFO opened O_RDWR never blocks; setpriv is util-linux).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { constants } from "node:fs";
import { mkdir, mkdtemp, open, rm, symlink, unlink } from "node:fs/promises";
import path from "node:path";
import { ffprobeArgs } from "./ffprobe-scan.ts";
import { memoryCapped, startFfprobe, type FfprobeOutcome, type FfprobeRun } from "./ffprobe-run.ts";

const GATE = "gate";
const INPUT = "input";
const REPORT_HEADER = "Command line:";
/** `setpriv --pdeathsig KILL -- cmd …` execs cmd (same pid), which then dies with this process. */
const PDEATHSIG = ["--pdeathsig", "KILL", "--"];

export interface PooledOutcome extends FfprobeOutcome {
  timedOut: boolean;
}

interface Slot {
  dir: string;
  run: FfprobeRun | null;
  /** The idle process exited on its own (killed from outside, or it ignored the gate). */
  dead: boolean;
  busy: boolean;
}

export class FfprobePool {
  private readonly ffprobe: string;
  private readonly memoryBytes: number;
  private readonly root: string;
  private readonly slots: Slot[];
  private closed = false;
  /** False once a run showed this ffprobe does not wait at the gate. */
  private gated = true;

  private constructor(ffprobe: string, memoryBytes: number, root: string, dirs: string[]) {
    this.ffprobe = ffprobe;
    this.memoryBytes = memoryBytes;
    this.root = root;
    this.slots = dirs.map((dir) => ({ dir, run: null, dead: false, busy: false }));
    for (const s of this.slots) this.prestart(s);
  }

  /** Creates the slots' FIFOs (one `setpriv … mkfifo` run, which also proves setpriv works); null when that fails. */
  static async create(ffprobe: string, memoryBytes: number, size: number, tmpDir: string): Promise<FfprobePool | null> {
    // Absolute: each ffprobe runs in its slot's directory.
    const root = path.resolve(await mkdtemp(path.join(tmpDir, "kvedge-ffprobe-")));
    const dirs = Array.from({ length: Math.max(1, size) }, (_, i) => path.join(root, `s${i}`));
    for (const d of dirs) await mkdir(d, { mode: 0o700 });
    const made = await new Promise<boolean>((resolve) => {
      const c = spawn("setpriv", PDEATHSIG.concat("mkfifo", "-m", "600", ...dirs.map((d) => path.join(d, GATE))), { stdio: "ignore" });
      c.on("error", () => resolve(false));
      c.on("close", (code) => resolve(code === 0));
    });
    if (!made) {
      await rm(root, { recursive: true, force: true });
      return null;
    }
    return new FfprobePool(ffprobe, memoryBytes, root, dirs);
  }

  get enabled(): boolean {
    return this.gated && !this.closed;
  }

  private prestart(slot: Slot): void {
    slot.dead = false;
    const [cmd, args] = memoryCapped(this.ffprobe, ffprobeArgs(path.join(slot.dir, INPUT)), this.memoryBytes);
    const run = startFfprobe("setpriv", PDEATHSIG.concat(cmd, ...args), {
      // A relative report name: FFREPORT's value is a key=value list with its own escaping.
      cwd: slot.dir,
      env: { ...process.env, FFREPORT: `file=${GATE}:level=-8` },
    });
    slot.run = run;
    // An idle process must not keep this process alive; a taken one is ref'd again.
    setRef(run.child, false);
    void run.outcome.then(() => {
      if (slot.run === run && !slot.busy) slot.dead = true;
    });
  }

  /**
   * Scans `mediaPath` with a waiting process; null when no slot is free or the pool is off (the
   * caller starts its own ffprobe). The time limit counts from here, start-up included.
   */
  async scan(mediaPath: string, timeoutMs: number): Promise<PooledOutcome | null> {
    const free = this.enabled ? this.slots.filter((s) => !s.busy) : [];
    const slot = free.find((s) => !s.dead) ?? free[0];
    if (!slot) return null;
    slot.busy = true;
    try {
      if (!slot.run || slot.dead) this.prestart(slot);
      const run = slot.run!;
      setRef(run.child, true);
      const outcome = await this.release(slot, run, path.resolve(mediaPath), timeoutMs);
      if (outcome === null) this.switchOff();
      return outcome;
    } finally {
      slot.busy = false;
      slot.run = null;
      if (!this.closed && this.gated) this.prestart(slot);
    }
  }

  /** null: the run did not wait at the gate, so its answer is not trusted. */
  private async release(slot: Slot, run: FfprobeRun, mediaPath: string, timeoutMs: number): Promise<PooledOutcome | null> {
    const input = path.join(slot.dir, INPUT);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      run.child.kill("SIGKILL");
    }, timeoutMs);
    await unlink(input).catch(() => {});
    let gate: Awaited<ReturnType<typeof open>> | null = null;
    try {
      await symlink(mediaPath, input);
      gate = await open(path.join(slot.dir, GATE), constants.O_RDWR | constants.O_NONBLOCK);
      const outcome = await run.outcome;
      if (timedOut) return { ...outcome, timedOut };
      const head = Buffer.alloc(REPORT_HEADER.length);
      const { bytesRead } = await gate.read(head, 0, head.length, null).catch(() => ({ bytesRead: 0 }));
      if (head.subarray(0, bytesRead).toString("latin1") !== REPORT_HEADER) return null;
      return { ...outcome, timedOut };
    } catch (e) {
      run.child.kill("SIGKILL");
      throw e;
    } finally {
      clearTimeout(timer);
      await gate?.close().catch(() => {});
      await unlink(input).catch(() => {});
    }
  }

  /** This ffprobe does not wait at the gate: the idle processes go, and every probe starts its own. */
  private switchOff(): void {
    this.gated = false;
    for (const s of this.slots) if (!s.busy) s.run?.child.kill("SIGKILL");
  }

  async close(): Promise<void> {
    this.closed = true;
    const runs = this.slots.map((s) => s.run).filter((r): r is FfprobeRun => r !== null);
    for (const r of runs) {
      setRef(r.child, true); // held until its exit is seen
      r.child.kill("SIGKILL");
    }
    await Promise.all(runs.map((r) => r.outcome));
    await rm(this.root, { recursive: true, force: true });
  }
}

function setRef(child: ChildProcess, on: boolean): void {
  for (const h of [child, child.stdout, child.stderr]) {
    const r = h as unknown as { ref?: () => void; unref?: () => void } | null;
    if (on) r?.ref?.();
    else r?.unref?.();
  }
}
