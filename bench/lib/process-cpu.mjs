// CPU time of local processes from Linux /proc, for per-request CPU figures in the profiling scripts.
import { readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** utime + stime of process `pid`, in ms. */
export function processCpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_SECOND;
}

/** Minor page faults of a process so far (its first touches of fresh pages; Linux only). */
export function processMinorFaults(pid) {
  return Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[7]);
}
