#!/usr/bin/env node
// When, in wall time, workerd does its part of an edge request. Starts the bench's edge fleet
// (bench/lib/edge-fleet.mjs) and records the workerd process's reads and writes (sockets among
// others) with Linux `perf` syscall tracepoints (a few events per request, so the timeline is
// hardly disturbed), plus cpu-clock samples without call graphs. Per request it finds
//   in     the last read of the client's body,
//   up     the first write on the worker's connection after it (the `/generate` request's head),
//   resp   the first bytes read back on that connection (the worker's answer),
//   first, out   the first and the last write to the client before the next request,
// and prints the p50 and mean of the windows between them: before (read, parse, prepare, route,
// build), worker, and after (translation and the reply; a stream's last write is its end), with
// the three busiest workerd threads' time on a CPU inside each window (mean per request). A window
// much longer than its thread's busy time is waiting (a lock, another thread, the scheduler); one
// about as long is work, which scripts/perf-edge.mjs breaks down. Needs `perf` and permission to
// record syscall tracepoints (root, or perf_event_paranoid ≤ -1).
// Usage: node scripts/trace-edge.mjs [--tokens 32000] [--n 80] [--cold] [--stream]
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startEdgeFleet } from "../bench/lib/edge-fleet.mjs";
import { requestShape, requirePerf, workerdPid } from "../bench/lib/perf-session.mjs";
import { summarize } from "../bench/lib/stats.mjs";

const { values: opt } = parseArgs({ options: { tokens: { type: "string", default: "32000" }, n: { type: "string", default: "80" }, cold: { type: "boolean", default: false }, stream: { type: "boolean", default: false } } });
const TOKENS = Number(opt.tokens);
const N = Number(opt.n);
const SAMPLE_HZ = 2000;

requirePerf("trace-edge");

/** perf script lines → { tid, ms, event, fields } (call graphs are not recorded). */
function* eventsOf(text) {
  for (const line of text.split("\n")) {
    // A cpu-clock sample may have nothing after its event's colon.
    const m = /^\s*(\d+)\s+([\d.]+):\s+(\S+):(?:\s(.*))?$/.exec(line);
    if (m) yield { tid: Number(m[1]), ms: Number(m[2]) * 1000, event: m[3], fields: m[4] ?? "" };
  }
}

/** The socket calls traced: kj reads and writes with several of them. */
const READS = new Set(["read", "readv", "recvfrom", "recvmsg"]);
const WRITES = new Set(["write", "writev", "sendto", "sendmsg"]);

const hex = (fields, name) => {
  const m = new RegExp(`${name}: 0x([0-9a-f]+)`).exec(fields);
  return m ? Number.parseInt(m[1], 16) : null;
};

/**
 * Requests' windows from workerd's socket reads and writes. A request's `/generate` body is a
 * large write (over half the smallest client body, in one or more parts) on the worker's
 * connection; before it, the request's body ended with the last read on a client connection; after
 * it come the answer's first read on the worker's connection and the writes to the client, up to
 * the next request.
 */
function windowsOf(events, bodyBytes) {
  const ios = [];
  const pending = new Map(); // tid → its syscall in progress: { kind, fd, ms }
  for (const e of events) {
    const m = /^syscalls:sys_(enter|exit)_(\w+)$/.exec(e.event);
    if (!m) continue;
    const kind = READS.has(m[2]) ? "read" : "write";
    if (m[1] === "enter") pending.set(e.tid, { kind, fd: hex(e.fields, "fd"), ms: e.ms });
    else {
      const call = pending.get(e.tid);
      pending.delete(e.tid);
      const ret = Number.parseInt(/0x([0-9a-f]+)/.exec(e.fields)?.[1] ?? "0", 16);
      // EAGAIN and other errors come back as large unsigned values. Reads count when their data
      // is in, writes when they start.
      if (call && ret > 0 && ret < 2 ** 32) ios.push({ kind: call.kind, tid: e.tid, fd: call.fd, bytes: ret, ms: call.kind === "read" ? e.ms : call.ms });
    }
  }
  // The write that brings a connection's output since its last read past half a body (the runtime
  // may write a large body in parts).
  const big = [];
  const sinceRead = new Map();
  for (const [i, x] of ios.entries()) {
    if (x.kind === "read") sinceRead.set(x.fd, 0);
    else {
      const before = sinceRead.get(x.fd) ?? 0;
      sinceRead.set(x.fd, before + x.bytes);
      if (before < bodyBytes / 2 && before + x.bytes >= bodyBytes / 2) big.push(i);
    }
  }
  const requests = [];
  for (const [k, w] of big.entries()) {
    const { tid, fd: upstream } = ios[w];
    // The client's connection: the last one, before this write and after the previous request's,
    // whose reads since its last write add up to half a body (the traced calls also see eventfds,
    // pipes and files).
    const from = k > 0 ? big[k - 1] + 1 : 0;
    const readSince = new Map();
    let last = -1;
    for (let i = from; i < w; i++) {
      const x = ios[i];
      if (x.tid !== tid || x.fd === upstream) continue;
      if (x.kind === "write") readSince.set(x.fd, 0);
      else {
        readSince.set(x.fd, (readSince.get(x.fd) ?? 0) + x.bytes);
        if (readSince.get(x.fd) >= bodyBytes / 2) last = i;
      }
    }
    if (last === -1) continue;
    const client = ios[last].fd;
    const mine = (x) => x.tid === tid && x.fd === client;
    const up = ios.slice(last + 1, w + 1).find((x) => x.kind === "write" && x.fd === upstream);
    const end = k + 1 < big.length ? big[k + 1] : ios.length;
    const resp = ios.slice(w + 1, end).find((x) => x.kind === "read" && x.fd === upstream);
    const outs = ios.slice(w + 1, end).filter((x) => x.kind === "write" && mine(x) && (resp === undefined || x.ms >= resp.ms));
    // The next request's body arriving on the same connection ends this one's writes.
    const nextIn = ios.slice(w + 1, end).find((x) => x.kind === "read" && mine(x));
    const replies = outs.filter((x) => nextIn === undefined || x.ms <= nextIn.ms);
    if (up && resp && replies.length > 0) requests.push({ tid, in: ios[last].ms, up: up.ms, resp: resp.ms, first: replies[0].ms, out: replies.at(-1).ms });
  }
  return requests;
}

