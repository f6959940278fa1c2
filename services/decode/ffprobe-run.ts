/**
 * One ffprobe child, started and collected: stdout goes through the streaming scan parser, at most
 * 8 KiB of stderr is kept, and the outcome resolves once the process has exited and its pipes
 * have closed (or it could not be started).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { FfprobeOutputParser, type ScanResult } from "./ffprobe-scan.ts";

export interface FfprobeOutcome {
  code: number | null;
  /** null when ffprobe reported no video stream (or printed nothing). */
  scan: ScanResult | null;
  stderr: string;
  /** The process could not be started (e.g. ENOENT). */
  error: Error | null;
  /** It printed more packets than MAX_PROBE_PACKETS and was stopped. */
  tooManyPackets: boolean;
}

const MAX_STDERR = 8192;

export interface FfprobeRun {
  child: ChildProcess;
  outcome: Promise<FfprobeOutcome>;
}

/** Data-segment cap of a native ffprobe: a legitimate probe needs tens of MB. */
export const DEFAULT_PROBE_MEMORY_BYTES = 512 * 1024 * 1024;

/**
 * ffprobe under a data-segment cap (`prlimit --data`, util-linux; RLIMIT_DATA counts the heap and
 * private anonymous mappings, not the shared libraries): a 4.7 KB MP4 declaring 86 M samples made
 * ffprobe's index take 2 GB and 5-60 s; capped at 512 MiB it gives up in 0.1 s. prlimit execs the
 * command, so the pid (and a kill) is ffprobe's.
 */
export function memoryCapped(ffprobe: string, args: string[], memoryBytes: number): [string, string[]] {
  return ["prlimit", [`--data=${memoryBytes}`, "--", ffprobe, ...args]];
}

/** Can this host cap a child's memory (prlimit present and working)? */
export function prlimitAvailable(): Promise<boolean> {
  return new Promise((resolve) => {
    const c = spawn("prlimit", ["--data=1073741824", "--", "true"], { stdio: "ignore" });
    c.on("error", () => resolve(false));
    c.on("close", (code) => resolve(code === 0));
  });
}

export function startFfprobe(command: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): FfprobeRun {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: opts.env, cwd: opts.cwd });
  const parser = new FfprobeOutputParser();
  let stderr = "";
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (s: string) => {
    parser.push(s);
    if (parser.overflowed) child.kill("SIGKILL");
  });
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (s: string) => {
    if (stderr.length < MAX_STDERR) stderr += s;
  });
  const outcome = new Promise<FfprobeOutcome>((resolve) => {
    let settled = false;
    child.on("error", (error) => {
      if (settled) return;
      settled = true;
      resolve({ code: null, scan: null, stderr, error, tooManyPackets: false });
    });
    child.on("close", (code) => {
      if (settled) return;
      settled = true;
      resolve({ code, scan: code === 0 ? parser.finish() : null, stderr, error: null, tooManyPackets: parser.overflowed });
    });
  });
  return { child, outcome };
}
