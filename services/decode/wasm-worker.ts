/**
 * worker_thread body of the wasm decoder: one @ffmpeg/core instance (FFmpeg 5.1.4 in wasm) per
 * thread, because its exec is synchronous and would block the service's event loop. Each job
 * writes the media into the in-memory FS, runs the same ffprobe scan as the native path and
 * posts the text output back. Loading needs two shims (reference/workers-toolchain.md §2.2):
 * `self` (the build targets web workers) and the wasm bytes passed in directly.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parentPort } from "node:worker_threads";
import { ffprobeArgs } from "./ffprobe-scan.ts";

interface FfmpegCore {
  FS: { writeFile(p: string, d: Uint8Array): void; readFile(p: string): Uint8Array; unlink(p: string): void };
  ffprobe(...args: string[]): number;
  setLogger(fn: (m: { type: string; message: string }) => void): void;
  reset(): void;
}

export interface WasmJob {
  id: number;
  bytes: Uint8Array;
}
export type WasmReply = { id: number; ok: true; stdout: string; stderr: string } | { id: number; ok: false; error: string };

const coreJs = fileURLToPath(import.meta.resolve("@ffmpeg/core"));
const g = globalThis as unknown as { self?: unknown };
g.self ??= { location: { href: "file://" + coreJs } };
const { default: createFFmpegCore } = (await import(coreJs)) as { default: (o: object) => Promise<FfmpegCore> };
const core = await createFFmpegCore({ wasmBinary: readFileSync(coreJs.replace(/\.js$/, ".wasm")) });

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
