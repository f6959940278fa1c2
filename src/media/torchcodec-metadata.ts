/**
 * torchcodec's exact-mode stream metadata from a packet scan (meta-pytorch/torchcodec v0.11.1
 * src/torchcodec/_core/SingleStreamDecoder.cpp `scanFileAndUpdateMetadataAndIndex` + `Metadata.cpp`), fed one packet at a
 * time so long videos need no packet array:
 *   skip packets flagged discard; t = pts, or dts when pts is missing;
 *   begin = min t, end = max(t + duration), frames = packet count (0 packets: begin = end = 0);
 *   seconds(p) = (p * tb.num) / tb.den in doubles, multiplying first;
 *   fps = frames / (end_s − begin_s) when that is not 0.0, else r_frame_rate (null when 0/0).
 * decord (aarch64 workers) counts every packet, discarded ones included, and reports avg_frame_rate.
 */

/** AV_NOPTS_VALUE (INT64_MIN) as torchcodec would carry it, exactly representable in a double. */
const NOPTS = -(2 ** 63);

export interface Rational {
  num: number;
  den: number;
}

export interface TorchcodecMetadata {
  numFrames: number;
  beginSec: number;
  endSec: number;
  durationSec: number;
  averageFps: number | null;
  /** Every packet of the stream, discarded ones included (decord's `len`). */
  allPackets: number;
}

export class PacketScan {
  private frames = 0;
  private all = 0;
  private begin = Number.POSITIVE_INFINITY;
  private end = Number.NEGATIVE_INFINITY;

  /** One demuxed packet; null = N/A in ffprobe output. */
  add(pts: number | null, dts: number | null, duration: number | null, discard: boolean): void {
    this.all++;
    if (discard) return;
    const t = pts ?? dts ?? NOPTS;
    this.frames++;
    if (t < this.begin) this.begin = t;
    const e = t + (duration ?? 0);
    if (e > this.end) this.end = e;
  }

  result(timeBase: Rational, rFrameRate: Rational | null): TorchcodecMetadata {
    const b = this.frames === 0 ? 0 : this.begin;
    const e = this.frames === 0 ? 0 : this.end;
    const bs = (b * timeBase.num) / timeBase.den;
    const es = (e * timeBase.num) / timeBase.den;
    const span = es - bs;
    let averageFps: number | null;
    if (span !== 0) averageFps = this.frames / span;
    else averageFps = rFrameRate && rFrameRate.num > 0 && rFrameRate.den > 0 ? rFrameRate.num / rFrameRate.den : null;
    return { numFrames: this.frames, beginSec: bs, endSec: es, durationSec: span, averageFps, allPackets: this.all };
  }
}

/** "30000/1001" → {num, den}; "0/0" and junk → null. */
export function parseRational(s: string | undefined): Rational | null {
  if (!s) return null;
  const m = /^(-?\d+)\/(-?\d+)$/.exec(s.trim());
  if (!m) return null;
  const num = Number(m[1]);
  const den = Number(m[2]);
  return den === 0 && num === 0 ? null : { num, den };
}
