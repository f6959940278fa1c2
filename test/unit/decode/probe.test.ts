/**
 * Frame count and average fps of generated clips, exactly as torchcodec (exact mode) reports them:
 * the expectation is computed here, independently of services/decode, from
 * `ffprobe -show_packets -of json` (torchcodec's exact-mode rule: src/media/torchcodec-metadata.ts), and both decoders
 * (native ffprobe and @ffmpeg/core wasm) must match it and each other bit for bit.
 * Clips are made with ffmpeg's wasm build, so this runs on a machine without ffmpeg; the wasm
 * decoder is checked everywhere, the native one where ffprobe is installed (required in CI).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MediaError } from "../../../src/media/errors.ts";
import { NativeProber, nativeAvailable, WasmProber } from "../../../services/decode/probers.ts";
import type { ScanResult } from "../../../services/decode/ffprobe-scan.ts";
import { requireInCi } from "../../helpers/required.ts";
import { ffmpegToFile, ffprobeFile } from "../../helpers/wasm-media.ts";

interface Clip {
  name: string;
  /** Builds the file; `after` names a clip it is derived from. */
  make: (out: string) => void | Promise<void>;
  after?: string;
  /** Extra assertions on the expectation itself (guards against a shared misunderstanding). */
  check?: (e: Expected, header: HeaderInfo) => void;
}

interface Expected {
  totalFrames: number;
  avgFps: number | null;
  width: number;
  height: number;
  codec: string;
}
interface HeaderInfo {
  nbFrames: number | null;
  rFrameRate: number;
  avgFrameRate: number | null;
  discarded: number;
}

