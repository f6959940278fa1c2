/**
 * Loading @ffmpeg/core (FFmpeg 5.1.4 compiled to wasm) in Node, and running one ffmpeg or ffprobe
 * command in it. This is the embedded default for machines without a native ffmpeg: the decode
 * service's wasm threads probe with it, and `npm start` and the tests make their sample media with
 * its encoders (libx264, libvpx, libwebp, png, ...), so nothing needs to come from apt. Loading
 * needs two shims (reference/workers-toolchain.md §2.2): `self` (the build targets web workers)
 * and the wasm bytes passed in directly.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";

export interface FfmpegCore {
  FS: { writeFile(p: string, d: Uint8Array): void; readFile(p: string): Uint8Array; unlink(p: string): void };
  exec(...args: string[]): number;
  ffprobe(...args: string[]): number;
  setLogger(fn: (m: { type: string; message: string }) => void): void;
  reset(): void;
}

export async function loadFfmpegCore(): Promise<FfmpegCore> {
  const coreJs = fileURLToPath(import.meta.resolve("@ffmpeg/core"));
  const g = globalThis as unknown as { self?: unknown };
  g.self ??= { location: { href: "file://" + coreJs } };
  const { default: createFFmpegCore } = (await import(coreJs)) as { default: (o: object) => Promise<FfmpegCore> };
  return createFFmpegCore({ wasmBinary: readFileSync(coreJs.replace(/\.js$/, ".wasm")) });
}

/**
 * One in-process core for short, synchronous jobs (sample media, test fixtures). Inputs are files
 * of the in-memory FS: `inputs` maps a name there (e.g. "in.mp4") to its bytes; `args` refer to
 * those names and end before the output name. Returns the output file's bytes.
 */
export class WasmFfmpeg {
  private core: Promise<FfmpegCore> | null = null;
  private log: string[] = [];

  private load(): Promise<FfmpegCore> {
    this.core ??= loadFfmpegCore().then((c) => {
      c.setLogger((m) => {
        if (this.log.length < 200) this.log.push(m.message);
      });
      return c;
    });
    return this.core;
  }

  private async run(tool: "ffmpeg" | "ffprobe", args: string[], out: string, inputs: Record<string, Uint8Array>): Promise<Uint8Array> {
    const core = await this.load();
    for (const [name, bytes] of Object.entries(inputs)) core.FS.writeFile(name, bytes);
    this.log = [];
    let rc: number;
    try {
      rc = tool === "ffmpeg" ? core.exec("-nostdin", "-y", "-hide_banner", ...args, out) : core.ffprobe(...args, "-o", out);
      core.reset();
    } catch (e) {
      this.core = null; // an aborted core is unusable: the next job loads a fresh one
      throw new Error(`wasm ${tool} ${args.join(" ")} aborted: ${(e as Error).message}`);
    }
    let bytes: Uint8Array | null = null;
    try {
      bytes = core.FS.readFile(out);
      core.FS.unlink(out);
    } catch {
      bytes = null;
    }
    for (const name of Object.keys(inputs)) core.FS.unlink(name);
    // The core's ffprobe returns -1 even after a complete run; its output file is what counts.
    if ((tool === "ffmpeg" && rc !== 0) || !bytes) throw new Error(`wasm ${tool} ${args.join(" ")} failed (${rc}): ${this.log.slice(-5).join(" | ")}`);
    return bytes;
  }

  /** `ffmpeg -nostdin -y ...args out`; the output container follows `out`'s extension. */
  ffmpeg(args: string[], out: string, inputs: Record<string, Uint8Array> = {}): Promise<Uint8Array> {
    return this.run("ffmpeg", args, out, inputs);
  }

  /** `ffprobe ...args` (args end with the input name) with its stdout as text (empty for unreadable input). */
  async ffprobe(args: string[], inputs: Record<string, Uint8Array>): Promise<string> {
    return new TextDecoder().decode(await this.run("ffprobe", args, "/probe-out.txt", inputs));
  }
}

/** Host paths after `-i` become files of the wasm FS (in0, in1, ... keeping their extension); lavfi sources stay. */
function mapInputs(args: string[]): { args: string[]; inputs: Record<string, Uint8Array> } {
  const inputs: Record<string, Uint8Array> = {};
  const mapped = args.map((a, i) => {
    if (args[i - 1] !== "-i" || args[i - 2] === "lavfi") return a;
    const name = `in${Object.keys(inputs).length}${basename(a).replace(/^[^.]*/, "")}`;
    inputs[name] = new Uint8Array(readFileSync(a));
    return name;
  });
  return { args: mapped, inputs };
}

/** `ffmpeg -y ...args out` on host files: inputs read from disk, the output written to the host path `out`. */
export async function ffmpegOnFiles(ff: WasmFfmpeg, args: string[], out: string): Promise<Uint8Array> {
  const m = mapInputs(args);
  const bytes = await ff.ffmpeg(m.args, `out-${basename(out)}`, m.inputs);
  writeFileSync(out, bytes);
  return bytes;
}
