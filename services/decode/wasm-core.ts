/**
 * Loading @ffmpeg/core (FFmpeg 5.1.4 compiled to wasm) in Node, and running one ffmpeg or ffprobe
 * command in it. This is the embedded default for machines without a native ffmpeg: the decode
 * service's wasm threads probe with it, and `npm start` and the tests make their sample media with
 * its encoders (libx264, libvpx, libwebp, png, ...), so nothing needs to come from apt. Loading
 * needs two shims, as `@ffmpeg/core` 0.12.10 is an emscripten build for web workers: `self` and the
 * wasm bytes passed in directly.
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

/**
 * Loads a core. `maxHeapBytes`: the most wasm memory it may ever hold. The build lets its heap grow
 * to 2 GiB, and a few KB of container declaring millions of samples take all of it (11 s and 2.1 GB
 * of RSS for one probe, measured); with the cap, a request beyond it fails as an allocation failure
 * (ffmpeg's ENOMEM), as the native ffprobe's data-segment cap does (ffprobe-run.ts).
 */
export async function loadFfmpegCore(opts: { maxHeapBytes?: number } = {}): Promise<FfmpegCore> {
  const coreJs = fileURLToPath(import.meta.resolve("@ffmpeg/core"));
  const g = globalThis as unknown as { self?: unknown };
  g.self ??= { location: { href: "file://" + coreJs } };
  const { default: createFFmpegCore } = (await import(coreJs)) as { default: (o: object) => Promise<FfmpegCore> };
  const wasm = readFileSync(coreJs.replace(/\.js$/, ".wasm"));
  return createFFmpegCore({ wasmBinary: opts.maxHeapBytes === undefined ? wasm : withMemoryMax(wasm, opts.maxHeapBytes) });
}

const WASM_PAGE = 65536;

/** Reads an unsigned LEB128 at `o`: its value and the offset after it. */
function uleb(b: Uint8Array, o: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (;;) {
    const byte = b[o++];
    if (byte === undefined) throw new Error("wasm: truncated LEB128");
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) return { value, next: o };
    scale *= 128;
  }
}

function ulebBytes(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0);
  return out;
}

/**
 * The module with its one memory's maximum lowered to `maxBytes` (whole 64 KiB pages, at least its
 * initial size): memory.grow beyond it fails, which the runtime reports as a failed allocation.
 * Rewrites the memory section (id 5) only; refuses a module it does not understand.
 */
export function withMemoryMax(wasm: Uint8Array, maxBytes: number): Uint8Array {
  if (wasm.length < 8 || wasm[0] !== 0 || wasm[1] !== 0x61 || wasm[2] !== 0x73 || wasm[3] !== 0x6d) throw new Error("wasm: not a module");
  let o = 8;
  while (o < wasm.length) {
    const id = wasm[o]!;
    const size = uleb(wasm, o + 1);
    const start = size.next;
    const end = start + size.value;
    if (id === 5) {
      const count = uleb(wasm, start);
      if (count.value !== 1) throw new Error(`wasm: ${count.value} memories, expected 1`);
      const flags = wasm[count.next]!;
      if (flags !== 0 && flags !== 1) throw new Error(`wasm: memory flags ${flags} (shared or 64-bit) not handled`);
      const initial = uleb(wasm, count.next + 1);
      const oldMax = flags === 1 ? uleb(wasm, initial.next) : null;
      let pages = Math.max(initial.value, Math.floor(maxBytes / WASM_PAGE));
      if (oldMax) pages = Math.min(pages, oldMax.value);
      const body = [...ulebBytes(1), 1, ...ulebBytes(initial.value), ...ulebBytes(pages)];
      const tail = wasm.subarray(oldMax ? oldMax.next : initial.next, end);
      if (tail.length !== 0) throw new Error("wasm: unexpected bytes after the memory limits");
      const section = Uint8Array.from([5, ...ulebBytes(body.length), ...body]);
      const out = new Uint8Array(o + section.length + (wasm.length - end));
      out.set(wasm.subarray(0, o), 0);
      out.set(section, o);
      out.set(wasm.subarray(end), o + section.length);
      return out;
    }
    o = end;
  }
  throw new Error("wasm: no memory section (an imported memory is not handled)");
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