const ff = async (args: string[]): Promise<void> => {
  const out = args.at(-1)!;
  await ffmpegToFile(["-v", "error", ...args.slice(0, -1)], out);
};
const src = (size: string, rate: string, frames: number): string[] => ["-f", "lavfi", "-i", `testsrc=size=${size}:rate=${rate}`, "-frames:v", String(frames)];
const x264 = (bf: number): string[] => ["-c:v", "libx264", "-preset", "veryfast", "-bf", String(bf), "-pix_fmt", "yuv420p"];
// VP8, not VP9: the wasm build's libvpx-vp9 runs out of its fixed memory even at 64x48.
const vp8 = ["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "200k"];

const hasNative = requireInCi(await nativeAvailable(), "native ffprobe", "the native-vs-wasm decoder comparison needs it");

let dir = "";
const file = (name: string): string => path.join(dir, name);

const CLIPS: Clip[] = [
  {
    name: "h264_30.mp4",
    make: (o) => ff([...src("64x48", "30", 60), ...x264(3), o]),
    check: (e) => {
      expect(e.totalFrames).toBe(60);
      expect(e.avgFps).toBe(30);
    },
  },
  {
    name: "h264_2997.mp4",
    make: (o) => ff([...src("64x48", "30000/1001", 45), ...x264(2), o]),
    check: (e) => expect(e.totalFrames).toBe(45),
  },
  { name: "h264_23976.mp4", make: (o) => ff([...src("64x48", "24000/1001", 31), ...x264(3), o]), check: (e) => expect(e.totalFrames).toBe(31) },
  { name: "h264_25_nobf.mp4", make: (o) => ff([...src("64x48", "25", 50), ...x264(0), o]), check: (e) => expect(e.avgFps).toBe(25) },
  { name: "h264_2997.mkv", after: "h264_2997.mp4", make: (o) => ff(["-i", file("h264_2997.mp4"), "-c", "copy", o]), check: (e, h) => expect(h.nbFrames).toBeNull() },
  {
    name: "vp8_2997.webm",
    make: (o) => ff([...src("64x48", "30000/1001", 30), ...vp8, o]),
    check: (e, h) => {
      expect(h.nbFrames).toBeNull();
      expect(e.totalFrames).toBe(30);
    },
  },
  { name: "vp8_odd_65x37.mkv", make: (o) => ff([...src("65x37", "24", 24), ...vp8, o]), check: (e) => expect([e.width, e.height]).toEqual([65, 37]) },
  // MJPEG in AVI: what OpenCV writes (the whole-request golden set's videos are such files).
  {
    name: "mjpeg_25.avi",
    make: (o) => ff([...src("64x48", "25", 20), "-c:v", "mjpeg", o]),
    check: (e) => {
      expect(e.codec).toBe("mjpeg");
      expect(e.totalFrames).toBe(20);
    },
  },
  { name: "h264_odd_33x17_444.mp4", make: (o) => ff([...src("33x17", "30", 10), "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv444p", o]) },
  {
    name: "vfr.mp4",
    make: (o) => ff([...src("64x48", "30", 45), "-vf", "setpts='if(lt(N,30),N/30,1+(N-30)/15)/TB'", "-fps_mode", "vfr", ...x264(0), o]),
    check: (e, h) => {
      expect(e.totalFrames).toBe(45);
      expect(e.avgFps).not.toBe(h.rFrameRate); // not the header's rate
    },
  },
  {
    name: "vfr.mkv",
    after: "vfr.mp4",
    make: (o) => ff(["-i", file("vfr.mp4"), "-c", "copy", o]),
    check: (e, h) => {
      expect(e.avgFps).not.toBe(h.rFrameRate);
      expect(e.avgFps).not.toBe(h.avgFrameRate); // MKV's estimated average differs from the packet span
    },
  },
  {
    name: "editlist.mp4",
    after: "h264_30_long.mp4",
    make: (o) => ff(["-ss", "0.5", "-i", file("h264_30_long.mp4"), "-c", "copy", o]),
    check: (e, h) => {
      expect(h.discarded).toBeGreaterThan(0);
      expect(e.totalFrames).toBeLessThan(h.nbFrames!); // header nb_frames counts trimmed samples
    },
  },
  { name: "offset.ts", after: "h264_30.mp4", make: (o) => ff(["-i", file("h264_30.mp4"), "-c", "copy", "-f", "mpegts", o]) },
  { name: "offset10.mp4", after: "h264_30.mp4", make: (o) => ff(["-i", file("h264_30.mp4"), "-c", "copy", "-output_ts_offset", "10", o]) },
  { name: "frames1.mp4", make: (o) => ff([...src("64x48", "30", 1), ...x264(0), o]), check: (e) => expect(e.totalFrames).toBe(1) },
  { name: "frames2.mp4", make: (o) => ff([...src("64x48", "30", 2), ...x264(0), o]), check: (e) => expect(e.totalFrames).toBe(2) },
  { name: "frames3.mp4", make: (o) => ff([...src("64x48", "30", 3), ...x264(3), o]), check: (e) => expect(e.totalFrames).toBe(3) },
  {
    name: "truncated.webm",
    after: "vp8_2997.webm",
    make: (o) => {
      const b = readFileSync(file("vp8_2997.webm"));
      writeFileSync(o, b.subarray(0, Math.floor(b.length * 0.6)));
    },
    check: (e) => expect(e.totalFrames).toBeLessThan(30),
  },
];

/** Files no decoder may accept. */
const BAD: { name: string; make: (o: string) => void | Promise<void>; after?: string }[] = [
  {
    name: "truncated_moov_at_end.mp4",
    after: "h264_30.mp4",
    make: (o) => {
      const b = readFileSync(file("h264_30.mp4"));
      writeFileSync(o, b.subarray(0, Math.floor(b.length / 2)));
    },
  },
  { name: "random.bin", make: (o) => writeFileSync(o, Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 2654435761) >>> 24))) },
  { name: "empty.mp4", make: (o) => writeFileSync(o, Buffer.alloc(0)) },
  { name: "audio_only.m4a", make: (o) => ff(["-f", "lavfi", "-i", "sine=frequency=440:duration=0.2", "-c:a", "aac", o]) },
  { name: "playlist.m3u8", make: (o) => writeFileSync(o, "#EXTM3U\n#EXTINF:1,\n/etc/hostname\n") },
];

/**
 * torchcodec exact mode from ffprobe's JSON (written independently of src/media/torchcodec-metadata.ts),
 * read by the wasm ffprobe; memoised per file.
 */
