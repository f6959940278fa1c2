// CPU time and page faults of local processes from Linux /proc, for per-request figures in the benchmarks and profiling scripts.
import { readdirSync, readFileSync } from "node:fs";

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

/**
 * On-CPU time of every thread of process `pid` so far, in ms at ns resolution (the scheduler's own
 * sum, /proc/<pid>/task/<tid>/schedstat field 1; a thread that has exited drops out, so read it
 * around work, not across thread churn).
 */
export function processCpuPreciseMs(pid) {
  return processAndMainThreadCpuMs(pid).process;
}

/**
 * processCpuPreciseMs(pid) and, from the same pass over its threads, the main thread's (tid = pid)
 * part. `workerd serve` runs its event loop on the main thread ("workerd"), and with it every
 * isolate: the JS and the runtime's I/O for it (inbound HTTP, capnp RPC, fetch). Its other threads
 * are V8's platform worker ("V8 DefaultWorke": concurrent compilation, GC marking and sweeping) and
 * a Rust runtime's two ("tokio-rt-worker", idle here). Read together, the main thread's growth
 * between two reads never exceeds the process's (read apart, the later read counts time the
 * earlier one did not).
 */
export function processAndMainThreadCpuMs(pid) {
  let ns = 0;
  let main = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const t = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
      ns += t;
      if (tid === String(pid)) main = t;
    } catch {}
  }
  return { process: ns / 1e6, mainThread: main / 1e6 };
}

/**
 * The workerd binary's pid: the fleet spawns the npm package's bin, a Node launcher whose child is
 * the native workerd (its CPU is the Worker's; the launcher's is not).
 */
export function nativeWorkerdPid(pid) {
  for (let depth = 0; depth < 3; depth++) {
    const comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
    if (comm !== "node") return pid;
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean);
    if (children.length !== 1) break;
    pid = Number(children[0]);
  }
  return pid;
}

/**
 * Waits until processes `pids` together spend under `maxShare` of one core over `windows`
 * consecutive windows of `windowMs` (or `timeoutMs` passes), so one case's leftover work (a relay's
 * KV-event backlog the index is still ingesting) is not billed to the next. Returns the ms waited.
 */
export async function waitForQuiet(pids, { windowMs = 100, maxShare = 0.02, windows = 2, timeoutMs = 15_000 } = {}) {
  const live = pids.filter((p) => p != null);
  const total = () => live.reduce((s, p) => s + processCpuPreciseMs(p), 0);
  const t0 = performance.now();
  let quiet = 0;
  let before = total();
  while (quiet < windows && performance.now() - t0 < timeoutMs) {
    await new Promise((r) => setTimeout(r, windowMs));
    const now = total();
    quiet = now - before < windowMs * maxShare ? quiet + 1 : 0;
    before = now;
  }
  return performance.now() - t0;
}
