/**
 * The two decoders behind `/v1/probe`, with identical answers: native ffprobe (a child process
 * per probe, started ahead of need when `warm` > 0) and @ffmpeg/core in worker threads (one core per thread, lazily started, replaced
 * after a crash or timeout). `selectProber("auto")` takes native when `ffprobe -version` runs.
 */
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { Worker } from "node:worker_threads";
import { MediaError } from "../../src/media/errors.ts";
import { FfprobePool, type PooledOutcome } from "./ffprobe-pool.ts";
import { DEFAULT_PROBE_MEMORY_BYTES, memoryCapped, prlimitAvailable, startFfprobe } from "./ffprobe-run.ts";
import { ffprobeArgs, MAX_PROBE_PACKETS, parseFfprobeOutput, type ScanResult } from "./ffprobe-scan.ts";
import type { WasmJob, WasmReply, WasmWorkerData } from "./wasm-worker.ts";

export type DecoderKind = "native" | "wasm";

export interface Prober {
  readonly kind: DecoderKind;
  /** Scans the media file at `path`; throws MediaError("unprobeable_media") for media it cannot read. */
  probe(path: string): Promise<ScanResult>;
  close(): Promise<void>;
}

export class ProbeTimeoutError extends Error {}

function tooManyPackets(): MediaError {
  return new MediaError("unprobeable_media", `Media could not be probed: it holds more than ${MAX_PROBE_PACKETS} video packets.`);
}

/**
 * A scan without a single video packet is no video any decoder can sample (it is also what an
 * ffprobe under the memory cap reports for a container whose sample tables it could not index).
 */
function withFrames(scan: ScanResult): ScanResult {
  if (scan.meta.numFrames === 0) throw new MediaError("unprobeable_media", "Media could not be probed: no video frames (or more than could be indexed).");
  return scan;
}

function unprobeable(detail: string): MediaError {
  const last = detail.trim().split("\n").filter(Boolean).pop() ?? "no video stream";
  return new MediaError("unprobeable_media", `Media could not be probed: ${last.replace(/^\/in: |^.*?: (?=Invalid)/, "")}`);
}

export class NativeProber implements Prober {
  readonly kind = "native" as const;
  private readonly ffprobe: string;
  private readonly timeoutMs: number;
  private readonly memoryBytes: number;
  private readonly pool: Promise<FfprobePool | null> | null;

  /** `warm`: ffprobe processes kept started ahead of need (ffprobe-pool.ts); 0 starts one per probe. */
  constructor(opts: { ffprobePath?: string; timeoutMs?: number; warm?: number; tmpDir?: string; memoryBytes?: number } = {}) {
    this.ffprobe = opts.ffprobePath ?? "ffprobe";
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.memoryBytes = opts.memoryBytes ?? DEFAULT_PROBE_MEMORY_BYTES;
    const warm = opts.warm ?? 0;
    // A pool that cannot be set up (no setpriv or mkfifo) leaves the prober starting one ffprobe per probe.
    this.pool = warm > 0 ? FfprobePool.create(this.ffprobe, this.memoryBytes, warm, opts.tmpDir ?? tmpdir()).catch(() => null) : null;
  }

  async probe(path: string): Promise<ScanResult> {
    const pool = await this.pool;
    const pooled = pool ? await pool.scan(path, this.timeoutMs) : null;
    const o = pooled ?? (await this.coldScan(path));
    if (o.timedOut) throw new ProbeTimeoutError(`ffprobe exceeded ${this.timeoutMs} ms`);
    if (o.tooManyPackets) throw tooManyPackets();
    if (o.error) throw o.error;
    if (o.code !== 0 || !o.scan) throw unprobeable(o.stderr);
    return withFrames(o.scan);
  }

  private async coldScan(path: string): Promise<PooledOutcome> {
    const run = startFfprobe(...memoryCapped(this.ffprobe, ffprobeArgs(path), this.memoryBytes));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      run.child.kill("SIGKILL");
    }, this.timeoutMs);
    const o = await run.outcome;
    clearTimeout(timer);
    return { ...o, timedOut };
  }

  async close(): Promise<void> {
    await (await this.pool)?.close();
  }
}

/** Is a native ffprobe runnable? */
export function nativeAvailable(ffprobePath = "ffprobe"): Promise<boolean> {
  return new Promise((resolve) => {
    const c = spawn(ffprobePath, ["-version"], { stdio: "ignore" });
    c.on("error", () => resolve(false));
    c.on("close", (code) => resolve(code === 0));
  });
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  busy: boolean;
}

/**
 * The thread's module: wasm-worker.ts beside this source file, or wasm-worker.js beside the bundle
 * of the packaged store (scripts/build-host-package.mjs), whose module is a .js file.
 */
