/**
 * The one ffprobe invocation both decoders run, and the streaming parser of its output. The scan
 * reads packets only (no decoding) of the first video stream, which is what torchcodec's exact
 * mode does. Inputs are restricted to plain container demuxers and the file protocol so a
 * playlist or concat script inside "media" cannot make ffprobe open other files or URLs.
 */
import { PacketScan, parseRational, type Rational, type TorchcodecMetadata } from "../../src/media/torchcodec-metadata.ts";

export const FORMAT_WHITELIST = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,flv,ogg,mpeg,asf,ivf,h264,hevc,obu";

export function ffprobeArgs(inputPath: string): string[] {
  return [
    "-v", "error",
    "-protocol_whitelist", "file",
    "-format_whitelist", FORMAT_WHITELIST,
    "-select_streams", "v:0",
    "-show_entries", "stream=codec_name,width,height,time_base,r_frame_rate,avg_frame_rate:packet=pts,dts,duration,flags",
    "-of", "compact=p=1:nk=0",
    inputPath,
  ];
}

export interface StreamInfo {
  codec: string;
  width: number;
  height: number;
  timeBase: Rational;
  rFrameRate: Rational | null;
  avgFrameRate: Rational | null;
}

export interface ScanResult {
  stream: StreamInfo;
  meta: TorchcodecMetadata;
}

function num(v: string | undefined): number | null {
  if (v === undefined || v === "N/A" || v === "") return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

/**
 * Most packets a probe reads: 4.6 h at 60 fps. A few KB of container can declare ~100 M samples
 * (one stts/stsc/stsz entry each); the packet lines alone then cost this process tens of seconds.
 */
export const MAX_PROBE_PACKETS = 1_000_000;

/** Feeds ffprobe's compact output line by line (chunk boundaries anywhere). */
export class FfprobeOutputParser {
  private readonly scan = new PacketScan();
  private stream: StreamInfo | null = null;
  private rest = "";
  private packets = 0;
  /** More packets than `maxPackets`: the rest is not read (the caller stops ffprobe and refuses the media). */
  overflowed = false;

  private readonly maxPackets: number;

  constructor(maxPackets = MAX_PROBE_PACKETS) {
    this.maxPackets = maxPackets;
  }

  push(chunk: string): void {
    if (this.overflowed) return;
    const text = this.rest + chunk;
    const lines = text.split("\n");
    this.rest = lines.pop() ?? "";
    for (const l of lines) this.line(l);
  }

  private line(raw: string): void {
    const l = raw.trimEnd();
    if (l === "") return;
    const fields = l.split("|");
    const kind = fields[0];
    const kv = new Map<string, string>();
    for (let i = 1; i < fields.length; i++) {
      const f = fields[i]!;
      const eq = f.indexOf("=");
      if (eq > 0) kv.set(f.slice(0, eq), f.slice(eq + 1));
    }
    if (kind === "packet") {
      if (++this.packets > this.maxPackets) {
        this.overflowed = true;
        return;
      }
      const flags = kv.get("flags") ?? "";
      this.scan.add(num(kv.get("pts")), num(kv.get("dts")), num(kv.get("duration")), flags.includes("D"));
    } else if (kind === "stream") {
      const tb = parseRational(kv.get("time_base"));
      this.stream = {
        codec: kv.get("codec_name") ?? "unknown",
        width: num(kv.get("width")) ?? 0,
        height: num(kv.get("height")) ?? 0,
        timeBase: tb ?? { num: 0, den: 1 },
        rFrameRate: parseRational(kv.get("r_frame_rate")),
        avgFrameRate: parseRational(kv.get("avg_frame_rate")),
      };
    }
  }

  /** null when ffprobe reported no video stream. */
  finish(): ScanResult | null {
    if (this.overflowed) return null;
    if (this.rest) this.line(this.rest);
    this.rest = "";
    if (!this.stream || this.stream.timeBase.den === 0) return null;
    return { stream: this.stream, meta: this.scan.result(this.stream.timeBase, this.stream.rFrameRate) };
  }
}

export function parseFfprobeOutput(text: string): ScanResult | null {
  const p = new FfprobeOutputParser();
  p.push(text);
  return p.finish();
}
