/**
 * The wasm decoder's memory cap (services/decode/wasm-core.ts withMemoryMax): the module's memory
 * maximum is rewritten, so memory.grow past it fails and the runtime reports a failed allocation.
 * Checked on a hand-made module (the limits themselves) and on @ffmpeg/core with the sample bomb
 * that took the uncapped core to its 2 GiB build maximum (11 s, 2.1 GB of RSS, measured).
 */
import { describe, expect, it } from "vitest";
import { loadFfmpegCore, withMemoryMax } from "../../../services/decode/wasm-core.ts";
import { ffprobeArgs } from "../../../services/decode/ffprobe-scan.ts";
import { WasmProber } from "../../../services/decode/probers.ts";
import { MediaError } from "../../../src/media/errors.ts";
import { sampleBombMp4 } from "../../helpers/sample-bomb.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const PAGE = 65536;
/** (module (memory (export "m") 1 100)) */
const tiny = Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 5, 4, 1, 1, 1, 100, 7, 5, 1, 1, 0x6d, 2, 0]);

// (The project's Workers types declare these classes abstract; Node constructs them.)
const Module = WebAssembly.Module as unknown as new (b: Uint8Array) => object;
const Instance = WebAssembly.Instance as unknown as new (m: object) => { exports: { m: WebAssembly.Memory } };

function memoryOf(bytes: Uint8Array): WebAssembly.Memory {
  return new Instance(new Module(bytes)).exports.m;
}

describe("wasm memory cap", () => {
  it("lowers the memory maximum to whole pages, never below the initial size or above the old maximum", () => {
    const m = memoryOf(withMemoryMax(tiny, 3 * PAGE + 100));
    expect(m.grow(2)).toBe(1);
    expect(() => m.grow(1)).toThrow(RangeError);
    expect(memoryOf(tiny).grow(99)).toBe(1);
    // Below the initial size: the initial size. Above the module's own maximum: that maximum.
    expect(() => memoryOf(withMemoryMax(tiny, 0)).grow(1)).toThrow(RangeError);
    const wide = memoryOf(withMemoryMax(tiny, 1000 * PAGE));
    expect(wide.grow(99)).toBe(1);
    expect(() => wide.grow(1)).toThrow(RangeError);
    // A maximum whose LEB128 is longer than the old one: the sections after it move.
    const big = withMemoryMax(Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 5, 5, 1, 1, 1, 0xff, 0x3f, 7, 5, 1, 1, 0x6d, 2, 0]), 300 * PAGE);
    expect(memoryOf(big).grow(299)).toBe(1);
    expect(() => withMemoryMax(Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]), PAGE)).toThrow(/not a module/);
    expect(() => withMemoryMax(Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]), PAGE)).toThrow(/no memory section/);
  });

  it("@ffmpeg/core under a 512 MiB cap: the sample bomb fails its first large allocation and the heap stays at its start size", async () => {
    const cap = 512 * 1024 * 1024;
    const core = (await loadFfmpegCore({ maxHeapBytes: cap })) as Awaited<ReturnType<typeof loadFfmpegCore>> & { HEAPU8: Uint8Array };
    core.FS.writeFile("/in", sampleBombMp4(86_000_000));
    const t = performance.now();
    try {
      core.ffprobe(...ffprobeArgs("/in").slice(0, -1), "-o", "/out.txt", "/in");
    } catch {
      // an abort also counts as refused; what matters is what it cost
    }
    expect(performance.now() - t).toBeLessThan(5_000);
    // Its first large allocation failed: the heap never left its 32 MiB start (uncapped: 2 GiB).
    expect(core.HEAPU8.length).toBeLessThanOrEqual(64 * 1024 * 1024);
  });

  it("the wasm prober refuses the bomb at once (its threads start under probeMemoryBytes)", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "kvedge-wasm-cap-"));
    const prober = new WasmProber({ threads: 1, memoryBytes: 256 * 1024 * 1024 });
    try {
      const file = path.join(dir, "bomb.mp4");
      writeFileSync(file, sampleBombMp4(86_000_000));
      // The thread's start (compiling the ~30 MB core) is not the probe's cost: warm it first.
      const junk = path.join(dir, "junk.bin");
      writeFileSync(junk, new Uint8Array(64));
      await prober.probe(junk).catch(() => undefined);
      const t = performance.now();
      const err = await prober.probe(file).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(MediaError);
      expect(performance.now() - t).toBeLessThan(10_000);
    } finally {
      await prober.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
