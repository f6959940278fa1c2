/**
 * Test media made with the wasm build of ffmpeg (@ffmpeg/core, an npm dependency), so no test
 * needs a native ffmpeg: `ffmpegToFile(args, out)` runs `ffmpeg -y ...args out` with every `-i`
 * input read from the host file system, and writes the output to the host path `out`.
 * `ffmpegToFileSync` does the same in a child process (scripts/wasm-ffmpeg.ts) for callers that
 * cannot await.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { ffmpegOnFiles, WasmFfmpeg } from "../../services/decode/wasm-core.ts";

let shared: WasmFfmpeg | null = null;
function wasmFfmpeg(): WasmFfmpeg {
  shared ??= new WasmFfmpeg();
  return shared;
}

export async function ffmpegToFile(args: string[], out: string): Promise<Buffer> {
  return Buffer.from(await ffmpegOnFiles(wasmFfmpeg(), args, out));
}

const CLI = join(import.meta.dirname, "../../scripts/wasm-ffmpeg.ts");
export function ffmpegToFileSync(args: string[], out: string): void {
  execFileSync(process.execPath, [CLI, ...args, out], { stdio: ["ignore", "ignore", "inherit"] });
}

/** `ffprobe ...args file` on a host file, stdout as text. */
export function ffprobeFile(args: string[], file: string): Promise<string> {
  const name = `probe${basename(file).replace(/^[^.]*/, "")}`;
  return wasmFfmpeg().ffprobe([...args, name], { [name]: new Uint8Array(readFileSync(file)) });
}
