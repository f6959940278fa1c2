// Media path cost: decode-service probe latency/throughput for a 10 s 720p H.264 clip against a
// plain ffprobe run of the same file in the same run, and xxh3-64 throughput in Node.
// Run by the suite (bench/suites/media.mjs); alone: npx node bench/media/probe.mjs [--runs 15] [--wasm] [--quick]
// The last stdout line is a JSON summary (bench/suites/media.mjs keeps it structured).
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { createStreamingXxh3, initHashing, xxh3_64 } from "../../src/util/hash.ts";
import { ffprobeArgs } from "../../services/decode/ffprobe-scan.ts";
import { startDecodeService } from "../../services/decode/server.ts";
import { nativeAvailable } from "../../services/decode/probers.ts";
import { ffmpegToFile } from "../../test/helpers/wasm-media.ts";

const run = promisify(execFile);
const args = process.argv.slice(2);
const QUICK = args.includes("--quick");
const RUNS = args.includes("--runs") ? Number(args[args.indexOf("--runs") + 1]) : QUICK ? 5 : 15;
const WITH_WASM = args.includes("--wasm") || !QUICK;
const TOKEN = "bench-token-0123456789abcdef0123";
const cores = os.availableParallelism();
const summary = { clipBytes: 0, loadAvg: os.loadavg()[0], cores, latencyMedianMs: {}, ratio: {}, throughputPerSec: {}, xxh3GBps: {} };

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const fmt = (ms) => `${ms.toFixed(1)} ms`;

// The decode service restarts a pre-started ffprobe in the background after each probe
// (services/decode/ffprobe-pool.ts). Before each timed call, wait (at most 3 s) until every child of
// this process has exited or waits at its gate (Linux wchan "wait_for_partner": a FIFO open), so
// that start-up lands in neither side's latency; the throughput runs below do not wait and pay it.
function busyChildren() {
  let n = 0;
  try {
    for (const task of readdirSync("/proc/self/task")) {
      for (const pid of readFileSync(`/proc/self/task/${task}/children`, "utf8").split(" ").filter(Boolean)) {
        try {
          if (readFileSync(`/proc/${pid}/wchan`, "utf8") !== "wait_for_partner") n++;
        } catch {} // exited meanwhile
      }
    }
  } catch {} // no /proc: nothing to wait for
  return n;
}
async function settle() {
  const until = performance.now() + 3000;
  while (busyChildren() > 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 5));
}

async function time(fn) {
  await settle();
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

const dir = mkdtempSync(path.join(os.tmpdir(), "kvedge-bench-"));
const clip = path.join(dir, "720p.mp4");
// The baseline is the native ffprobe (Debian: apt install ffmpeg); without it the suite measures the
// service's wasm decoder alone and says so, and the clip comes from the wasm ffmpeg.
const native = await nativeAvailable();
summary.nativeFfprobe = native;
const encode = ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-frames:v", "300", "-c:v", "libx264", "-preset", "veryfast", "-g", "60"];
console.log(`generating 10 s 1280x720 H.264 (300 frames @ 30) with ${native ? "ffmpeg" : "the wasm ffmpeg"} … (${cores} cores, load ${os.loadavg()[0].toFixed(2)})`);
if (native) execFileSync("ffmpeg", ["-v", "error", "-y", ...encode, clip]);
else await ffmpegToFile(encode, clip);
const bytes = readFileSync(clip);
console.log(`clip: ${(bytes.length / 1e6).toFixed(2)} MB`);
summary.clipBytes = bytes.length;

async function benchService(decoder) {
  // cacheEntries 0: every request really hashes, spools and probes.
  const svc = await startDecodeService({ token: TOKEN, decoder, cacheEntries: 0, concurrency: cores, maxBodyBytes: 64 << 20 });
  const post = async () => {
    const r = await fetch(`${svc.url}/v1/probe`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream", authorization: `Bearer ${TOKEN}` },
      body: bytes,
    });
    if (r.status !== 200) throw new Error(`probe ${r.status}: ${await r.text()}`);
    return r.json();
  };
  const first = await post(); // warm-up (wasm: loads the core)
  await post();
  return { svc, post, first };
}