const expectations = new Map<string, { e: Expected; h: HeaderInfo } | null>();
async function expectedFromFfprobe(f: string): Promise<{ e: Expected; h: HeaderInfo } | null> {
  if (!expectations.has(f)) expectations.set(f, await readExpectation(f));
  return expectations.get(f)!;
}
async function readExpectation(f: string): Promise<{ e: Expected; h: HeaderInfo } | null> {
  let out: string;
  try {
    out = await ffprobeFile(["-v", "error", "-select_streams", "v:0", "-show_packets", "-show_streams", "-of", "json"], f);
  } catch {
    return null;
  }
  if (out.trim() === "") return null;
  const j = JSON.parse(out) as {
    streams?: { codec_name: string; width: number; height: number; time_base: string; r_frame_rate: string; avg_frame_rate: string; nb_frames?: string }[];
    packets?: { pts?: number; dts?: number; duration?: number; flags: string }[];
  };
  const s = j.streams?.[0];
  if (!s) return null;
  const all = j.packets ?? [];
  const kept = all.filter((p) => !p.flags.includes("D"));
  const [tn, td] = s.time_base.split("/").map(Number) as [number, number];
  const ratio = (r: string): number | null => {
    const [a, b] = r.split("/").map(Number) as [number, number];
    return b === 0 ? null : a / b;
  };
  let begin = 0;
  let end = 0;
  if (kept.length) {
    begin = Math.min(...kept.map((p) => p.pts ?? p.dts!));
    end = Math.max(...kept.map((p) => (p.pts ?? p.dts!) + (p.duration ?? 0)));
  }
  const bs = (begin * tn) / td;
  const es = (end * tn) / td;
  const fps = es - bs !== 0 ? kept.length / (es - bs) : ratio(s.r_frame_rate);
  return {
    e: { totalFrames: kept.length, avgFps: fps, width: s.width, height: s.height, codec: s.codec_name },
    h: { nbFrames: s.nb_frames ? Number(s.nb_frames) : null, rFrameRate: ratio(s.r_frame_rate)!, avgFrameRate: ratio(s.avg_frame_rate), discarded: all.length - kept.length },
  };
}

const toExpected = (r: ScanResult): Expected => ({
  totalFrames: r.meta.numFrames,
  avgFps: r.meta.averageFps,
  width: r.stream.width,
  height: r.stream.height,
  codec: r.stream.codec,
});

const native = hasNative ? new NativeProber() : null;
const wasm = new WasmProber({ threads: 2 });

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "kvedge-probe-"));
  const all = [{ name: "h264_30_long.mp4", make: (o: string) => ff([...src("64x48", "30", 90), ...x264(0), "-g", "30", o]) }, ...CLIPS, ...BAD];
  // Two waves: sources, then files derived from them (the in-process wasm ffmpeg runs one at a time).
  for (const wave of [all.filter((c) => !("after" in c) || !c.after), all.filter((c) => "after" in c && c.after)]) {
    for (const c of wave) await c.make(file(c.name));
  }
}, 120_000);

afterAll(async () => {
  await wasm.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("probe = torchcodec exact-mode metadata", () => {
  it("generated every clip kind", () => {
    expect(CLIPS.length).toBeGreaterThanOrEqual(18);
  });

  for (const c of CLIPS) {
    it.concurrent(`${c.name}: wasm equals the packet-derived expectation`, async () => {
      const x = await expectedFromFfprobe(file(c.name));
      expect(x).not.toBeNull();
      const { e, h } = x!;
      c.check?.(e, h);
      const w = await wasm.probe(file(c.name));
      expect(toExpected(w)).toEqual(e);
      // bit-exact fps, not just toEqual's Object.is on the float
      expect(Object.is(w.meta.averageFps, e.avgFps)).toBe(true);
    });
  }

  for (const b of BAD) {
    it.concurrent(`${b.name}: ${hasNative ? "both decoders refuse" : "the wasm decoder refuses"}`, async () => {
      expect(await expectedFromFfprobe(file(b.name))).toBeNull();
      for (const p of native ? [native, wasm] : [wasm]) {
        const err = await p.probe(file(b.name)).then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(MediaError);
        expect((err as MediaError).reason).toBe("unprobeable_media");
      }
    });
  }

  it("29.97 and 23.976 come from the packet span, not the nominal rate", async () => {
    const e = (await expectedFromFfprobe(file("h264_23976.mp4")))!.e;
    // 31 frames of 1001/24000 s: 31 / (31*1001/24000) computed in doubles.
    expect(e.avgFps).toBe(31 / ((31 * 1001) / 24000));
    const m = (await expectedFromFfprobe(file("h264_2997.mkv")))!.e;
    expect(m.totalFrames).toBe(45);
  });
});

// Native ffprobe (when installed; required under CI=true) must give exactly the wasm answer for
// every clip, packet count included: the two decoders are interchangeable.
describe.skipIf(!hasNative)("native ffprobe = wasm ffprobe", () => {
  for (const c of CLIPS) {
    it.concurrent(`${c.name}: native equals wasm and the expectation, bit for bit`, async () => {
      const e = (await expectedFromFfprobe(file(c.name)))!.e;
      const [n, w] = await Promise.all([native!.probe(file(c.name)), wasm.probe(file(c.name))]);
      expect(toExpected(n)).toEqual(e);
      expect(Object.is(n.meta.averageFps, w.meta.averageFps)).toBe(true);
      expect(w.meta.allPackets).toBe(n.meta.allPackets);
      expect(n.stream.timeBase).toEqual(w.stream.timeBase);
    });
  }
});