const WASM_WORKER_URL = new URL(import.meta.url.endsWith(".ts") ? "./wasm-worker.ts" : "./wasm-worker.js", import.meta.url);

export class WasmProber implements Prober {
  readonly kind = "wasm" as const;
  private readonly size: number;
  private readonly timeoutMs: number;
  private readonly memoryBytes: number;
  private readonly slots: Slot[] = [];
  private readonly waiters: ((s: Slot) => void)[] = [];
  private nextId = 1;
  private closed = false;

  constructor(opts: { threads?: number; timeoutMs?: number; memoryBytes?: number } = {}) {
    this.size = Math.max(1, opts.threads ?? 1);
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.memoryBytes = opts.memoryBytes ?? DEFAULT_PROBE_MEMORY_BYTES;
  }

  private spawn(): Slot {
    const data: WasmWorkerData = { maxHeapBytes: this.memoryBytes };
    const worker = new Worker(WASM_WORKER_URL, { workerData: data });
    worker.unref();
    const ready = new Promise<void>((resolve, reject) => {
      const onMsg = (m: unknown): void => {
        if ((m as { ready?: boolean }).ready) {
          worker.off("message", onMsg);
          worker.off("error", reject);
          resolve();
        }
      };
      worker.on("message", onMsg);
      worker.once("error", reject);
    });
    const slot: Slot = { worker, ready, busy: false };
    ready.catch(() => {});
    return slot;
  }

  private acquire(): Promise<Slot> {
    const free = this.slots.find((s) => !s.busy);
    if (free) {
      free.busy = true;
      return Promise.resolve(free);
    }
    if (this.slots.length < this.size) {
      const s = this.spawn();
      s.busy = true;
      this.slots.push(s);
      return Promise.resolve(s);
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private release(slot: Slot, dead: boolean): void {
    let s = slot;
    if (dead) {
      void slot.worker.terminate();
      const i = this.slots.indexOf(slot);
      if (i !== -1) this.slots.splice(i, 1);
      if (this.closed) return;
      s = this.spawn();
      this.slots.push(s);
    }
    const next = this.waiters.shift();
    if (next) {
      s.busy = true;
      next(s);
    } else s.busy = false;
  }

  async probe(path: string): Promise<ScanResult> {
    if (this.closed) throw new Error("wasm prober closed");
    const bytes = new Uint8Array(await readFile(path));
    const slot = await this.acquire();
    let dead = false;
    try {
      await slot.ready;
      const id = this.nextId++;
      const reply = await new Promise<WasmReply>((resolve, reject) => {
        const timer = setTimeout(() => {
          dead = true;
          cleanup();
          reject(new ProbeTimeoutError(`wasm ffprobe exceeded ${this.timeoutMs} ms`));
        }, this.timeoutMs);
        const onMsg = (m: WasmReply): void => {
          if (m.id !== id) return;
          cleanup();
          resolve(m);
        };
        const onExit = (): void => {
          dead = true;
          cleanup();
          reject(new Error("wasm decoder thread exited"));
        };
        const cleanup = (): void => {
          clearTimeout(timer);
          slot.worker.off("message", onMsg);
          slot.worker.off("exit", onExit);
        };
        slot.worker.on("message", onMsg);
        slot.worker.on("exit", onExit);
        const job: WasmJob = { id, bytes };
        slot.worker.postMessage(job, [bytes.buffer]);
      });
      if (!reply.ok) {
        dead = true;
        throw unprobeable(reply.error);
      }
      const r = parseFfprobeOutput(reply.stdout);
      if (!r) throw unprobeable(reply.stderr);
      return withFrames(r);
    } catch (e) {
      if (!(e instanceof MediaError) && !(e instanceof ProbeTimeoutError)) dead = true;
      throw e;
    } finally {
      this.release(slot, dead);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
    this.slots.length = 0;
  }
}

export async function selectProber(
  decoder: "native" | "wasm" | "auto",
  opts: { ffprobePath?: string; threads?: number; timeoutMs?: number; warm?: number; tmpDir?: string; memoryBytes?: number } = {},
): Promise<Prober> {
  if (decoder === "wasm") return new WasmProber(opts);
  // Native needs prlimit too: an ffprobe without a memory cap is one small file away from GBs.
  const ffprobe = await nativeAvailable(opts.ffprobePath);
  const capped = ffprobe && (await prlimitAvailable());
  if (capped) return new NativeProber(opts);
  if (decoder === "native") throw new Error(`native ffprobe not runnable with a memory cap (${opts.ffprobePath ?? "ffprobe"}, prlimit from util-linux)`);
  if (ffprobe)
    process.stderr.write("decode: ffprobe is installed but prlimit (util-linux) is not, so it cannot run under a memory cap: using the wasm decoder, whose memory is capped instead (docs/media.md, Store limits)\n");
  return new WasmProber(opts);
}
