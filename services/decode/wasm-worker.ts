/**
 * worker_thread body of the wasm decoder: one @ffmpeg/core instance per thread, because its exec
 * is synchronous and would block the service's event loop. Its wasm memory is capped at start. Each job writes the media into the
 * in-memory FS, runs the same ffprobe scan as the native path and posts the text output back.
 */
import { parentPort, workerData } from "node:worker_threads";
import { ffprobeArgs } from "./ffprobe-scan.ts";
import { loadFfmpegCore } from "./wasm-core.ts";

export interface WasmJob {
  id: number;
  bytes: Uint8Array;
}
export type WasmReply = { id: number; ok: true; stdout: string; stderr: string } | { id: number; ok: false; error: string };

/** What the thread is started with (WasmProber). */
export interface WasmWorkerData {
  /** The core's wasm memory cap (wasm-core.ts withMemoryMax). */
  maxHeapBytes: number;
}

const core = await loadFfmpegCore({ maxHeapBytes: (workerData as WasmWorkerData).maxHeapBytes });

let stderr: string[] = [];
core.setLogger((m) => {
  if (m.type === "stderr" && stderr.length < 50) stderr.push(m.message);
});

const port = parentPort!;
port.on("message", (job: WasmJob) => {
  stderr = [];
  try {
    core.FS.writeFile("/in", job.bytes);
    core.ffprobe(...ffprobeArgs("/in").slice(0, -1), "-o", "/out.txt", "/in");
    core.reset();
    let out = "";
    try {
      out = new TextDecoder().decode(core.FS.readFile("/out.txt"));
      core.FS.unlink("/out.txt");
    } catch {
      out = "";
    }
    core.FS.unlink("/in");
    const reply: WasmReply = { id: job.id, ok: true, stdout: out, stderr: stderr.join("\n") };
    port.postMessage(reply);
  } catch (e) {
    const reply: WasmReply = { id: job.id, ok: false, error: (e as Error).message };
    port.postMessage(reply);
    // An aborted core is unusable: exit so the pool replaces this thread.
    process.exit(1);
  }
});
port.postMessage({ ready: true });