let first = null;
if (native) {
  const plainArgs = ["-v", "error", "-show_format", "-show_streams", clip];
  const scanArgs = ffprobeArgs(clip);

  const service = await benchService("native");
  const { svc, post } = service;
  first = service.first;
  console.log(`probe: ${first.totalFrames} frames, avgFps ${first.avgFps}, ${first.width}x${first.height}, ${first.codec}, sha256 ${first.contentDigest}`);

  // Latency: interleave the three so machine noise hits them alike.
  const lat = { service: [], plain: [], scan: [] };
  for (let i = 0; i < RUNS; i++) {
    lat.service.push(await time(post));
    lat.plain.push(await time(() => run("ffprobe", plainArgs, { maxBuffer: 64 << 20 })));
    lat.scan.push(await time(() => run("ffprobe", scanArgs, { maxBuffer: 64 << 20 })));
  }
  const min = (xs) => Math.min(...xs);
  console.log("\nlatency (sequential, min / median / p90):");
  console.log(`  decode service POST /v1/probe (bytes)        ${fmt(min(lat.service))} / ${fmt(median(lat.service))} / ${fmt(pct(lat.service, 0.9))}`);
  console.log(`  plain ffprobe -show_format -show_streams     ${fmt(min(lat.plain))} / ${fmt(median(lat.plain))} / ${fmt(pct(lat.plain, 0.9))}`);
  console.log(`  ffprobe packet scan (the service's command)  ${fmt(min(lat.scan))} / ${fmt(median(lat.scan))} / ${fmt(pct(lat.scan, 0.9))}`);
  console.log(`  ratio service / plain ffprobe: median ${(median(lat.service) / median(lat.plain)).toFixed(2)}x, min ${(min(lat.service) / min(lat.plain)).toFixed(2)}x (goal ≤ 1.2x)`);
  console.log(`  ratio service / same-command ffprobe: median ${(median(lat.service) / median(lat.scan)).toFixed(2)}x, min ${(min(lat.service) / min(lat.scan)).toFixed(2)}x`);

  summary.latencyMedianMs = { service: median(lat.service), plainFfprobe: median(lat.plain), scanFfprobe: median(lat.scan) };
  summary.latencyMinMs = { service: min(lat.service), plainFfprobe: min(lat.plain), scanFfprobe: min(lat.scan) };
  summary.ratio = {
    serviceVsPlainFfprobe: median(lat.service) / median(lat.plain),
    serviceVsScanFfprobe: median(lat.service) / median(lat.scan),
    serviceVsPlainFfprobeMin: min(lat.service) / min(lat.plain),
  };

  // Throughput: `cores` clients in parallel for a fixed number of requests.
  async function throughput(fn, n) {
    let next = 0;
    const t = performance.now();
    await Promise.all(
      Array.from({ length: cores }, async () => {
        while (next++ < n) await fn();
      }),
    );
    return (n / (performance.now() - t)) * 1000;
  }
  const N = QUICK ? cores * 2 : Math.max(cores * 6, 12);
  const tpService = await throughput(post, N);
  const tpPlain = await throughput(() => run("ffprobe", plainArgs, { maxBuffer: 64 << 20 }), N);
  const tpScan = await throughput(() => run("ffprobe", scanArgs, { maxBuffer: 64 << 20 }), N);
  console.log(`\nthroughput (${cores} concurrent clients, ${N} requests):`);
  console.log(`  decode service ${tpService.toFixed(2)} probes/s; plain ffprobe ${tpPlain.toFixed(2)} runs/s; packet-scan ffprobe ${tpScan.toFixed(2)} runs/s`);
  summary.throughputPerSec = { service: tpService, plainFfprobe: tpPlain, scanFfprobe: tpScan };
  await svc.close();
} else console.log("no native ffprobe on PATH: the decode service's wasm decoder is measured alone (the ≤ 1.2× ffprobe baseline needs Debian's ffmpeg)");

if (WITH_WASM || !native) {
  const w = await benchService("wasm");
  const wl = [];
  for (let i = 0; i < Math.min(RUNS, 8); i++) wl.push(await time(w.post));
  summary.latencyMedianMs.serviceWasm = median(wl);
  const same = first ? ` (answers equal native: ${JSON.stringify({ ...w.first, decoder: "native" }) === JSON.stringify(first)})` : "";
  console.log(`\nwasm decoder: POST /v1/probe median ${fmt(median(wl))}${same}`);
  await w.svc.close();
}

// xxh3-64 throughput in Node (hash-wasm).
await initHashing();
console.log("\nxxh3-64 (hash-wasm) in Node:");
for (const size of [4096, 1 << 20, 16 << 20]) {
  const buf = new Uint8Array(size).map((_, i) => (i * 2654435761) >>> 24);
  const iters = Math.max(5, Math.floor(((QUICK ? 64 : 256) << 20) / size));
  for (let i = 0; i < Math.min(iters, 50); i++) xxh3_64(buf);
  let t = performance.now();
  for (let i = 0; i < iters; i++) xxh3_64(buf);
  const oneShot = (size * iters) / ((performance.now() - t) / 1000) / 1e9;
  const h = await createStreamingXxh3(0n);
  t = performance.now();
  for (let i = 0; i < iters; i++) h.update(buf);
  h.digest("hex");
  const streaming = (size * iters) / ((performance.now() - t) / 1000) / 1e9;
  summary.xxh3GBps[size] = { oneShot, streaming };
  console.log(`  ${String(size).padStart(9)} B buffers: one-shot ${oneShot.toFixed(2)} GB/s, streaming ${streaming.toFixed(2)} GB/s`);
}

rmSync(dir, { recursive: true, force: true });
console.log(JSON.stringify(summary));
