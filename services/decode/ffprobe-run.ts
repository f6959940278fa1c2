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
}

const MAX_STDERR = 8192;

export interface FfprobeRun {
  child: ChildProcess;
  outcome: Promise<FfprobeOutcome>;
}

export function startFfprobe(command: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): FfprobeRun {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: opts.env, cwd: opts.cwd });
  const parser = new FfprobeOutputParser();
  let stderr = "";
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (s: string) => parser.push(s));
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (s: string) => {
    if (stderr.length < MAX_STDERR) stderr += s;
  });
  const outcome = new Promise<FfprobeOutcome>((resolve) => {
    let settled = false;
    child.on("error", (error) => {
      if (settled) return;
      settled = true;
      resolve({ code: null, scan: null, stderr, error });
    });
    child.on("close", (code) => {
      if (settled) return;
      settled = true;
      resolve({ code, scan: code === 0 ? parser.finish() : null, stderr, error: null });
    });
  });
  return { child, outcome };
}
