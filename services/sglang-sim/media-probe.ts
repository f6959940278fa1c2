/**
 * What SGLang's decoders report for a media item, without decoding pixels:
 * - images: width/height from the header as Pillow's `Image.open` reports them; SGLang never
 *   applies EXIF orientation (see src/media/image-header.ts), so neither does the simulator;
 * - videos: torchcodec exact-mode `len(decoder)` and `metadata.average_fps` (torchcodec >= 0.11
 *   keeps the exact double), from an ffprobe packet scan (services/decode: native ffprobe when
 *   installed, else the embedded wasm build; both give the same answer), plus the stream's coded
 *   width/height.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ImageProbe, VideoProbe } from "../../src/layout/index.ts";
import { isMediaError } from "../../src/media/errors.ts";
import { readImageHeader } from "../../src/media/image-header.ts";
import { sha256 } from "../../src/util/hash.ts";
import { ByteLru } from "../../src/util/byte-lru.ts";
import { bytesToHex } from "../../src/util/hex.ts";
import { ProbeTimeoutError, selectProber, type DecoderKind, type Prober } from "../decode/probers.ts";
import { SglangValueError } from "./sglang-errors.ts";

export function probeImage(bytes: Uint8Array): ImageProbe {
  try {
    const h = readImageHeader(bytes, true, { exifTranspose: false })!;
    return { width: h.width, height: h.height };
  } catch (e) {
    // PIL.UnidentifiedImageError / truncated header: a load failure SGLang reports as a bad request.
    if (isMediaError(e)) throw new SglangValueError(`Failed to load image: ${e.message}`);
    throw e;
  }
}

const PROBE_CACHE_ENTRIES = 256;

/**
 * Video prober: spools bytes to a private temp dir and scans packets with ffprobe. Results are
 * memoised by the SHA-256 of the bytes (same bytes, same metadata): an ffprobe run costs ~0.2 s,
 * which would dominate repeated-video tests.
 */
export class VideoMetadataProber {
  /** Bounded by count: each entry weighs 1. */
  private readonly cache = new ByteLru<string, VideoProbe>(PROBE_CACHE_ENTRIES);
  private dir: Promise<string> | null = null;
  private seq = 0;

  private readonly prober: Prober;
  private constructor(prober: Prober) {
    this.prober = prober;
  }

  /** `auto`: native ffprobe when `ffprobe -version` runs, else the wasm build (one thread, started on first use). */
  static async create(opts: { decoder: DecoderKind | "auto"; ffprobePath: string; timeoutMs: number }): Promise<VideoMetadataProber> {
    return new VideoMetadataProber(await selectProber(opts.decoder, { ffprobePath: opts.ffprobePath, threads: 1, timeoutMs: opts.timeoutMs }));
  }

  get decoder(): DecoderKind {
    return this.prober.kind;
  }

  private tempDir(): Promise<string> {
    this.dir ??= mkdtemp(join(tmpdir(), "sglang-sim-media-"));
    return this.dir;
  }

  /** `totalFrames` may be 0 or 1 and `avgFps` 0 (no rate known): SGLang's sampler raises on those. */
  async probe(bytes: Uint8Array): Promise<VideoProbe> {
    const key = bytesToHex(sha256(bytes));
    const hit = this.cache.get(key);
    if (hit) return hit;
    const r = await this.scan(bytes);
    this.cache.set(key, r, 1);
    return r;
  }

  private async scan(bytes: Uint8Array): Promise<VideoProbe> {
    const path = join(await this.tempDir(), `v${++this.seq}`);
    await writeFile(path, bytes);
    try {
      const r = await this.prober.probe(path);
      return {
        totalFrames: r.meta.numFrames,
        avgFps: r.meta.averageFps ?? 0,
        width: r.stream.width,
        height: r.stream.height,
      };
    } catch (e) {
      if (isMediaError(e) || e instanceof ProbeTimeoutError) throw new SglangValueError(`Failed to load video: ${(e as Error).message}`);
      throw e;
    } finally {
      await rm(path, { force: true });
    }
  }

  async close(): Promise<void> {
    await this.prober.close();
    const d = this.dir;
    this.dir = null;
    if (d) await rm(await d, { recursive: true, force: true });
  }
}
