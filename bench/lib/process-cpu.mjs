// CPU time and page faults of local processes from Linux /proc, for per-request figures in the profiling scripts.
import { readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** The fields of /proc/<pid>/stat after the command name: index 0 is field 3 (state). */
function statFields(pid) {
  return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
}

/** utime + stime of process `pid`, in ms. */
export function processCpuMs(pid) {
  const f = statFields(pid);
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_SECOND;
}

/** Minor page faults of a process so far (its first touches of fresh pages; Linux only). */
export function processMinorFaults(pid) {
  return Number(statFields(pid)[7]);
}