const fleet = await startEdgeFleet({ limits: { maxMessageChars: 2_000_000, maxTotalChars: 8_000_000 } });
const dir = mkdtempSync(join(tmpdir(), "kvedge-trace-"));
try {
  const pid = workerdPid(fleet);
  const { next, post, warmUp } = requestShape(fleet, { tokens: TOKENS, cold: opt.cold, stream: opt.stream, seed: 0x7ace });
  await warmUp();
  const bodies = Array.from({ length: N }, next);
  const data = join(dir, "perf.data");
  const events = [...READS, ...WRITES].flatMap((c) => ["-e", `syscalls:sys_enter_${c}`, "-e", `syscalls:sys_exit_${c}`]);
  const rec = spawn("perf", ["record", ...events, "-e", `cpu-clock/freq=${SAMPLE_HZ}/`, "-p", pid, "-o", data], { stdio: ["ignore", "ignore", "pipe"] });
  let recErr = "";
  rec.stderr.on("data", (d) => (recErr += d));
  const recExit = new Promise((r) => rec.once("exit", r));
  await new Promise((r) => setTimeout(r, 500));
  // perf gives up at once without permission to record tracepoints.
  if (rec.exitCode !== null) throw new Error(`trace-edge: perf record exited: ${recErr.trim().slice(0, 500)}`);
  // Apart, so that one request's late work (events, settle) is not in the next one's windows.
  for (const b of bodies) (await post(b), await new Promise((r) => setTimeout(r, 30)));
  rec.kill("SIGINT");
  await recExit;
  const script = execFileSync("perf", ["script", "-i", data, "-F", "tid,time,event,trace"], { encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "ignore"] });
  const all = [...eventsOf(script)];
  const requests = windowsOf(all, Math.min(...bodies.map((b) => Buffer.byteLength(b))));
  if (requests.length === 0) throw new Error("trace-edge: no complete request found in the trace");
  const samples = all.filter((e) => e.event.startsWith("cpu-clock"));
  const windows = [
    ["before (in → up)", "in", "up"],
    ["worker (up → resp)", "up", "resp"],
    ["after (resp → first out)", "resp", "first"],
    ["after (resp → last out)", "resp", "out"],
  ];
  console.log(`${opt.cold ? "cold" : "warm"}${opt.stream ? " streamed" : ""} ${TOKENS}-token requests: ${requests.length} of ${N} traced; ms, p50 / mean; busy = ms on a CPU per request (cpu-clock at ${SAMPLE_HZ} Hz)`);
  for (const [name, a, b] of windows) {
    const spans = requests.map((r) => r[b] - r[a]);
    const s = summarize(spans);
    // The thread that served each request counts as "request thread", whichever it was.
    const busy = new Map();
    for (const r of requests)
      for (const e of samples)
        if (e.ms >= r[a] && e.ms < r[b]) {
          const who = e.tid === r.tid ? "request thread" : `thread ${e.tid}`;
          busy.set(who, (busy.get(who) ?? 0) + 1000 / SAMPLE_HZ);
        }
    const threads = [...busy].sort((x, y) => y[1] - x[1]).slice(0, 3).map(([who, ms]) => `${who} ${(ms / requests.length).toFixed(2)}`);
    console.log(`  ${name.padEnd(25)} ${s.p50.toFixed(2).padStart(6)} / ${s.mean.toFixed(2).padStart(6)}   busy: ${threads.join(", ") || "none sampled"}`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
  await fleet.stop();
}
