/**
 * Test media made with the wasm build of ffmpeg (@ffmpeg/core, an npm dependency), so no test
 * needs a native ffmpeg: `ffmpegToFile(args, out)` runs `ffmpeg -y ...args out` with every `-i`
 * input read from the host file system, and writes the output to the host path `out`.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { WasmFfmpeg } from "../../services/decode/wasm-core.ts";

let shared: WasmFfmpeg | null = null;
export function wasmFfmpeg(): WasmFfmpeg {
  shared ??= new WasmFfmpeg();
  return shared;
}

/** Host paths after `-i` become files of the wasm FS (named in0, in1, ... plus their extension). */
function mapInputs(args: string[]): { args: string[]; inputs: Record<string, Uint8Array> } {
  const inputs: Record<string, Uint8Array> = {};
  const out = args.map((a, i) => {
    if (args[i - 1] !== "-i" || !a.startsWith("/")) return a; // lavfi sources stay as they are
    const name = `in${Object.keys(inputs).length}${basename(a).replace(/^[^.]*/, "")}`;
    inputs[name] = new Uint8Array(readFileSync(a));
    return name;
  });
  return { args: out, inputs };
}

export async function ffmpegToFile(args: string[], out: string): Promise<Buffer> {
  const m = mapInputs(args);
  const bytes = await wasmFfmpeg().ffmpeg(m.args, `out-${basename(out)}`, m.inputs);
  writeFileSync(out, bytes);
  return Buffer.from(bytes);
}

/** `ffprobe ...args file` on a host file, stdout as text. */
export function ffprobeFile(args: string[], file: string): Promise<string> {
  const name = `probe${basename(file).replace(/^[^.]*/, "")}`;
  return wasmFfmpeg().ffprobe([...args, name], { [name]: new Uint8Array(readFileSync(file)) });
}
